"""``recover_log_dir`` on a ``kafka`` cluster (#36): KIP-112's "fix disks and reboot broker".

Kafka keeps a failed dir offline until its broker restarts and its protocol cannot restart a
broker, so the restart is the operator's: the runbook cordons the dir (where the brokers have
KIP-1066's ``cordoned.log.dirs``), waits for the operator to replace the disk, restart the broker
and confirm it (a gate: no worker held, audited), then verifies from Kafka's own answers. No
replica is moved (the restarted broker re-creates them from their leaders), so no reassignment or
throttle. ``remove`` is refused: ``log.dirs`` is static config, the operator's to edit. Steps
wait, never fail, while Kafka does not answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from audit import targets
from broker_agent.contract.choices import ErrorCode as AgentErrorCode
from broker_agent.contract.choices import LogDirState
from broker_agent.contract.client import AgentError
from broker_agent.contract.models import BrokerSnapshot, ClusterMetadata, partition_key
from workflows.kinds import Actions, Plan, Refusal, ReviewRow, StepDef, StepResult
from workflows.kinds.cluster_access import Unreachable
from workflows.kinds.cluster_writes import KAFKA_CONNECT_SECONDS, KAFKA_REQUEST_SECONDS
from workflows.kinds.commands import preflight_reads, run_command, waits_when_unreachable
from workflows.kinds.disks_plan import (
    DiskRefusal,
    RecoverParams,
    RecoveryMode,
    ReplicaRef,
    partitions_by_key,
    replicas_on,
)

if TYPE_CHECKING:
    from workflows.steps import StepContext

    KafkaRecoverContext = StepContext[RecoverParams, "KafkaRecoverPlan"]

__all__ = [
    "CORDONED_LOG_DIRS",
    "NO_REPLICA_MOVES",
    "KafkaRecoverAction",
    "KafkaRecoverPlan",
    "kafka_recover_plan",
    "kafka_recover_review",
    "kafka_recover_steps",
]

POLL_SECONDS = 2.0
#: KIP-1066's broker config (Kafka 4.3).
CORDONED_LOG_DIRS = "cordoned.log.dirs"
#: ``verify`` fails after this many runs (every 2 s) with the dir still not ONLINE.
VERIFY_MAX_ATTEMPTS = 90

NO_REPLICA_MOVES = (
    "none: the restarted broker re-creates the dir's replicas on the new disk from their "
    "leaders (Kafka moved leadership off them when the dir failed); no reassignment, so no "
    "replication throttle (leader/follower.replication.throttled.rate) is set"
)


class KafkaRecoverAction:
    """Audit actions of the commands this kind sends to a kafka cluster."""

    # the agents' actions: one audit trail per dir whichever backend
    CORDON = "disks.cordon_log_dir"
    UNCORDON = "disks.uncordon_log_dir"


class KafkaRecoverPlan(Actions):
    summary: str
    backend: str  # "kafka": how the kind tells this plan from the agents' runbook
    broker: int
    log_dir: str
    log_dir_path: str
    mode: Literal["replace", "remove"]
    restart: Literal["sim", "manual"]  # always manual: Kafka has no restart call
    cordon: str  # "IncrementalAlterConfigs ..." or "unavailable: <reason>"
    replica_count: int
    replicas: list[ReplicaRef]
    replica_moves: str
    steps: list[str]


@contextmanager
def _kafka(cluster: str) -> Iterator[Any]:
    """The sync's Kafka source of ``cluster`` (its reads: Metadata, DescribeLogDirs) for one
    plan or step run; a Kafka that does not answer is :class:`Unreachable` (wait)."""
    from console.models import Cluster
    from console.sync.kafka_source import KafkaClusterSource

    row = Cluster.objects.get(name=cluster)
    source = KafkaClusterSource(
        row.kafka_client_kwargs(),
        timeout=KAFKA_CONNECT_SECONDS,
        request_timeout=KAFKA_REQUEST_SECONDS,
    )
    try:
        yield source
    finally:
        source.close()


def _read(cluster: str, broker: int) -> tuple[ClusterMetadata, BrokerSnapshot | None]:
    """Metadata, and ``broker``'s DescribeLogDirs as a snapshot (``None``: not live now)."""
    from console.sync.sources import SourceError

    with _kafka(cluster) as source:
        try:
            md = source.metadata(None)
            live = {b.broker_id for b in md.brokers if b.alive}
            snap = source.snapshot(broker, "", None) if broker in live else None
        except SourceError as exc:
            raise Unreachable(str(exc)) from exc
    return md, snap


