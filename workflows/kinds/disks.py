"""``recover_log_dir``: KIP-112 "the disk (or log directory) gets fixed", as a tracked runbook.

Replace the disk or remove the dir from the broker's config; either way the broker restarts
(Kafka keeps a failed dir offline until then; LogDirReset is no step here) and re-creates the
missing replicas on its good dirs. A DEGRADED dir is accepted (cordoned, KIP-1066) so a dying
disk can be retired; a healthy ONLINE dir is refused (``LOG_DIR_NOT_OFFLINE``). Bytes and free
space are information; only whether the replicas ``fit`` is an action. ``restart_broker`` is
done at most once per incarnation through the sim's control, else a human gate. ``verify``
produces keyless records (KIP-253 lets them go to any partition below U) with acks=all and
reads them back: nothing acknowledged may be lost. Commands: :mod:`workflows.kinds.commands`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from audit import targets
from audit.choices import AuditOutcome
from broker_agent.contract.choices import LogDirState, ReplicaState
from broker_agent.contract.client import AgentError
from broker_agent.contract.models import ClusterMetadata, partition_key
from console.choices import ClusterBackend
from workflows.errors import ErrorCode
from workflows.kinds import (
    Plan,
    Refusal,
    ReviewRow,
    StepDef,
    StepResult,
    WorkflowKind,
    register,
    size_text,
)
from workflows.kinds.cluster_access import agent, controller
from workflows.kinds.commands import (
    applied_before,
    preflight_reads,
    record_command,
    run_command,
    waits_when_unreachable,
)
from workflows.kinds.disks_kafka import (
    KafkaRecoverPlan,
    kafka_recover_plan,
    kafka_recover_review,
    kafka_recover_steps,
)
from workflows.kinds.disks_plan import (
    DiskRefusal,
    RecoverParams,
    RecoverPlan,
    RecoveryMode,
    RestartVia,
    partitions_by_key,
    plan_recovery,
    sizes_on_leaders,
)
from workflows.kinds.verification import VERIFY_RECORDS

if TYPE_CHECKING:
    from workflows.steps import StepContext

    RecoverContext = StepContext[RecoverParams, RecoverPlan]

__all__ = ["DiskAction", "DiskRefusal", "RecoverLogDir", "RecoveryMode", "plan_recovery"]

#: ``verify`` checks at most this many affected partitions with a produce / consume round trip.
VERIFY_MAX_PARTITIONS = 50
#: ``verify`` waits this many attempts (every 2 s) for OfflineReplicaCount to reach 0.
VERIFY_MAX_ATTEMPTS = 30
POLL_SECONDS = 2.0


class DiskAction:
    """Audit actions of the commands this kind sends."""

    CORDON = "disks.cordon_log_dir"
    UNCORDON = "disks.uncordon_log_dir"
    REMOVE = "disks.remove_log_dir"
    RESTART = "disks.restart_broker"
    #: the broker's incarnation seen before the restart was first asked for
    RESTART_SEEN = "disks.restart_broker_seen"
    VERIFY_PRODUCE = "disks.verify_produce_consume"
    #: the producer id of the verify batches, allocated once per workflow
    VERIFY_PRODUCER = "disks.verify_producer"


def _dir_state(cluster: str, broker: int, name: str) -> dict[str, Any]:
    with agent(cluster, broker) as a:
        dirs = {d.name: d for d in a.log_dirs()}
    d = dirs.get(name)
    return {
        "log_dir": name,
        "state": d.state if d else "REMOVED",
        "error": d.error if d else None,
        "cordoned": d.cordoned if d else None,
    }


@waits_when_unreachable
def cordon_log_dir(ctx: RecoverContext) -> StepResult:
    """Cordon (KIP-1066 ``cordoned.log.dirs``): no new replica lands on the dir; its replicas
    keep serving and its state is unchanged."""
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir

    def call() -> dict[str, Any]:
        with agent(cluster, broker) as a:
            return a.cordon_log_dir(name).model_dump()

    after, now = run_command(
        ctx,
        DiskAction.CORDON,
        call,
        **targets.log_dir(cluster, broker, name),
        before=lambda: _dir_state(cluster, broker, name),
    )
    return StepResult.done({"state": after.get("state"), "applied_now": now})


def confirm_disk_replaced(ctx: RecoverContext) -> StepResult:
    """The human gate: the engine runs this only after an operator confirmed."""
    return StepResult.done({"confirmed_by": ctx.step.confirmed_by_id})


@waits_when_unreachable
def uncordon_log_dir(ctx: RecoverContext) -> StepResult:
    """Lift the cordon of the replaced disk, so the broker re-creates its replicas there when
    it restarts (the operator's edit of ``cordoned.log.dirs``)."""
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir

    def call() -> dict[str, Any]:
        with agent(cluster, broker) as a:
            return a.uncordon_log_dir(name).model_dump()

    after, now = run_command(
        ctx,
        DiskAction.UNCORDON,
        call,
        **targets.log_dir(cluster, broker, name),
        before=lambda: _dir_state(cluster, broker, name),
    )
    return StepResult.done({"cordoned": after.get("cordoned"), "applied_now": now})


def _incarnation_seen(ctx: RecoverContext, cluster: str, broker: int) -> str | None:
    """The broker's incarnation before this step first asked for a restart: read once and
    audited, so a run after a worker SIGKILL asks the control to restart that incarnation only
    (a restart already done is not done twice)."""
    key = f"{ctx.idempotency_key}:seen"
    prior = applied_before(ctx, DiskAction.RESTART_SEEN, key)
    if prior is None:
        with agent(cluster, broker) as a:
            seen = a.incarnation()
        record_command(
            ctx,
            DiskAction.RESTART_SEEN,
            **targets.broker(cluster, broker),
            after={"incarnation": seen},
            key=key,
        )
        prior = applied_before(ctx, DiskAction.RESTART_SEEN, key)  # a racing run's, if first
    assert prior is not None
    return prior.get("incarnation")


@waits_when_unreachable
def restart_broker(ctx: RecoverContext) -> StepResult:
    """Restart the broker process through the simulated cluster's control (Kafka brings a
    failed dir back only at restart), at most once; then check the dir it restarted with."""
    cluster, broker = ctx.params.cluster, ctx.params.broker
    seen = _incarnation_seen(ctx, cluster, broker)

    def call() -> dict[str, Any]:
        with controller(cluster) as ctl:
            return ctl.restart_broker(broker, seen)

    after, now = run_command(
        ctx,
        DiskAction.RESTART,
        call,
        **targets.broker(cluster, broker),
        before={"incarnation": seen},
    )
    return _after_restart(ctx, {"incarnation": after.get("incarnation"), "applied_now": now})


def confirm_broker_restarted(ctx: RecoverContext) -> StepResult:
    """The manual restart (a cluster the worker cannot restart): the engine runs this only
    after an operator confirmed it in the console."""
    return _after_restart(ctx, {"confirmed_by": ctx.step.confirmed_by_id})


def _after_restart(ctx: RecoverContext, output: dict[str, Any]) -> StepResult:
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir
    state = _dir_state(cluster, broker, name)
    output["log_dir_state"] = state["state"]
    if ctx.params.mode == RecoveryMode.REPLACE and state["state"] not in LogDirState.GOOD:
        return StepResult.fail(
            DiskRefusal.LOG_DIR_STILL_OFFLINE,
            f"{name} on broker {broker} is {state['state']} after the restart "
            f"({state.get('error')}): is the new disk mounted at the dir's path?",
        )
    return StepResult.done(output)


@waits_when_unreachable
def remove_log_dir(ctx: RecoverContext) -> StepResult:
    """KIP-112 option 2: remove the bad dir from the broker's config, effective when it
    restarts (the agent re-checks the space and refuses ``INSUFFICIENT_SPACE`` with its plan)."""
    cluster, broker, name = ctx.params.cluster, ctx.params.broker, ctx.params.log_dir
    before = _dir_state(cluster, broker, name)

    def call() -> dict[str, Any]:
        if before["state"] == "REMOVED":  # removed by a run that died before auditing it
            return {"log_dir": name, "removed": True, "already_removed": True}
        with agent(cluster, broker) as a:
            return a.remove_log_dir(name).model_dump()

    try:
        after, now = run_command(
            ctx,
            DiskAction.REMOVE,
            call,
            **targets.log_dir(cluster, broker, name),
            before=before,
        )
    except AgentError as exc:
        if exc.status >= 500:
            raise
        plan = exc.body.get("plan") or {}
        numbers = (
            f" ({plan.get('needed_bytes')} bytes needed, {plan.get('available_bytes')} usable)"
            if plan
            else ""
        )
        return StepResult.fail(exc.error, f"{exc.message}{numbers}")
    return StepResult.done(
        {
            "removed": after.get("removed"),
            "needed_bytes": after.get("needed_bytes"),
            "applied_now": now,
        }
    )


def _planned_keys(ctx: RecoverContext, md: ClusterMetadata) -> list[str]:
    """The plan's replicas that still exist on this broker (a partition may be gone since)."""
    broker, parts = ctx.params.broker, partitions_by_key(md)
    keys = [partition_key(r["topic"], r["partition"]) for r in ctx.plan.replicas]
    return [k for k in keys if k in parts and broker in parts[k][1].replicas]


@waits_when_unreachable
def recreate_replicas(ctx: RecoverContext) -> StepResult:
    """Follow re-creation (``/v1/recreate-status``), progress in bytes against the leaders'
    local size, until every replica is ONLINE and back in the ISR."""
    cluster, broker = ctx.params.cluster, ctx.params.broker
    with controller(cluster) as ctl:
        md = ctl.metadata()
    keys = _planned_keys(ctx, md)
    parts = partitions_by_key(md)
    with agent(cluster, broker) as a:
        status = {
            partition_key(r["topic"], r["partition"]): r for r in a.recreate_status().replicas
        }
        mine = {partition_key(r.topic, r.partition): r for r in a.snapshot().replicas}
    leaders = sizes_on_leaders(cluster, md, set(keys), broker)
    total = done = 0
    in_sync: list[str] = []
    dirs: dict[str, int] = {}
    for key in keys:
        row, replica = status.get(key), mine.get(key)
        online = bool(row and row["state"] == ReplicaState.ONLINE and replica)
        size = replica.size_bytes if online and replica else 0
        target = leaders.get(key, size)
        total += target
        done += min(size, target)
        if online and row and row["in_isr"] and broker in parts[key][1].isr:
            in_sync.append(key)
            dirs[row["log_dir"]] = dirs.get(row["log_dir"], 0) + 1
    ctx.progress(done, total, "bytes")
    if len(in_sync) == len(keys):
        return StepResult.done({"replicas": len(keys), "bytes": done, "replicas_per_log_dir": dirs})
    return StepResult.wait(
        f"Re-creating replicas on broker {broker}: {len(in_sync)} of {len(keys)} back in the "
        f"ISR, {done} of {total} bytes copied.",
        retry_in=POLL_SECONDS,
    )


def _verify_producer_id(ctx: RecoverContext, cluster: str, broker: int) -> int:
    """The producer id of this workflow's verify batches: allocated by the controller once and
    kept in the audit log, so a re-run (after a failed attempt or a crash) sends the same
    (producer id, sequence 0) and the leader's duplicate check appends nothing twice."""
    key = f"{ctx.idempotency_key}:producer"
    prior = applied_before(ctx, DiskAction.VERIFY_PRODUCER, key)
    if prior is None:
        with controller(cluster) as ctl:
            allocated = ctl.allocate_producer_id()
        record_command(
            ctx,
            DiskAction.VERIFY_PRODUCER,
            **targets.broker(cluster, broker),
            after={"producer_id": allocated},
            key=key,
        )
        prior = applied_before(ctx, DiskAction.VERIFY_PRODUCER, key)  # a racing run's, if first
    assert prior is not None
    return int(prior["producer_id"])


def _round_trip(
    cluster: str, broker: int, md: ClusterMetadata, keys: list[str], tag: str, producer_id: int
) -> dict[str, Any]:
    """Produce a known batch (acks=all) to each partition's leader, read it back from the
    leader, and check the recovered replica on ``broker`` holds it too.

    The records have no key: a keyed record belongs on the partition KIP-253 linear hashing puts
    its key on, and writing one anywhere else would break the per-key order of a topic's
    consumers; a record without a key may go to any partition below U, as Kafka's partitioner
    sends it (the caller already left out partitions marked for deletion)."""
    parts = partitions_by_key(md)
    checked, lost, missing_on_broker = [], [], []
    ends: dict[str, int] = {}
    for key in keys:
        t, p = parts[key]
        values = [f"{tag}:{key}:{i}" for i in range(VERIFY_RECORDS)]
        with agent(cluster, p.leader) as leader:
            resp = leader.produce(
                t.name,
                p.partition,
                [{"value": v} for v in values],
                producer_id=producer_id,
                base_sequence=0,
                undeleted_partition_count=t.undeleted_partition_count,
                acks=-1,
            )
            got = leader.fetch(t.name, p.partition, resp.base_offset, VERIFY_RECORDS)
        read = [r.value for r in got.records[:VERIFY_RECORDS]]
        if read != values:
            lost.append({"partition": key, "expected": len(values), "read": len(read)})
        ends[key] = resp.base_offset + len(values)
        checked.append(key)
    with agent(cluster, broker) as a:
        mine = {partition_key(r.topic, r.partition): r for r in a.snapshot().replicas}
    for key in checked:
        r = mine.get(key)
        if r is None or r.log_end_offset < ends[key]:
            missing_on_broker.append(key)
    return {
        "partitions_checked": len(checked),
        "records_per_partition": VERIFY_RECORDS,
        "lost": lost,
        "missing_on_recovered_replica": missing_on_broker,
    }


@waits_when_unreachable
def verify(ctx: RecoverContext) -> StepResult:
    """OfflineReplicaCount (KIP-112 metric) of the broker is 0, and a produce / consume round
    trip on the affected partitions loses nothing."""
    cluster, broker = ctx.params.cluster, ctx.params.broker
    prior = applied_before(ctx, DiskAction.VERIFY_PRODUCE)
    if prior is not None:
        return StepResult.done({**prior, "applied_now": False})
    with agent(cluster, broker) as a:
        snap = a.snapshot()
    with controller(cluster) as ctl:
        md = ctl.metadata()
    info = next(b for b in md.brokers if b.broker_id == broker)
    offline = max(snap.offline_replica_count, info.offline_replica_count)
    keys = _planned_keys(ctx, md)
    parts = partitions_by_key(md)
    not_ready = [k for k in keys if parts[k][1].leader < 0 or broker not in parts[k][1].isr]
    if offline or not_ready:
        if ctx.step.attempts >= VERIFY_MAX_ATTEMPTS:
            return StepResult.fail(
                DiskRefusal.OFFLINE_REPLICAS_REMAIN,
                f"Broker {broker}: OfflineReplicaCount is {offline}; not in the ISR: "
                f"{', '.join(not_ready[:10]) or 'none'}.",
            )
        return StepResult.wait(
            f"Broker {broker}: OfflineReplicaCount is {offline}, {len(not_ready)} affected "
            "partition(s) not in sync yet.",
            retry_in=POLL_SECONDS,
        )
    sample = [k for k in keys if not parts[k][1].marked_for_deletion][:VERIFY_MAX_PARTITIONS]
    producer_id = _verify_producer_id(ctx, cluster, broker)
    result = _round_trip(cluster, broker, md, sample, f"wf{ctx.workflow.pk}", producer_id)
    result["offline_replica_count"] = offline
    ok = not result["lost"] and not result["missing_on_recovered_replica"]
    record_command(
        ctx,
        DiskAction.VERIFY_PRODUCE,
        **targets.broker(cluster, broker),
        before={"offline_replica_count": offline, "partitions": sample},
        after=result,
        outcome=AuditOutcome.SUCCESS if ok else AuditOutcome.FAILURE,
    )
    if not ok:
        return StepResult.fail(
            DiskRefusal.RECORDS_LOST,
            f"Produce / consume check failed: lost {result['lost'][:5]}, not on the recovered "
            f"replica: {result['missing_on_recovered_replica'][:5]}.",
        )
    return StepResult.done({**result, "applied_now": True})


@register
class RecoverLogDir(WorkflowKind[RecoverParams, RecoverPlan]):
    """On a ``kafka`` cluster the runbook is :mod:`.disks_kafka`'s (its plan, review and
    steps, told apart by the plan's ``backend``); the agents' is below."""

    name = "recover_log_dir"
    label = "Recover a log dir (KIP-112)"
    description = (
        "Cordon a failed or degraded log dir (no new replicas), replace the disk (human gate) "
        "or remove the dir from the broker's config, restart the broker (Kafka brings a failed "
        "dir back only at restart), re-create the replicas from their leaders and verify "
        "nothing was lost."
    )
    approvals = 1
    params_model, actions_model = RecoverParams, RecoverPlan

    def approvals_for(self, params: RecoverParams) -> int:
        """Two approvals to remove a dir from the broker's configuration, else one."""
        if params.mode == RecoveryMode.REMOVE:
            return 2
        return super().approvals_for(params)

    def target(self, params: RecoverParams) -> str:
        # One recovery per broker at a time: LogDirReset is broker-wide.
        return f"broker:{params.broker}"

    def read_plan(self, stored: dict[str, Any]) -> RecoverPlan:
        if stored.get("backend") == ClusterBackend.KAFKA:
            return cast(RecoverPlan, KafkaRecoverPlan.model_validate(stored))
        return RecoverPlan.model_validate(stored)

    def plan(self, params: RecoverParams) -> Plan[RecoverPlan]:
        from console.models import Cluster

        with preflight_reads(params.cluster):
            backend = Cluster.objects.values_list("backend", flat=True).get(name=params.cluster)
        if backend == ClusterBackend.KAFKA:
            return cast(Plan[RecoverPlan], kafka_recover_plan(params))
        if params.move_replicas:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                "move_replicas is the kafka runbook's: on this cluster the restarted broker "
                "re-creates the dir's replicas from their leaders (remove: on its good dirs).",
            )
        return plan_recovery(params)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        if actions.get("backend") == ClusterBackend.KAFKA:
            return kafka_recover_review(actions, information)
        where = f"broker {actions['broker']} {actions['log_dir']}"
        replicas = ", ".join(
            partition_key(x["topic"], x["partition"]) for x in actions["replicas"][:20]
        )
        more = len(actions["replicas"]) - 20
        replicas += f" and {more} more" if more > 0 else ""
        restart = (
            ReviewRow(
                f"Restart broker {actions['broker']} (the worker, through the simulated "
                "cluster's control; leaders move first)",
                f"broker {actions['broker']}",
                "running",
                "restarted, its replicas back in the ISR",
            )
            if actions["restart"] == RestartVia.SIM
            else ReviewRow(
                f"Wait for an operator to restart broker {actions['broker']} and confirm",
                f"broker {actions['broker']}",
                "running",
                "restarted by hand",
            )
        )
        rows = [
            ReviewRow(
                "Cordon the log dir (no new replicas placed on it; its replicas keep serving)",
                where,
                str(information.get("log_dir_state", "?")),
                "cordoned",
            )
        ]
        if actions["mode"] == RecoveryMode.REPLACE:
            rows += [
                ReviewRow("Wait for an operator to confirm the disk was replaced", where),
                ReviewRow("Lift the cordon (the new disk takes replicas again)", where),
                restart,
            ]
        else:
            fits = ", ".join(
                f"{g['name']} ({'fits' if g['fits'] else 'does not fit'})"
                for g in actions.get("good_log_dirs", [])
            )
            rows += [
                ReviewRow(
                    "Remove the dir from the broker's configuration (effective at the restart)",
                    where,
                    "configured",
                    f"removed; replicas go to {fits or 'the good dirs'}",
                    destructive=True,
                ),
                restart,
            ]
        rows += [
            ReviewRow(
                "Re-create the dir's replicas from their leaders (the restarted broker has no "
                "bad dir; what only the old dir held is given up)",
                replicas or "no replicas",
                "offline replicas",
                "re-created, back in the ISR",
                f"{actions['replica_count']} replicas, "
                f"{size_text(information.get('bytes_to_recreate'))} to copy",
                destructive=True,
            ),
            ReviewRow(
                "Verify: OfflineReplicaCount = 0 and a produce / consume round trip",
                f"broker {actions['broker']}",
            ),
        ]
        return rows

    def steps(self, params: RecoverParams, plan: RecoverPlan) -> list[StepDef]:
        if getattr(plan, "backend", None) == ClusterBackend.KAFKA:  # read_plan's KafkaRecoverPlan
            return kafka_recover_steps(params, cast(KafkaRecoverPlan, plan))
        broker, name = params.broker, params.log_dir
        if plan.restart == RestartVia.SIM:
            restart = StepDef("restart_broker", restart_broker, label=f"Restart broker {broker}")
        else:
            restart = StepDef(
                "restart_broker",
                confirm_broker_restarted,
                label=f"Restart broker {broker} (manual)",
                gate=True,
                gate_prompt=(
                    f"Restart broker {broker} (Kafka brings {name} back only when the broker "
                    "process restarts), then confirm."
                ),
            )
        steps = [StepDef("cordon_log_dir", cordon_log_dir, label=f"Cordon {name}")]
        if params.mode == RecoveryMode.REPLACE:
            steps += [
                StepDef(
                    "confirm_disk_replaced",
                    confirm_disk_replaced,
                    label="Disk replaced",
                    gate=True,
                    gate_prompt=(
                        f"Replace the disk of {name} on broker {broker} (an empty or the old "
                        "disk mounted at the dir's path), then confirm. The broker is "
                        "restarted next."
                    ),
                ),
                StepDef("uncordon_log_dir", uncordon_log_dir, label=f"Lift the cordon of {name}"),
            ]
        else:
            steps.append(
                StepDef("remove_log_dir", remove_log_dir, label=f"Remove {name} from config")
            )
        steps += [
            restart,
            StepDef(
                "recreate_replicas",
                recreate_replicas,
                label="Re-create replicas",
                unit="bytes",
                total=None,
            ),
            StepDef("verify", verify, label="Verify OfflineReplicaCount = 0 and produce / consume"),
        ]
        return steps
