"""``disable_tiering`` and ``enable_tiering``: KIP-950 tiered-storage disablement and
re-enablement, driven as durable workflows against the controller and every hosting broker.

Planning reads only the synced inventory; the controller is the authority at execution:
``start_disablement`` sends the plan's epoch as ``expected_tiered_epoch`` and treats the topic at
epoch + 1 with our policy as our own earlier attempt, so the epoch is incremented exactly once.
A topic DISABLING with no driver is adopted by planning at its epoch minus one. One step per
hosting broker; the first sends to every pending broker at once (:data:`FANOUT_CONCURRENCY`),
later ones find their acknowledgement recorded. ``STALE_TIERED_EPOCH`` fails (fenced); an
unreachable broker waits without limit. We spell ``TIERED_STORAGE_DISABLEMENT_IN_PROGRESS``
correctly (the KIP writes ``TIERED_STORAGET_…``). Bytes and projected growth are information;
whether growth ``fits`` a dir is an action. Narrative: DESIGN.md "Domain rules". On a ``kafka``
cluster both kinds plan and run as Kafka 3.9 shipped KIP-950 (:mod:`.tiering_kafka`; a stored
plan with ``backend: kafka`` reads back as its model).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, TypeVar, cast

from audit import targets
from broker_agent.contract.choices import (
    DisablePolicy,
    LogDirState,
    RemoteSegmentState,
    TieredState,
    TopicConfig,
)
from broker_agent.contract.choices import ErrorCode as AgentCode
from broker_agent.contract.client import AgentError
from console.choices import ClusterBackend
from console.models import Cluster, LogDir, Partition, Replica, Topic
from spark_tasks.models import SparkJob
from workflows.errors import ErrorCode
from workflows.kinds import (
    Plan,
    Refusal,
    ReviewRow,
    StepDef,
    StepResult,
    WorkflowKind,
    register,
)
from workflows.kinds.cluster_access import agent, controller
from workflows.kinds.commands import (
    applied_before,
    is_unreachable,
    record_command,
    sync_console,
    unreachable_wait,
)
from workflows.kinds.spark import follow_spark_run
from workflows.kinds.tiering_fanout import (
    FANOUT_CONCURRENCY,
    UNREACHABLE_RETRY_CAP_SECONDS,
    audit_ack,
    broker_command,
)
from workflows.kinds.tiering_kafka import (
    KafkaTieringPlan,
    kafka_review,
    kafka_steps,
    plan_disable,
    plan_enable,
)
from workflows.kinds.tiering_review import disable_review, enable_review
from workflows.kinds.tiering_types import (
    DisableParams,
    DisablePlan,
    EnableParams,
    EnablePlan,
    GrowthActions,
    TopicParams,
)
from workflows.kinds.verification import (
    VERIFY_KEY,
    VERIFY_RECORDS,
    VERIFY_TIMEOUT_SECONDS,
    verify_placement,
)

if TYPE_CHECKING:
    from broker_agent.contract.models import TopicMetadata
    from workflows.steps import StepContext

    DisableContext = StepContext[DisableParams, DisablePlan]
    EnableContext = StepContext[EnableParams, EnablePlan]

__all__ = [
    "FANOUT_CONCURRENCY",
    "DisableTiering",
    "EnableTiering",
    "TieringAction",
    "project_disk_growth",
]

log = logging.getLogger(__name__)
A = TypeVar("A", DisablePlan, EnablePlan)

COMPACT = "compact"


class TieringAction:
    """Audit actions of the tiering kinds."""

    START_DISABLEMENT = "tiering.start_disablement"
    #: a disablement found DISABLING with no workflow driving it, taken over (KIP-950 failure modes)
    ADOPT_DISABLEMENT = "tiering.adopt_disablement"
    DISABLE_REMOTE_TOPIC = "tiering.disable_remote_topic"
    COMPLETE_DISABLEMENT = "tiering.complete_disablement"
    ENABLE = "tiering.enable"
    ENABLE_REMOTE_TOPIC = "tiering.enable_remote_topic"
    VERIFY_PRODUCE = "tiering.verify_produce"


# --- pre-flight helpers ----------------------------------------------------------------------


def _topic(params: TopicParams) -> Topic:
    cluster = Cluster.objects.filter(name=params.cluster).first()
    if cluster is None:
        raise Refusal(ErrorCode.INVALID_REQUEST, f"Unknown cluster {params.cluster!r}.")
    topic = Topic.objects.filter(cluster=cluster, name=params.topic).first()
    if topic is not None:
        topic.cluster = cluster
    if topic is None:
        raise Refusal(
            ErrorCode.INVALID_REQUEST,
            f"Unknown topic {params.topic!r} on {cluster.name} (as of the last sync).",
        )
    return topic


def _partitions(topic: Topic) -> list[Partition]:
    return list(
        Partition.objects.filter(topic=topic)
        .order_by("partition")
        .only(
            "partition",
            "replicas",
            "leader",
            "marked_for_deletion",
            "remote_bytes",
            "remote_segments",
        )
    )


def _synced_at(topic: Topic) -> str | None:
    """When the inventory the plan read was synced (the information's real age)."""
    at = getattr(topic.cluster, "synced_at", None)
    return at.isoformat() if at else None


def _hosting_brokers(partitions: list[Partition]) -> list[int]:
    """Brokers hosting a replica of the topic: whose acknowledgements KIP-950 waits for."""
    return sorted({b for p in partitions for b in p.replicas})


def _is_compacted(topic: Topic) -> bool:
    policy = (topic.configs or {}).get(TopicConfig.CLEANUP_POLICY, "")
    return COMPACT in {p.strip() for p in str(policy).split(",")}


def project_disk_growth(topic: Topic, partitions: list[Partition]) -> dict[str, Any]:
    """Per log dir: projected local growth once copying stops (method in the module docstring)."""
    remote = {p.partition: p.remote_bytes for p in partitions}
    retention_bytes = int((topic.configs or {}).get(TopicConfig.RETENTION_BYTES, "-1") or -1)
    per_dir: dict[tuple[int, str], dict[str, Any]] = {}
    unplaced: list[str] = []
    replicas = Replica.objects.filter(partition__topic=topic).values(
        "partition__partition", "broker__broker_id", "log_dir_id", "size_bytes"
    )
    dirs = {
        d["pk"]: d
        for d in LogDir.objects.filter(broker__cluster=topic.cluster).values(
            "pk", "name", "state", "usable_bytes", "broker__broker_id"
        )
    }
    for r in replicas:
        growth = remote.get(r["partition__partition"], 0)
        if retention_bytes >= 0:
            growth = max(0, min(growth, retention_bytes - r["size_bytes"]))
        d = dirs.get(r["log_dir_id"])
        if d is None:
            unplaced.append(f"{r['partition__partition']}@{r['broker__broker_id']}")
            continue
        entry = per_dir.setdefault(
            (d["broker__broker_id"], d["name"]),
            {"growth": 0, "local": 0, "replicas": 0, "usable": d["usable_bytes"], "dir": d},
        )
        entry["growth"] += growth
        entry["local"] += r["size_bytes"]
        entry["replicas"] += 1
    rows = [
        {
            "broker": broker,
            "log_dir": name,
            "replicas": e["replicas"],
            "local_bytes": e["local"],
            "projected_growth_bytes": e["growth"],
            "usable_bytes": e["usable"],
            "fits": e["dir"]["state"] != LogDirState.OFFLINE and e["growth"] <= e["usable"],
        }
        for (broker, name), e in sorted(per_dir.items())
    ]
    return {
        "method": (
            "Once copying stops, local segments expire only when no remote data is left "
            "(KIP-950), so each replica grows by its partition's current remote bytes (capped at "
            "retention.bytes minus its local bytes when set); summed per log dir and compared "
            "with the dir's usable bytes."
        ),
        "log_dirs": rows,
        "all_fit": all(r["fits"] for r in rows),
        "unplaced_replicas": sorted(unplaced),
    }


def _growth_actions(growth: dict[str, Any]) -> GrowthActions:
    """The structural part of a growth projection: which dirs fit (an action), no bytes."""
    return {
        "log_dirs": [
            {
                "broker": r["broker"],
                "log_dir": r["log_dir"],
                "replicas": r["replicas"],
                "fits": r["fits"],
            }
            for r in growth["log_dirs"]
        ],
        "all_fit": growth["all_fit"],
        "unplaced_replicas": growth["unplaced_replicas"],
    }


# --- step helpers ----------------------------------------------------------------------------


def _topic_state(t: TopicMetadata) -> dict[str, Any]:
    return {
        "tiered_state": t.tiered_state,
        "tiered_epoch": t.tiered_epoch,
        "disable_policy": t.disable_policy,
        "tiering_acks": list(t.tiering_acks),
    }


# --- disable_tiering steps -------------------------------------------------------------------


def start_disablement(ctx: DisableContext) -> StepResult:
    """ENABLED → DISABLING at the controller, tiered epoch + 1, exactly once."""
    topic, epoch, policy = ctx.params.topic, ctx.plan.tiered_epoch, ctx.params.policy
    new_epoch = epoch + 1
    with controller(ctx.params.cluster) as ctl:
        before = ctl.topic(topic)
        if before.topic_id != ctx.plan.topic_id:
            return StepResult.fail(
                ErrorCode.PLAN_CHANGED, f"{topic} was re-created (topic id {before.topic_id})."
            )
        ours = (
            before.tiered_epoch == new_epoch
            and before.tiered_state in (TieredState.DISABLING, TieredState.DISABLED)
            and (before.disable_policy or DisablePolicy.DEFAULT) == policy
        )
        if ours:
            after = before
            ctx.log(f"already {before.tiered_state} at tiered epoch {new_epoch}: driving it on")
            if ctx.plan.adopt:
                record_command(
                    ctx,
                    TieringAction.ADOPT_DISABLEMENT,
                    **targets.topic(ctx.params.cluster, topic),
                    before=_topic_state(before),
                    after=_topic_state(after),
                    extra={"policy": policy, "acknowledged_by": before.tiering_acks},
                )
                return StepResult.done(
                    {"tiered_epoch": after.tiered_epoch, "tiered_state": after.tiered_state}
                )
        elif before.tiered_state == TieredState.ENABLED and before.tiered_epoch == epoch:
            try:
                after = ctl.start_disable(topic, policy=policy, expected_tiered_epoch=epoch)
            except AgentError as exc:
                return StepResult.fail(exc.error, f"controller refused: {exc.message}")
        else:
            code = (
                AgentCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
                if before.tiered_state == TieredState.DISABLING
                else AgentCode.STALE_TIERED_EPOCH
            )
            return StepResult.fail(
                code,
                f"{topic} is {before.tiered_state} at tiered epoch {before.tiered_epoch}; the "
                f"plan expected ENABLED at {epoch}.",
            )
    record_command(
        ctx,
        TieringAction.START_DISABLEMENT,
        **targets.topic(ctx.params.cluster, topic),
        before=_topic_state(before)
        if not ours
        else {"tiered_state": TieredState.ENABLED, "tiered_epoch": epoch},
        after=_topic_state(after),
        extra={"policy": policy, "expected_tiered_epoch": epoch},
    )
    return StepResult.done({"tiered_epoch": after.tiered_epoch, "tiered_state": after.tiered_state})


def disable_remote_topic(ctx: DisableContext) -> StepResult:
    """DisableRemoteTopic to one hosting broker at the new tiered epoch, until it acknowledges."""
    return broker_command(ctx, "disable", TieringAction.DISABLE_REMOTE_TOPIC)


def complete_disablement(ctx: DisableContext) -> StepResult:
    """DISABLING → DISABLED once every hosting broker acknowledged (the controller checks)."""
    topic, epoch = ctx.params.topic, ctx.plan.new_tiered_epoch
    with controller(ctx.params.cluster) as ctl:
        before = ctl.topic(topic)
        try:
            after = ctl.complete_disable(topic, expected_tiered_epoch=epoch)
        except AgentError as exc:
            if exc.error != AgentCode.TIERED_STORAGE_DISABLEMENT_INCOMPLETE:
                return StepResult.fail(exc.error, f"controller refused: {exc.message}")
            # Brokers the controller still waits for (a replica moved since the plan, or an ack
            # the controller lost): send them the command too, then try again.
            pending = [int(b) for b in exc.body.get("pending_brokers", [])]
            for b in pending:
                key = f"{ctx.idempotency_key}:b{b}"
                try:
                    with agent(ctx.params.cluster, b) as a:
                        answer = a.disable_remote_topic(
                            topic, ctx.plan.topic_id, epoch, ctx.params.policy, key
                        )
                except Exception as send_exc:
                    if is_unreachable(send_exc):
                        return unreachable_wait(
                            ctx, send_exc, UNREACHABLE_RETRY_CAP_SECONDS, who=f"Broker {b}"
                        )
                    raise
                audit_ack(ctx, TieringAction.DISABLE_REMOTE_TOPIC, b, answer.model_dump(), key)
            raise RuntimeError(f"brokers {pending} had not acknowledged; sent again") from None
    record_command(
        ctx,
        TieringAction.COMPLETE_DISABLEMENT,
        **targets.topic(ctx.params.cluster, topic),
        before=_topic_state(before),
        after=_topic_state(after),
        extra={"expected_tiered_epoch": epoch},
    )
    sync_console(ctx)
    return StepResult.done({"tiered_state": after.tiered_state, "tiered_epoch": after.tiered_epoch})


def purge_remote_segments(ctx: DisableContext) -> StepResult:
    """Delete policy: the Spark purge job, followed to the end (quarantines named)."""
    return follow_spark_run(ctx, SparkJob.PURGE, {}, dry_run=False)


# --- enable_tiering steps --------------------------------------------------------------------


def enable_at_controller(ctx: EnableContext) -> StepResult:
    """DISABLED (or never tiered) → ENABLED at the controller; the tiered epoch is kept."""
    topic, epoch = ctx.params.topic, ctx.plan.tiered_epoch
    with controller(ctx.params.cluster) as ctl:
        before = ctl.topic(topic)
        if before.topic_id != ctx.plan.topic_id:
            return StepResult.fail(
                ErrorCode.PLAN_CHANGED, f"{topic} was re-created (topic id {before.topic_id})."
            )
        if before.tiered_state == TieredState.ENABLED and before.tiered_epoch == epoch:
            after = before  # our earlier attempt (or an idempotent repeat)
        else:
            try:
                after = ctl.enable(topic, expected_tiered_epoch=epoch)
            except AgentError as exc:
                return StepResult.fail(exc.error, f"controller refused: {exc.message}")
    record_command(
        ctx,
        TieringAction.ENABLE,
        **targets.topic(ctx.params.cluster, topic),
        before={"tiered_state": ctx.plan.tiered_state, "tiered_epoch": epoch},
        after=_topic_state(after),
        extra={"expected_tiered_epoch": epoch},
    )
    return StepResult.done({"tiered_state": after.tiered_state, "tiered_epoch": after.tiered_epoch})


def enable_remote_topic(ctx: EnableContext) -> StepResult:
    """EnableRemoteTopic to one hosting broker at the (unchanged) tiered epoch."""
    return broker_command(ctx, "enable", TieringAction.ENABLE_REMOTE_TOPIC)


def verify_tiering(ctx: EnableContext) -> StepResult:
    """New segments tier with the current epoch and offsets continue without a gap.

    The marker records are produced once per workflow: a re-run (after a crash, or a retry
    when the copier was slow) verifies the batch its first run produced and audited, rather
    than producing another."""
    cluster, topic, epoch = ctx.params.cluster, ctx.params.topic, ctx.plan.tiered_epoch
    prior = applied_before(ctx, TieringAction.VERIFY_PRODUCE)
    with controller(cluster) as ctl:
        meta = ctl.topic(topic)
    if prior is not None:
        key, p = prior.get("key", VERIFY_KEY), int(prior["partition"])
    else:
        led = {x.partition for x in meta.partitions if x.leader >= 0 and not x.marked_for_deletion}
        placed = verify_placement(meta.initial_partition_count, meta.undeleted_partition_count, led)
        if placed is None:
            raise RuntimeError(f"{topic}: no verify key hashes to a partition with a leader")
        key, p = placed
    part = next((x for x in meta.partitions if x.partition == p), None)
    if part is None or part.leader < 0:
        raise RuntimeError(f"{topic}-{p} has no leader to verify on")
    marker = f"wf{ctx.workflow.pk}:verify"
    records = [{"key": key, "value": f"{marker}:{i}"} for i in range(VERIFY_RECORDS)]
    with agent(cluster, part.leader) as a:
        if prior is None:
            base = a.produce(
                topic, p, records, undeleted_partition_count=meta.undeleted_partition_count
            ).base_offset
            record_command(
                ctx,
                TieringAction.VERIFY_PRODUCE,
                **targets.topic(cluster, topic),
                after={"partition": p, "key": key, "base_offset": base, "records": VERIFY_RECORDS},
            )
        else:
            base = int(prior["base_offset"])
        last = base + VERIFY_RECORDS - 1
        a.roll(topic, p)
        deadline = time.monotonic() + VERIFY_TIMEOUT_SECONDS
        segment = None
        while segment is None:
            segment = next(
                (
                    s
                    for s in a.inventory(topic)
                    if s.partition == p
                    and s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
                    and s.start_offset <= last <= s.end_offset
                ),
                None,
            )
            if segment is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{topic}-{p}: offset {last} was not tiered within "
                        f"{VERIFY_TIMEOUT_SECONDS:.0f}s (copier stopped?)"
                    )
                ctx.progress(0, 1, "segments")
                time.sleep(0.5)
        if segment.tiered_epoch != epoch:
            return StepResult.fail(
                "TIERED_EPOCH_MISMATCH",
                f"{topic}-{p}: new segment {segment.segment_id} tiered at epoch "
                f"{segment.tiered_epoch}, the topic's is {epoch}",
            )
        start = max(segment.start_offset - 1, a.fetch(topic, p, last).log_start_offset)
        offsets: list[int] = []
        values: dict[int, str] = {}
        offset = start
        while offset <= last:
            fetched = a.fetch(topic, p, offset, max_records=last - offset + 1)
            if not fetched.records:
                break
            for rec in fetched.records:
                if rec.offset <= last:
                    offsets.append(rec.offset)
                    values[rec.offset] = rec.value
            offset = fetched.records[-1].offset + 1
    if offsets != list(range(start, last + 1)):
        return StepResult.fail(
            "OFFSET_GAP",
            f"{topic}-{p}: offsets {start}..{last} read back as {offsets[:20]}…",
        )
    expected = {base + i: r["value"] for i, r in enumerate(records)}
    if any(values.get(o) != v for o, v in expected.items()):
        return StepResult.fail("VERIFY_MISMATCH", f"{topic}-{p}: marker records read back wrong")
    ctx.progress(1, 1, "segments")
    sync_console(ctx)
    return StepResult.done(
        {
            "partition": p,
            "key": key,
            "segment_id": segment.segment_id,
            "segment_tiered_epoch": segment.tiered_epoch,
            "segment_offsets": [segment.start_offset, segment.end_offset],
            "checked_offsets": [start, last],
        }
    )