def kafka_recover_plan(params: RecoverParams) -> Plan[KafkaRecoverPlan]:
    """The plan, from Kafka's answers now (see the module docstring)."""
    from console import capabilities
    from console.models import Cluster

    cluster, broker, name = params.cluster, params.broker, params.log_dir
    with preflight_reads(cluster):
        row = Cluster.objects.get(name=cluster)
        if params.mode == RecoveryMode.REMOVE:
            raise Refusal(
                AgentErrorCode.INVALID_REQUEST,
                "On a kafka cluster a dir is removed by editing the broker's static log.dirs "
                "config and restarting it, outside Strata: recover it by replace.",
            )
        md, snap = _read(cluster, broker)
    if broker not in {b.broker_id for b in md.brokers}:
        known = ", ".join(str(b.broker_id) for b in md.brokers)
        raise Refusal(
            DiskRefusal.UNKNOWN_BROKER,
            f"Broker {broker} is not in {cluster}'s metadata (brokers: {known}).",
        )
    if snap is None:
        raise Refusal(
            DiskRefusal.UNKNOWN_BROKER,
            f"Broker {broker} is not live: DescribeLogDirs cannot be asked of it.",
            409,
        )
    dirs = {d.name: d for d in snap.log_dirs}
    if name not in dirs:
        raise Refusal(
            DiskRefusal.LOG_DIR_NOT_FOUND,
            f"Broker {broker} has no log dir {name!r} (log dirs: "
            f"{', '.join(sorted(dirs)) or 'none'}).",
        )
    d = dirs[name]
    if d.state == LogDirState.ONLINE:
        raise Refusal(
            DiskRefusal.LOG_DIR_NOT_OFFLINE,
            f"{name} on broker {broker} is ONLINE (DescribeLogDirs answers it without an error): "
            "only a failed log dir is recovered.",
            409,
        )
    parts = partitions_by_key(md)
    rows: list[dict[str, Any]] = []
    for r in replicas_on(snap, name):
        key = partition_key(r.topic, r.partition)
        if key not in parts:
            continue
        _t, p = parts[key]
        rows.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "leader": p.leader,
                "isr": list(p.isr),
                "leader_on_failed_dir": p.leader == broker,
                "leaderless": p.leader < 0,
            }
        )
    cordon = capabilities.by_key(row)[capabilities.CORDON]
    steps = (
        ["cordon_log_dir", "confirm_disk_replaced", "uncordon_log_dir"] if cordon.supported else []
    )
    steps += ["restart_broker", "verify"]
    cordon_text = (
        f"IncrementalAlterConfigs: APPEND {d.path} to broker {broker}'s {CORDONED_LOG_DIRS}"
        if cordon.supported
        else f"unavailable: {cordon.reason}"
    )
    actions = KafkaRecoverPlan(
        summary=(
            f"Recover {name} on broker {broker}: "
            + (
                "cordon it, wait for an operator to replace the disk and confirm, lift the "
                f"cordon, wait for the operator to restart broker {broker} and confirm, "
                if cordon.supported
                else f"wait for an operator to replace the disk, restart broker {broker} and "
                "confirm, "
            )
            + "then verify the dir ONLINE (DescribeLogDirs), its replicas back in the "
            "ISR (Metadata) and no reassignment left (ListPartitionReassignments)."
        ),
        backend=row.backend,
        broker=broker,
        log_dir=name,
        log_dir_path=d.path or name,
        mode=params.mode,
        restart="manual",
        cordon=cordon_text,
        replica_count=len(rows),
        replicas=[ReplicaRef(topic=x["topic"], partition=x["partition"]) for x in rows],
        replica_moves=NO_REPLICA_MOVES,
        steps=steps,
    )
    information: dict[str, Any] = {
        "log_dir_state": d.state,
        "log_dir_error": d.error,
        "replicas": rows,
        "partitions_leaderless": [
            partition_key(x["topic"], x["partition"]) for x in rows if x["leaderless"]
        ],
        "partitions_led_from_failed_dir": [
            partition_key(x["topic"], x["partition"]) for x in rows if x["leader_on_failed_dir"]
        ],
        "good_log_dirs": [
            {"name": g.name, "usable_bytes": g.usable_bytes}
            for g in snap.log_dirs
            if g.name != name and g.state in LogDirState.GOOD
        ],
    }
    return Plan(actions, information)


