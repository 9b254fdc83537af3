"""``recover_log_dir`` on a ``kafka`` cluster (#36): KIP-112's "fix disks and reboot broker".

Kafka keeps a failed dir offline until its broker restarts and its protocol cannot restart a
broker, so the restart is the operator's: the runbook cordons the dir (where the brokers have
KIP-1066's ``cordoned.log.dirs``), optionally moves the dir's partitions to other brokers under a
throttle (``move_replicas``, :mod:`.disks_kafka_moves`), waits for the operator to replace the
disk, restart the broker and confirm it (gates: no worker held, audited), verifies from Kafka's
answers about that broker and those partitions, then elects the preferred leaders that are
broker N, as ``auto.leader.rebalance`` would later. ``remove`` is refused: ``log.dirs`` is static
config, the operator's to edit. Steps wait, never fail, while Kafka does not answer.
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
from workflows.kinds.disks_kafka_moves import (
    DEFAULT_THROTTLE_BYTES_PER_S,
    NO_IN_BROKER_MOVES,
    Candidate,
    ReplicaMove,
    ReplicationThrottle,
    ToMove,
    moves_review,
    place_moves,
    reassign_replicas,
    refusal_text,
    remove_replication_throttle,
    replication_throttle,
    set_replication_throttle,
    wait_reassignments,
)
from workflows.kinds.disks_plan import (
    DiskRefusal,
    RecoverParams,
    RecoveryMode,
    ReplicaRef,
    partitions_by_key,
    replicas_on,
)

if TYPE_CHECKING:
    from workflows.kinds.cluster_writes import KafkaWrites
    from workflows.steps import StepContext

    KafkaRecoverContext = StepContext[RecoverParams, "KafkaRecoverPlan"]

__all__ = [
    "CORDONED_LOG_DIRS",
    "DEFAULT_THROTTLE_BYTES_PER_S",
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
ELECT_PREFERRED = (
    "ElectLeaders PREFERRED, after the restart, of the partitions whose preferred leader is "
    "broker {broker} and that it has rejoined the ISR of (ELECTION_NOT_NEEDED is fine)"
)


class KafkaRecoverAction:
    """Audit actions of the commands this kind sends to a kafka cluster."""

    # the agents' actions: one audit trail per dir whichever backend
    CORDON = "disks.cordon_log_dir"
    UNCORDON = "disks.uncordon_log_dir"
    ELECT_PREFERRED = "disks.elect_preferred_leaders"


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
    # since move_replicas (absent from older plans): the reassignments and their throttle
    moves: list[ReplicaMove] | None = None
    throttle: ReplicationThrottle | None = None
    elect_preferred: str | None = None


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


#: what the moves are planned from: the candidate brokers and each replica's size
#: ``(broker, topic, partition) -> bytes``, both from DescribeLogDirs
Room = tuple[dict[int, Candidate], dict[tuple[int, str, int], int]]


def _read(
    cluster: str, broker: int, moves: bool = False
) -> tuple[ClusterMetadata, BrokerSnapshot | None, Room | None]:
    """Metadata, ``broker``'s DescribeLogDirs as a snapshot (``None``: not live now), and with
    ``moves`` every live broker's room: one read of the cluster (planning only)."""
    from console.sync.sources import SourceError

    with _kafka(cluster) as source:
        try:
            md = source.metadata(None)
            live = {b.broker_id for b in md.brokers if b.alive}
            snap = source.snapshot(broker, "", None) if broker in live else None
            room = _room(source, broker, live) if moves and snap is not None else None
        except SourceError as exc:
            raise Unreachable(str(exc)) from exc
    return md, snap, room