# --- the kinds -------------------------------------------------------------------------------


def _read_plan(stored: dict[str, Any], agents_model: type[A]) -> A | KafkaTieringPlan:
    """A stored plan as its backend's model (a kafka plan says ``backend: kafka``)."""
    if stored.get("backend") == ClusterBackend.KAFKA:
        return KafkaTieringPlan.model_validate(stored)
    return agents_model.model_validate(stored)


@register
class DisableTiering(WorkflowKind[DisableParams, DisablePlan | KafkaTieringPlan]):
    name = "disable_tiering"
    label = "Disable tiering (KIP-950)"
    description = (
        "ENABLED → DISABLING (tiered epoch + 1) → DisableRemoteTopic to every hosting broker → "
        "DISABLED; with policy delete, then the Spark purge job. A topic left DISABLING with no "
        "workflow driving it (started by AlterConfigs, or by a workflow that failed) is taken "
        "over at its epoch and policy. On a kafka cluster: Kafka 3.9's topic config change "
        "(remote.log.copy.disable, or remote.storage.enable=false with "
        "remote.log.delete.on.disable), verified by the configs and offsets read back."
    )
    approvals = 1
    params_model, actions_model = DisableParams, DisablePlan

    def approvals_for(self, params: DisableParams) -> int:
        """Two approvals when remote data will be deleted (policy delete), else one."""
        return 2 if params.policy == DisablePolicy.DELETE else super().approvals_for(params)

    def target(self, params: DisableParams) -> str:
        return f"topic:{params.topic}"

    def read_plan(self, stored: dict[str, Any]) -> DisablePlan | KafkaTieringPlan:
        return _read_plan(stored, DisablePlan)

    def plan(self, params: DisableParams) -> Plan[DisablePlan | KafkaTieringPlan]:
        topic = _topic(params)
        if topic.cluster.backend == ClusterBackend.KAFKA:
            return cast(Plan[Any], plan_disable(topic, _partitions(topic), params.policy))
        policy = params.policy
        adopt = topic.tiered_state == TieredState.DISABLING
        if adopt and policy != (topic.disable_policy or DisablePolicy.DEFAULT):
            raise Refusal(
                AgentCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS,
                f"Disablement of {topic.name} at tiered epoch {topic.tiered_epoch} with policy "
                f"{topic.disable_policy} is in progress; to drive it on, request it with policy "
                f"{topic.disable_policy}.",
                409,
            )
        if not adopt and topic.tiered_state != TieredState.ENABLED:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{topic.name} is not tiered (tiered state {topic.tiered_state}).",
            )
        partitions = _partitions(topic)
        brokers = _hosting_brokers(partitions)
        # Adopting a disablement in progress: the epoch the controller is at is the plan's new
        # one, so start_disablement finds it "ours" and drives it on without a second increment.
        epoch = topic.tiered_epoch - 1 if adopt else topic.tiered_epoch
        summary = (
            f"Drive on the disablement of {topic.name} (policy {policy}) left DISABLING at tiered "
            f"epoch {topic.tiered_epoch} with no workflow driving it: DisableRemoteTopic to "
            f"{len(brokers)} brokers, then DISABLED."
            if adopt
            else f"Disable tiering of {topic.name} with policy {policy}: tiered epoch "
            f"{epoch} → {epoch + 1}, DisableRemoteTopic to {len(brokers)} brokers."
        )
        information: dict[str, Any] = {
            "remote_segments": sum(p.remote_segments for p in partitions),
            "remote_bytes": sum(p.remote_bytes for p in partitions),
            "synced_at": _synced_at(topic),
        }
        if adopt:
            information["acknowledged_by"] = sorted(topic.tiering_acks or [])
        if policy == DisablePolicy.RETAIN:
            effect = (
                "Copying stops; remote segments stay readable and keep expiring by the topic-wide "
                "retention; local segments expire only once no remote data is left."
            )
            growth = project_disk_growth(topic, partitions)
            by_policy: dict[str, Any] = {"disk_growth": _growth_actions(growth)}
            information["disk_growth"] = growth
        else:
            effect = (
                "Copying and remote expiration stop; the log start offset moves to the local log "
                "start offset; every remote segment below the new tiered epoch becomes unreadable "
                "at once and is deleted by the Spark purge job."
            )
            by_policy = {
                "fenced_segments": f"every remote segment of {topic.name} with tiered_epoch < "
                f"{topic.tiered_epoch + 1}"
            }
        actions = DisablePlan(
            summary=summary,
            topic=topic.name,
            topic_id=topic.topic_id,
            policy=policy,
            adopt=adopt,
            tiered_state=topic.tiered_state,
            tiered_epoch=epoch,
            new_tiered_epoch=epoch + 1,
            partitions=len(partitions),
            brokers=brokers,
            replicas_per_broker={
                str(b): sum(1 for p in partitions if b in p.replicas) for b in brokers
            },
            effect=effect,
            steps=[
                "start_disablement",
                *(f"disable_remote_topic@{b}" for b in brokers),
                "complete_disablement",
                *(["purge_remote_segments"] if policy == DisablePolicy.DELETE else []),
            ],
            **by_policy,
        )
        return Plan(actions, information)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        if actions.get("backend") == ClusterBackend.KAFKA:
            return kafka_review(actions, information)
        return disable_review(actions, information)

    def steps(self, params: DisableParams, plan: DisablePlan | KafkaTieringPlan) -> list[StepDef]:
        if isinstance(plan, KafkaTieringPlan):
            return kafka_steps(plan)
        steps = [
            StepDef(
                "start_disablement",
                start_disablement,
                label=f"Start disablement (epoch {plan.new_tiered_epoch})",
            )
        ]
        steps += [
            StepDef(
                "disable_remote_topic",
                disable_remote_topic,
                label=f"DisableRemoteTopic on broker {b}",
                broker=b,
                unit="acks",
                total=1,
            )
            for b in plan.brokers
        ]
        steps.append(StepDef("complete_disablement", complete_disablement, label="DISABLED"))
        if params.policy == DisablePolicy.DELETE:
            steps.append(
                StepDef(
                    "purge_remote_segments",
                    purge_remote_segments,
                    label="Spark purge job",
                    unit="tasks",
                )
            )
        return steps