def kafka_recover_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    broker = actions["broker"]
    where = f"broker {broker} {actions['log_dir']}"
    replicas = ", ".join(
        partition_key(x["topic"], x["partition"]) for x in actions["replicas"][:20]
    )
    more = len(actions["replicas"]) - 20
    replicas += f" and {more} more" if more > 0 else ""
    rows = [
        ReviewRow(
            "Cordon the log dir (KIP-1066 cordoned.log.dirs)",
            where,
            str(information.get("log_dir_state", "?")),
            actions["cordon"],
        ),
        ReviewRow(
            "Move replicas to other brokers",
            replicas or "no replicas",
            "",
            "none",
            actions["replica_moves"],
        ),
    ]
    if "confirm_disk_replaced" in actions["steps"]:
        rows += [
            ReviewRow("Wait for an operator to replace the disk and confirm", where),
            ReviewRow("Lift the cordon (the new disk takes the replicas)", where),
            ReviewRow(
                f"Wait for an operator to restart broker {broker} and confirm",
                f"broker {broker}",
                "running",
                "restarted by hand",
            ),
        ]
    else:
        rows.append(
            ReviewRow(
                f"Wait for an operator to replace the disk and restart broker {broker}, and "
                "confirm",
                where,
                "OFFLINE",
                "restarted by hand",
            )
        )
    rows.append(
        ReviewRow(
            "Verify: the dir ONLINE, its replicas back in the ISR, no reassignment left (the "
            "restarted broker re-creates them from their leaders; what only the old disk held "
            "is given up)",
            replicas or "no replicas",
            "offline replicas",
            "in the ISR",
            f"{actions['replica_count']} replicas",
            destructive=True,
        )
    )
    return rows


def _cordoned(cluster: str, broker: int, name: str) -> dict[str, Any]:
    _md, snap = _read(cluster, broker)
    d = next((x for x in snap.log_dirs if x.name == name), None) if snap else None
    return {"log_dir": name, "cordoned": d.cordoned if d else None}


def _alter_cordon(cluster: str, broker: int, op: str, path: str) -> None:
    """IncrementalAlterConfigs ``op`` (APPEND / SUBTRACT) of ``path`` on the broker's
    ``cordoned.log.dirs``; Kafka's refusal as an :class:`AgentError`."""
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    from workflows.kinds.cluster_writes import KafkaWrites, writes_for

    resource = ConfigResource(
        ConfigResourceType.BROKER,
        str(broker),
        configs={CORDONED_LOG_DIRS: (AlterConfigOp[op], path)},
    )
    with writes_for(cluster) as writes:
        assert isinstance(writes, KafkaWrites)
        admin = writes.admin
        answer = KafkaWrites._ask(
            lambda: admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
        )
    result = answer.get("broker", {}).get(str(broker), "no answer")
    if result != "OK":
        raise AgentError(400, AgentErrorCode.INVALID_REQUEST, str(result))


def _cordon_step(ctx: KafkaRecoverContext, action: str, cordon: bool) -> StepResult:
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir
    path = ctx.plan.log_dir_path

    def call() -> dict[str, Any]:
        _alter_cordon(cluster, broker, "APPEND" if cordon else "SUBTRACT", path)
        return {"log_dir": name, "path": path, "cordoned": cordon}

    try:
        after, now = run_command(
            ctx,
            action,
            call,
            **targets.log_dir(cluster, broker, name),
            before=lambda: _cordoned(cluster, broker, name),
        )
    except AgentError as exc:
        if exc.retriable or exc.status >= 500:
            raise
        return StepResult.fail(exc.error, exc.message)
    return StepResult.done({"cordoned": after.get("cordoned"), "applied_now": now})


@waits_when_unreachable
def cordon_log_dir(ctx: KafkaRecoverContext) -> StepResult:
    """APPEND the dir's path to the broker's ``cordoned.log.dirs`` (IncrementalAlterConfigs):
    idempotent, a listed path is listed once."""
    return _cordon_step(ctx, KafkaRecoverAction.CORDON, cordon=True)


@waits_when_unreachable
def uncordon_log_dir(ctx: KafkaRecoverContext) -> StepResult:
    """SUBTRACT the replaced dir's path from ``cordoned.log.dirs`` before the restart, so the
    restarted broker re-creates the dir's replicas on the new disk."""
    return _cordon_step(ctx, KafkaRecoverAction.UNCORDON, cordon=False)


def confirm_disk_replaced(ctx: KafkaRecoverContext) -> StepResult:
    """The manual disk replacement: the engine runs this only after an operator confirmed."""
    return StepResult.done({"confirmed_by": ctx.step.confirmed_by_id})


def confirm_broker_restarted(ctx: KafkaRecoverContext) -> StepResult:
    """The manual restart (or replacement and restart): run only once an operator confirmed."""
    return StepResult.done({"confirmed_by": ctx.step.confirmed_by_id})