def _room(source: Any, broker: int, live: set[int]) -> Room:
    """Each other live broker's good, uncordoned dirs with KIP-827's usable bytes, its rack
    (Metadata), and every replica's size; a broker whose DescribeLogDirs fails is a wait."""
    racks = {b: rack for b, (_host, _port, rack) in source.read().brokers.items()}
    candidates: dict[int, Candidate] = {}
    sizes: dict[tuple[int, str, int], int] = {}
    for b in sorted(live):
        snap = source.snapshot(b, "", None)
        for r in snap.replicas:
            sizes[(b, r.topic, r.partition)] = r.size_bytes
        if b != broker:
            good = {
                d.path or d.name: d.usable_bytes
                for d in snap.log_dirs
                if d.state == LogDirState.ONLINE and not d.cordoned
            }
            candidates[b] = Candidate(b, racks.get(b), good)
    return candidates, sizes


def _plan_moves(
    params: RecoverParams, rows: list[dict[str, Any]], room: Room | None
) -> tuple[list[ReplicaMove], dict[str, int], dict[str, str]]:
    """The moves of ``rows``' partitions off the broker (or the refusal when one fits
    nowhere), each partition's size on its leader, and why the others stay."""
    assert room is not None
    candidates, sizes = room
    wanted = [
        ToMove(
            x["topic"],
            x["partition"],
            x["replicas"],
            x["leader"],
            sizes.get((x["leader"], x["topic"], x["partition"]), 0),
        )
        for x in rows
    ]
    placed = place_moves(params.broker, wanted, candidates)
    if placed.refused:
        raise Refusal(DiskRefusal.INSUFFICIENT_SPACE, refusal_text(placed.refused), 409)
    return placed.moves, {partition_key(m.topic, m.partition): m.size for m in wanted}, placed.stays


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
        md, snap, room = _read(cluster, broker, moves=params.move_replicas)
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
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "preferred_leader": p.replicas[0] if p.replicas else -1,
                "leader_on_failed_dir": p.leader == broker,
                "leaderless": p.leader < 0,
            }
        )
    cordon = capabilities.by_key(row)[capabilities.CORDON]
    moves: list[ReplicaMove] = []
    sizes: dict[str, int] = {}
    stays: dict[str, str] = {}
    if params.move_replicas:
        moves, sizes, stays = _plan_moves(params, rows, room)
    steps = ["cordon_log_dir"] if cordon.supported else []
    if moves:
        steps += [
            "set_replication_throttle",
            "reassign_replicas",
            "wait_reassignments",
            "remove_replication_throttle",
        ]
    steps += ["confirm_disk_replaced", "uncordon_log_dir"] if cordon.supported else []
    steps += ["restart_broker", "verify", "elect_preferred_leaders"]
    cordon_text = (
        f"IncrementalAlterConfigs: APPEND {d.path} to broker {broker}'s {CORDONED_LOG_DIRS}"
        if cordon.supported
        else f"unavailable: {cordon.reason}"
    )
    throttle = replication_throttle(moves, params.throttle_bytes_per_s) if moves else None
    moved = (
        f"move {len(moves)} partition(s) to other brokers (AlterPartitionReassignments, "
        f"throttled at {params.throttle_bytes_per_s} bytes/s) and wait for them, "
        if moves
        else ""
    )
    extra: dict[str, Any] = {"moves": moves, "throttle": throttle} if moves else {}
    actions = KafkaRecoverPlan(
        summary=(
            f"Recover {name} on broker {broker}: "
            + ("cordon it, " if cordon.supported else "")
            + moved
            + (
                "wait for an operator to replace the disk and confirm, lift the cordon, wait "
                f"for the operator to restart broker {broker} and confirm, "
                if cordon.supported
                else f"wait for an operator to replace the disk, restart broker {broker} and "
                "confirm, "
            )
            + "then verify the dir ONLINE (DescribeLogDirs), its replicas back in the "
            "ISR (Metadata) and no reassignment left (ListPartitionReassignments), and elect "
            f"the preferred leaders that are broker {broker}."
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
        replica_moves=(
            f"{len(moves)} partition(s) reassigned off broker {broker} to other brokers; "
            + NO_IN_BROKER_MOVES
            if moves
            else NO_REPLICA_MOVES
        ),
        steps=steps,
        elect_preferred=ELECT_PREFERRED.format(broker=broker),
        **extra,
    )
    preferring = [
        partition_key(t.name, p.partition)
        for t in md.topics
        for p in t.partitions
        if p.replicas and p.replicas[0] == broker
    ]
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
        # Kafka moved leadership off the failed dir when it failed: who leads them now
        "leaders_now": [
            {
                "partition": partition_key(x["topic"], x["partition"]),
                "preferred_leader": x["preferred_leader"],
                "leader": x["leader"],
            }
            for x in rows
        ],
        "partitions_preferring_broker": len(preferring),
        "partitions_preferring_broker_not_led_by_it": sum(
            1 for k in preferring if parts[k][1].leader != broker
        ),
        "move_bytes": sizes,
        "not_moved": stays,  # move_replicas: re-created on the broker at the restart, and why
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
    leaders = [
        f"{x['partition']} led by {x['leader']} (preferred {x['preferred_leader']})"
        if x["leader"] >= 0
        else f"{x['partition']} has no leader"
        for x in information.get("leaders_now", [])
    ]
    rows = [
        ReviewRow(
            "Cordon the log dir (KIP-1066 cordoned.log.dirs)",
            where,
            str(information.get("log_dir_state", "?")),
            actions["cordon"],
        ),
    ]
    if "leaders_now" in information:
        rows.append(
            ReviewRow(
                "Leadership: Kafka moved it off the failed dir when it failed (Metadata)",
                replicas or "no replicas",
                f"offline on broker {broker}",
                "; ".join(leaders[:10])
                + (f" and {len(leaders) - 10} more" if len(leaders) > 10 else ""),
            )
        )
    rows += moves_review(actions, information)
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
    if "elect_preferred_leaders" in actions["steps"]:
        count = information.get("partitions_preferring_broker")
        rows.append(
            ReviewRow(
                "Elect the preferred leaders (leadership moves back to broker "
                f"{broker}, as auto.leader.rebalance would)",
                f"{count if count is not None else '?'} partitions preferring broker {broker}",
                "led by other replicas",
                f"led by broker {broker}",
                actions.get("elect_preferred") or "",
            )
        )
    return rows


def _cordoned(cluster: str, broker: int, name: str) -> dict[str, Any]:
    _md, snap, _room = _read(cluster, broker)
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


@contextmanager
def _writes(cluster: str) -> Iterator[KafkaWrites]:
    from workflows.kinds.cluster_writes import KafkaWrites, writes_for

    with writes_for(cluster) as writes:
        assert isinstance(writes, KafkaWrites)
        yield writes


@waits_when_unreachable
def verify(ctx: KafkaRecoverContext) -> StepResult:
    """Until the dir is ONLINE, the planned replicas still on the broker in the ISR and none
    being reassigned. Each poll asks about that broker and those partitions only (DescribeCluster,
    its DescribeLogDirs, Metadata and ListPartitionReassignments of the planned partitions),
    never the whole cluster."""
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir
    keys = [(r["topic"], r["partition"]) for r in ctx.plan.replicas]
    with _writes(cluster) as kafka:
        if broker not in kafka.live_brokers():
            return StepResult.wait(f"Broker {broker} is not live yet.", retry_in=POLL_SECONDS)
        dirs = kafka.log_dirs(broker, keys)
        d = next((x for x in dirs if x["log_dir"] == ctx.plan.log_dir_path), None)
        state = (
            "REMOVED"
            if d is None
            else LogDirState.ONLINE
            if d["error_code"] == 0
            else LogDirState.OFFLINE
        )
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
        parts = kafka.topics_partitions([t for t, _ in keys]) if keys else {}
        here = [k for k in keys if broker in getattr(parts.get(k[0], {}).get(k[1]), "replicas", [])]
        in_sync = [k for k in here if broker in parts[k[0]][k[1]].isr]
        ctx.progress(len(in_sync), len(here), "replicas")
        moving = sorted(partition_key(*k) for k in kafka.reassignments(keys))
    if len(in_sync) < len(here) or moving:
        return StepResult.wait(
            f"Broker {broker}: {len(in_sync)} of {len(here)} replicas back in the ISR; "
            f"{len(moving)} partition(s) being reassigned.",
            retry_in=POLL_SECONDS,
        )
    return StepResult.done(
        {
            "log_dir_state": state,
            "replicas_in_isr": len(in_sync),
            "moved_off_broker": len(keys) - len(here),
            "reassignments": [],
        }
    )


@waits_when_unreachable
def elect_preferred_leaders(ctx: KafkaRecoverContext) -> StepResult:
    """ElectLeaders PREFERRED of the partitions whose preferred leader is broker N, not led by
    it and with it back in their ISR (one Metadata read, once): the restart moved leadership
    off every partition of N, and ``auto.leader.rebalance`` would move it back only later.
    ELECTION_NOT_NEEDED counts as done; a partition N has not rejoined yet is left to Kafka."""
    cluster, broker = ctx.params.cluster, ctx.params.broker
    with _writes(cluster) as kafka:

        def candidates() -> dict[str, Any]:
            parts = kafka.topics_partitions(None)
            chosen: dict[str, list[int]] = {}
            behind: list[str] = []
            for topic, ps in sorted(parts.items()):
                for p, st in sorted(ps.items()):
                    if not st.replicas or st.replicas[0] != broker or st.leader == broker:
                        continue
                    if broker in st.isr:
                        chosen.setdefault(topic, []).append(p)
                    else:
                        behind.append(partition_key(topic, p))
            return {"partitions": chosen, "not_in_isr": behind}

        before = candidates()
        if not before["partitions"]:
            return StepResult.done({"elected": [], "not_in_isr": before["not_in_isr"]})

        def call() -> dict[str, Any]:
            answers = kafka.elect_preferred(before["partitions"])
            return {partition_key(*k): e for k, e in sorted(answers.items())}

        try:
            after, now = run_command(
                ctx,
                KafkaRecoverAction.ELECT_PREFERRED,
                call,
                **targets.broker(cluster, broker),
                before=before,
            )
        except AgentError as exc:
            if exc.retriable or exc.status >= 500:
                raise
            return StepResult.fail(exc.error, exc.message)
    fine = (None, "ELECTION_NOT_NEEDED")
    return StepResult.done(
        {
            "elected": sorted(k for k, e in after.items() if e in fine),
            "not_elected": {k: e for k, e in after.items() if e not in fine},
            "not_in_isr": before["not_in_isr"],
            "applied_now": now,
        }
    )


def kafka_recover_steps(params: RecoverParams, plan: KafkaRecoverPlan) -> list[StepDef]:
    """With a cordon, two manual steps around lifting it (as the agents' runbook: the restarted
    broker must find the new disk uncordoned); without, one: replace the disk and restart. The
    moves, when planned, run before the disk gate; the election after the verification."""
    broker, name = params.broker, params.log_dir
    restart_then = "Kafka brings the dir back only when the broker process restarts), then confirm."
    steps: list[StepDef] = []
    if "cordon_log_dir" in plan.steps:
        steps.append(StepDef("cordon_log_dir", cordon_log_dir, label=f"Cordon {name}"))
    if "reassign_replicas" in plan.steps:
        count = len(plan.moves or [])
        steps += [
            StepDef(
                "set_replication_throttle",
                set_replication_throttle,
                label="Throttle replication (leader/follower.replication.throttled.*)",
            ),
            StepDef(
                "reassign_replicas",
                reassign_replicas,
                label=f"Reassign {count} partition(s) off broker {broker}",
            ),
            StepDef(
                "wait_reassignments",
                wait_reassignments,
                label="Wait for the reassignments to finish",
                unit="partitions",
                total=count,
            ),
            StepDef(
                "remove_replication_throttle",
                remove_replication_throttle,
                label="Remove the replication throttle",
            ),
        ]
    if "cordon_log_dir" in plan.steps:
        steps += [
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
    if "elect_preferred_leaders" in plan.steps:
        steps.append(
            StepDef(
                "elect_preferred_leaders",
                elect_preferred_leaders,
                label=f"Elect the preferred leaders (broker {broker})",
            )
        )
    return steps