@register
class EnableTiering(WorkflowKind[EnableParams, EnablePlan | KafkaTieringPlan]):
    name = "enable_tiering"
    label = "Enable tiering (KIP-950 re-enablement)"
    description = (
        "ENABLED at the controller (tiered epoch kept), EnableRemoteTopic to every hosting "
        "broker, then a produced batch must tier with the current epoch without an offset gap. "
        "On a kafka cluster: Kafka 3.9's topic config change, verified by the configs read back."
    )
    approvals = None  # the site's STRATA_APPROVALS_DEFAULT (1 unless set)
    params_model, actions_model = EnableParams, EnablePlan

    def target(self, params: EnableParams) -> str:
        return f"topic:{params.topic}"

    def read_plan(self, stored: dict[str, Any]) -> EnablePlan | KafkaTieringPlan:
        return _read_plan(stored, EnablePlan)

    def plan(self, params: EnableParams) -> Plan[EnablePlan | KafkaTieringPlan]:
        topic = _topic(params)
        if _is_compacted(topic):
            raise Refusal(
                AgentCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC,
                f"{topic.name} is compacted (cleanup.policy "
                f"{topic.configs.get(TopicConfig.CLEANUP_POLICY)}); compacted topics cannot be "
                "tiered.",
            )
        if topic.tiered_state == TieredState.DISABLING:
            raise Refusal(
                AgentCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS,
                f"Disablement of {topic.name} is in progress; re-enable once it is DISABLED.",
                409,
            )
        if topic.tiered_state == TieredState.ENABLED:
            raise Refusal(ErrorCode.INVALID_REQUEST, f"{topic.name} is already tiered.")
        if topic.cluster.backend == ClusterBackend.KAFKA:
            return cast(Plan[Any], plan_enable(topic, _partitions(topic)))
        partitions = _partitions(topic)
        brokers = _hosting_brokers(partitions)
        placed = verify_placement(
            topic.initial_partition_count,
            topic.undeleted_partition_count,
            {p.partition for p in partitions if p.leader >= 0 and not p.marked_for_deletion},
        )
        verify_key, verify_on = placed or (VERIFY_KEY, None)
        actions = EnablePlan(
            summary=(
                f"Enable tiering of {topic.name} at tiered epoch {topic.tiered_epoch} on "
                f"{len(brokers)} brokers, then verify with {VERIFY_RECORDS} marker records."
            ),
            topic=topic.name,
            topic_id=topic.topic_id,
            tiered_state=topic.tiered_state,
            tiered_epoch=topic.tiered_epoch,
            partitions=len(partitions),
            brokers=brokers,
            verification=(
                f"Writes {VERIFY_RECORDS} records with key {verify_key!r} to the partition KIP-253 "
                f"linear hashing places it on (U = {topic.undeleted_partition_count}), rolls it, "
                "waits for the copier: the new segment must carry tiered "
                f"epoch {topic.tiered_epoch} and offsets must continue without a gap."
            ),
            steps=[
                "enable_at_controller",
                *(f"enable_remote_topic@{b}" for b in brokers),
                "verify_tiering",
            ],
        )
        information = {
            "remote_segments": sum(p.remote_segments for p in partitions),
            "remote_bytes": sum(p.remote_bytes for p in partitions),
            "verify_on_partition": verify_on,
            "synced_at": _synced_at(topic),
        }
        return Plan(actions, information)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        if actions.get("backend") == ClusterBackend.KAFKA:
            return kafka_review(actions, information)
        return enable_review(actions, information)

    def steps(self, params: EnableParams, plan: EnablePlan | KafkaTieringPlan) -> list[StepDef]:
        if isinstance(plan, KafkaTieringPlan):
            return kafka_steps(plan)
        return [
            StepDef("enable_at_controller", enable_at_controller, label="ENABLED at controller"),
            *(
                StepDef(
                    "enable_remote_topic",
                    enable_remote_topic,
                    label=f"EnableRemoteTopic on broker {b}",
                    broker=b,
                    unit="acks",
                    total=1,
                )
                for b in plan.brokers
            ),
            StepDef(
                "verify_tiering", verify_tiering, label="Verify new segments tier", unit="segments"
            ),
        ]