def _reassigning(cluster: str, keys: list[tuple[str, int]]) -> list[str]:
    """The planned partitions ListPartitionReassignments lists as being reassigned."""
    from kafka import TopicPartition

    from workflows.kinds.cluster_writes import KafkaWrites, writes_for

    if not keys:
        return []
    with writes_for(cluster) as writes:
        assert isinstance(writes, KafkaWrites)
        admin = writes.admin
        listed = KafkaWrites._ask(
            lambda: admin.list_partition_reassignments([TopicPartition(t, p) for t, p in keys])
        )
    return sorted(partition_key(tp.topic, tp.partition) for tp in listed)


@waits_when_unreachable
def verify(ctx: KafkaRecoverContext) -> StepResult:
    """Until the dir is ONLINE, the planned replicas in the ISR and none being reassigned."""
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir
    md, snap = _read(cluster, broker)
    if snap is None:
        return StepResult.wait(f"Broker {broker} is not live yet.", retry_in=POLL_SECONDS)
    d = next((x for x in snap.log_dirs if x.name == name), None)
    state = d.state if d else "REMOVED"
    if state != LogDirState.ONLINE:
        if ctx.step.attempts >= VERIFY_MAX_ATTEMPTS:
            return StepResult.fail(
                DiskRefusal.LOG_DIR_STILL_OFFLINE,
                f"{name} on broker {broker} is {state} (DescribeLogDirs) after the restart: "
                "is the new disk mounted at the dir's path?",
            )
        return StepResult.wait(
            f"{name} on broker {broker} is {state} in DescribeLogDirs.", retry_in=POLL_SECONDS
        )
    parts = partitions_by_key(md)
    keys = [
        (r["topic"], r["partition"])
        for r in ctx.plan.replicas
        if partition_key(r["topic"], r["partition"]) in parts
        and broker in parts[partition_key(r["topic"], r["partition"])][1].replicas
    ]
    in_sync = [k for k in keys if broker in parts[partition_key(*k)][1].isr]
    ctx.progress(len(in_sync), len(keys), "replicas")
    moving = _reassigning(cluster, keys)
    if len(in_sync) < len(keys) or moving:
        return StepResult.wait(
            f"Broker {broker}: {len(in_sync)} of {len(keys)} replicas back in the ISR; "
            f"{len(moving)} partition(s) being reassigned.",
            retry_in=POLL_SECONDS,
        )
    return StepResult.done(
        {
            "log_dir_state": state,
            "replicas_in_isr": len(in_sync),
            "reassignments": [],
        }
    )


def kafka_recover_steps(params: RecoverParams, plan: KafkaRecoverPlan) -> list[StepDef]:
    """With a cordon, two manual steps around lifting it (as the agents' runbook: the restarted
    broker must find the new disk uncordoned); without, one: replace the disk and restart."""
    broker, name = params.broker, params.log_dir
    restart_then = "Kafka brings the dir back only when the broker process restarts), then confirm."
    steps: list[StepDef] = []
    if "cordon_log_dir" in plan.steps:
        steps += [
            StepDef("cordon_log_dir", cordon_log_dir, label=f"Cordon {name}"),
            StepDef(
                "confirm_disk_replaced",
                confirm_disk_replaced,
                label="Disk replaced (manual)",
                gate=True,
                gate_prompt=(
                    f"Replace the disk of {name} on broker {broker} (an empty disk mounted at "
                    f"{plan.log_dir_path}), then confirm. The cordon is lifted next and then "
                    f"broker {broker} restarted."
                ),
            ),
            StepDef("uncordon_log_dir", uncordon_log_dir, label=f"Lift the cordon of {name}"),
            StepDef(
                "restart_broker",
                confirm_broker_restarted,
                label=f"Restart broker {broker} (manual)",
                gate=True,
                gate_prompt=f"Restart broker {broker} ({restart_then}",
            ),
        ]
    else:
        steps.append(
            StepDef(
                "restart_broker",
                confirm_broker_restarted,
                label=f"Replace the disk and restart broker {broker} (manual)",
                gate=True,
                gate_prompt=(
                    f"Replace the disk of {name} on broker {broker} (mounted at "
                    f"{plan.log_dir_path}) and restart broker {broker} ({restart_then}"
                ),
            )
        )
    steps.append(
        StepDef(
            "verify",
            verify,
            label="Verify: dir ONLINE, replicas in the ISR, no reassignment",
            unit="replicas",
            total=plan.replica_count,
        )
    )
    return steps
