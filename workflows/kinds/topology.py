"""``expand_partitions`` / ``shrink_partitions``: KIP-253 partition expansion and deletion.

On a ``kafka`` cluster the expansion is Kafka's CreatePartitions instead, keys remapped and no
order kept (:mod:`.topology_kafka`); a shrink is refused there up front (Kafka cannot remove
partitions: ``console.capabilities``, ``linear_hashing``).

Both take ``topic`` and ``partitions``, the new ``undeleted_partition_count`` U'. Growing U by
one splits exactly one parent (linear hashing, DESIGN.md "Domain rules"); shrinking runs the
tree backwards, a marked partition's keys going to its first surviving ancestor. Expansion is
refused while a partition is marked (``PARTITIONS_MARKED_FOR_DELETION``); shrink never goes
below N. ``records_to_drain`` and ``group_lag`` are information, never approved. The drain step
only waits: a marked partition empties by retention or by an operator's DeleteRecords (KIP-253),
never by this workflow, since whether consumers still need the records is the operator's call.
Controller commands are audited once per step (:mod:`workflows.kinds.commands`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from typing_extensions import TypedDict

from audit import targets
from broker_agent.contract.choices import ErrorCode as AgentErrorCode
from broker_agent.contract.choices import TopicConfig
from broker_agent.contract.client import AgentError
from broker_agent.contract.hashing import parent_partition
from broker_agent.contract.models import TOPIC_NAME_MAX_LENGTH, BrokerInfo, TopicMetadata
from broker_agent.contract.ordering import deletion_target
from console.choices import ClusterBackend
from workflows.kinds import (
    Actions,
    Params,
    Plan,
    Refusal,
    ReviewRow,
    StepDef,
    StepResult,
    WorkflowKind,
    integer,
    register,
    text,
)
from workflows.kinds.cluster_access import agent, controller
from workflows.kinds.commands import preflight_reads, run_command, waits_when_unreachable
from workflows.kinds.topology_kafka import (
    KafkaExpandPlan,
    kafka_expand_plan,
    kafka_expand_review,
    kafka_expand_steps,
)

if TYPE_CHECKING:
    from workflows.steps import StepContext

__all__ = [
    "ExpandPartitions",
    "ShrinkPartitions",
    "TopologyAction",
    "keys_move_to",
    "remaining_records",
]

POLL_SECONDS = 2.0
MAX_PARTITIONS = 100_000


class TopologyAction:
    ALTER_PARTITION_COUNT = "topology.alter_partition_count"


class PartitionsParams(Params):
    topic: str = text("Topic", max_length=TOPIC_NAME_MAX_LENGTH)  # Kafka's limit for a name
    partitions: int = integer(
        "New undeleted_partition_count",
        ge=1,
        le=MAX_PARTITIONS,
        help="The partition count producers will hash keys over (KIP-253).",
    )


class PartitionCountPlan(Actions):
    summary: str
    topic: str
    topic_id: str
    initial_partition_count: int
    undeleted_partition_count: int
    new_undeleted_partition_count: int
    ordering: str | None = None  # plans made before the ordering promise have none
    steps: list[str]


class NewPartition(TypedDict):
    partition: int
    parent: int  # the partition it splits (KIP-253 linear hashing)


class MarkedPartition(TypedDict):
    partition: int
    keys_move_to: int


class ExpandPlan(PartitionCountPlan):
    replication_factor: int
    new_partitions: list[NewPartition]
    split_parents: list[int]


class ShrinkPlan(PartitionCountPlan):
    partitions_to_mark: list[MarkedPartition]
    already_marked_for_deletion: list[int]
    draining: str


#: An expansion's plan: KIP-253's (agents) or Kafka's CreatePartitions (kafka).
ExpandActions = ExpandPlan | KafkaExpandPlan

A = TypeVar("A", bound=Actions)

if TYPE_CHECKING:
    PartitionsContext = StepContext[PartitionsParams, PartitionCountPlan]


def ordering_promise(topic: str, ordered: bool) -> str:
    """What an expansion or a shrink keeps of a key's order (KIP-253), for the plan."""
    if not ordered:
        return (
            f"{topic} has enable.ordered.delivery=false: consumers read new and marked "
            "partitions at once, so records of a moved key may be delivered out of order."
        )
    return (
        "Keys keep their order for consumer groups (enable.ordered.delivery=true): a group "
        "starts a new partition only after consuming, up to the split point, the first of its "
        "ancestors that existed before the expansion (its parent, unless that is new too), drains "
        "a partition marked for deletion before the moved keys' newer records, and producers "
        "must send the new partition count (a stale one is refused and re-hashed)."
    )


def _ordering_rows(actions: dict[str, Any], topic: str) -> list[ReviewRow]:
    """The plan's ordering promise as a review row (plans made before it have none)."""
    promise = actions.get("ordering")
    return [ReviewRow(promise, f"topic {topic}")] if promise else []


def keys_move_to(q: int, initial_partition_count: int, undeleted_partition_count: int) -> int:
    """Where the keys of a partition marked for deletion go under the new count: its parent,
    or the parent's parent while that is marked too (linear hashing run backwards) - the
    consumers' rule, :func:`broker_agent.contract.ordering.deletion_target`."""
    return deletion_target(q, initial_partition_count, undeleted_partition_count)


def _topic(cluster: str, name: str) -> tuple[TopicMetadata, list[BrokerInfo]]:
    """The topic and the brokers, as the controller knows them now: two small answers
    (``GET /v1/topics/{t}`` and ``/v1/brokers``), never the whole cluster's metadata (260 MB
    and ~3 GB of parsed objects in a worker at 1,000,000 partitions, #17) for one topic."""
    with controller(cluster) as ctl:
        try:
            t = ctl.topic(name)
        except AgentError as exc:
            if exc.error != AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            raise Refusal(
                AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {name!r}.", 404
            ) from None
        return t, ctl.brokers()


def remaining_records(
    cluster: str,
    t: TopicMetadata,
    partitions: set[int],
    ends: dict[int, tuple[int, int]] | None = None,
) -> dict[int, int]:
    """Records left in each of ``partitions`` (log_end_offset - log_start_offset on its
    leader); a partition without a leader counts -1 (unknown). ``ends``, when given, receives
    each partition's (log start offset, high watermark)."""
    by_leader: dict[int, set[int]] = {}
    left: dict[int, int] = {}
    for p in t.partitions:
        if p.partition in partitions:
            if p.leader < 0:
                left[p.partition] = -1
            else:
                by_leader.setdefault(p.leader, set()).add(p.partition)
    for leader, wanted in sorted(by_leader.items()):
        with agent(cluster, leader) as a:
            snap = a.snapshot()
        for r in snap.replicas:
            if r.topic == t.name and r.partition in wanted and r.is_leader:
                left[r.partition] = max(0, r.log_end_offset - r.log_start_offset)
                if ends is not None:
                    ends[r.partition] = (r.log_start_offset, r.high_watermark)
    return left


def group_lags(
    cluster: str, topic: str, ends: dict[int, tuple[int, int]]
) -> dict[str, dict[str, int]]:
    """Each consumer group's records not yet consumed on the partitions a shrink would mark
    (high watermark - the group's position), from the controller's group coordinator. With
    ordered delivery a group drains them before it gets the moved keys' newer records from the
    surviving partitions, so this is how far behind each group's barrier will hold. A group is
    listed if it has positions on the topic or subscribes to it; a controller without a
    coordinator answers none. Only the topic's groups are asked for (a fleet has 20,000)."""
    with controller(cluster) as ctl:
        try:
            groups = ctl.groups(topic)
        except AgentError as exc:
            if exc.status == 404:
                return {}
            raise
    out: dict[str, dict[str, int]] = {}
    for g in groups:
        pos = g.offsets.get(topic, {})
        if not pos and not any(topic in m.topics for m in g.members):
            continue
        out[g.group_id] = {
            str(p): max(0, hw - max(pos.get(p, lso), lso)) for p, (lso, hw) in sorted(ends.items())
        }
    return out


def _alter(ctx: PartitionsContext) -> StepResult:
    """Set the controller's undeleted_partition_count to the requested value (at most once;
    the controller treats an unchanged count as a no-op)."""
    cluster, topic, target = ctx.params.cluster, ctx.params.topic, ctx.params.partitions

    def before() -> dict[str, Any]:
        with controller(cluster) as ctl:
            t = ctl.topic(topic)
        return {
            "undeleted_partition_count": t.undeleted_partition_count,
            "marked_for_deletion": [p.partition for p in t.partitions if p.marked_for_deletion],
        }

    def call() -> dict[str, Any]:
        with controller(cluster) as ctl:
            t = ctl.alter_partition_count(topic, target)
        return {
            "undeleted_partition_count": t.undeleted_partition_count,
            "partitions": len(t.partitions),
            "marked_for_deletion": [p.partition for p in t.partitions if p.marked_for_deletion],
        }

    try:
        after, now = run_command(
            ctx,
            TopologyAction.ALTER_PARTITION_COUNT,
            call,
            **targets.topic(cluster, topic),
            before=before,
        )
    except AgentError as exc:
        if exc.status >= 500:
            raise
        return StepResult.fail(exc.error, exc.message)
    return StepResult.done({**after, "applied_now": now})


alter_partition_count = waits_when_unreachable(_alter)


@waits_when_unreachable
def await_new_partitions(ctx: StepContext[PartitionsParams, ExpandPlan]) -> StepResult:
    """Every new partition has a leader and all its replicas in the ISR."""
    t, _brokers = _topic(ctx.params.cluster, ctx.params.topic)
    new = {x["partition"] for x in ctx.plan.new_partitions}
    ready = [
        p.partition
        for p in t.partitions
        if p.partition in new and p.leader >= 0 and set(p.isr) == set(p.replicas)
    ]
    ctx.progress(len(ready), len(new), "partitions")
    if len(ready) == len(new):
        return StepResult.done({"partitions_ready": sorted(ready)})
    return StepResult.wait(
        f"{len(ready)} of {len(new)} new partitions have a leader and a full ISR.",
        retry_in=POLL_SECONDS,
    )


@waits_when_unreachable
def drain(ctx: StepContext[PartitionsParams, ShrinkPlan]) -> StepResult:
    """Follow the marked partitions until the controller removed them (each once empty:
    log_start_offset == log_end_offset). Progress: records drained of the most seen."""
    cluster = ctx.params.cluster
    t, _brokers = _topic(cluster, ctx.params.topic)
    marked = {x["partition"] for x in ctx.plan.partitions_to_mark}
    still = {p.partition for p in t.partitions if p.partition in marked}
    left = remaining_records(cluster, t, still)
    remaining = sum(max(0, n) for n in left.values())
    total = max(ctx.step.progress_total or 0, remaining)
    ctx.progress(total - remaining, total, "records")
    if not still:
        return StepResult.done({"removed": sorted(marked), "records_drained": total})
    unknown = sorted(p for p, n in left.items() if n < 0)
    ctx.log(f"draining: {remaining} records left in partitions {sorted(still)}")
    return StepResult.wait(
        f"Draining {len(still)} partition(s) marked for deletion: {remaining} records left"
        + (f", partitions {unknown} have no leader" if unknown else "")
        + ". Each is removed once empty, by retention or DeleteRecords (KIP-253).",
        retry_in=POLL_SECONDS,
    )


class _PartitionCountKind(WorkflowKind[PartitionsParams, A]):
    params_model = PartitionsParams

    def target(self, params: PartitionsParams) -> str:
        return f"topic:{params.topic}"

    def _current(self, params: PartitionsParams) -> tuple[TopicMetadata, list[BrokerInfo]]:
        with preflight_reads(params.cluster):
            return _topic(params.cluster, params.topic)


@register
class ExpandPartitions(_PartitionCountKind[ExpandActions]):
    name = "expand_partitions"
    label = "Expand partitions (KIP-253)"
    description = (
        "Raise undeleted_partition_count: each new partition splits one parent (linear "
        "hashing), so keys keep their order. Refused while partitions are marked for deletion. "
        "On a kafka cluster: CreatePartitions, keys remapped (no KIP-253)."
    )
    approvals = None  # the site's STRATA_APPROVALS_DEFAULT (1 unless set)
    actions_model = ExpandPlan  # or KafkaExpandPlan, by the plan's backend (read_plan)

    def read_plan(self, stored: dict[str, Any]) -> ExpandActions:
        if stored.get("backend") == ClusterBackend.KAFKA:
            return KafkaExpandPlan.model_validate(stored)
        return ExpandPlan.model_validate(stored)

    def plan(self, params: PartitionsParams) -> Plan[ExpandActions]:
        from console.models import Cluster

        with preflight_reads(params.cluster):
            backend = Cluster.objects.values_list("backend", flat=True).get(name=params.cluster)
        if backend == ClusterBackend.KAFKA:
            return cast(Plan[ExpandActions], kafka_expand_plan(params))
        t, brokers = self._current(params)
        n, u, target = t.initial_partition_count, t.undeleted_partition_count, params.partitions
        if target <= u:
            raise Refusal(
                AgentErrorCode.INVALID_PARTITIONS,
                f"{t.name} has undeleted_partition_count {u}: expansion needs more "
                f"(got {target}); use shrink_partitions to reduce it.",
            )
        marked = sorted(p.partition for p in t.partitions if p.marked_for_deletion)
        if marked:
            raise Refusal(
                AgentErrorCode.PARTITIONS_MARKED_FOR_DELETION,
                f"Partitions {marked} of {t.name} are marked for deletion: KIP-253 refuses an "
                "expansion until they are drained and removed.",
                409,
            )
        rf = max((len(p.replicas) for p in t.partitions), default=1)
        alive = sum(1 for b in brokers if b.alive)
        if rf > alive:
            raise Refusal(
                AgentErrorCode.INVALID_REPLICATION_FACTOR,
                f"{t.name} has replication factor {rf} but only {alive} live brokers.",
            )
        new = [NewPartition(partition=q, parent=parent_partition(q, n)) for q in range(u, target)]
        ordered = t.configs.get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"
        actions = ExpandPlan(
            summary=(
                f"Expand {t.name} from {u} to {target} partitions (initial_partition_count "
                f"{n}): {len(new)} new partition(s), each splitting one parent; every existing "
                "partition's leader epoch is bumped and recorded in leaderEpochAfterCreation."
            ),
            ordering=ordering_promise(t.name, ordered),
            topic=t.name,
            topic_id=t.topic_id,
            initial_partition_count=n,
            undeleted_partition_count=u,
            new_undeleted_partition_count=target,
            replication_factor=rf,
            new_partitions=new,
            split_parents=sorted({x["parent"] for x in new}),
            steps=["alter_partition_count", "await_new_partitions"],
        )
        return Plan(actions, {"live_brokers": alive})

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        if actions.get("backend") == ClusterBackend.KAFKA:
            return kafka_expand_review(actions, information)
        topic, u, target = (
            actions["topic"],
            actions["undeleted_partition_count"],
            actions["new_undeleted_partition_count"],
        )
        splits = ", ".join(f"{x['partition']} ← {x['parent']}" for x in actions["new_partitions"])
        return [
            ReviewRow(
                "Raise undeleted_partition_count at the controller",
                f"topic {topic}",
                f"{u} partitions",
                f"{target} partitions",
            ),
            ReviewRow(
                "Create the new partitions, each splitting one parent (linear hashing)",
                f"new ← parent: {splits}",
                "",
                f"RF {actions['replication_factor']}",
            ),
            *_ordering_rows(actions, topic),
        ]

    def steps(self, params: PartitionsParams, plan: ExpandActions) -> list[StepDef]:
        if isinstance(plan, KafkaExpandPlan):
            return kafka_expand_steps(params, plan)
        return [
            StepDef(
                "alter_partition_count",
                alter_partition_count,
                label=f"Set undeleted_partition_count = {params.partitions}",
            ),
            StepDef(
                "await_new_partitions",
                await_new_partitions,
                label="New partitions online",
                unit="partitions",
                total=len(plan.new_partitions),
            ),
        ]


@register
class ShrinkPartitions(_PartitionCountKind[ShrinkPlan]):
    name = "shrink_partitions"
    label = "Shrink partitions (KIP-253)"
    description = (
        "Lower undeleted_partition_count: the highest partitions are marked for deletion "
        "(never below initial_partition_count) and removed once drained."
    )
    approvals = None  # the site's STRATA_APPROVALS_DEFAULT (1 unless set)
    actions_model = ShrinkPlan

    def plan(self, params: PartitionsParams) -> Plan[ShrinkPlan]:
        t, _brokers = self._current(params)
        n, u, target = t.initial_partition_count, t.undeleted_partition_count, params.partitions
        if target >= u:
            raise Refusal(
                AgentErrorCode.INVALID_PARTITIONS,
                f"{t.name} has undeleted_partition_count {u}: a shrink needs fewer (got "
                f"{target}); use expand_partitions to raise it.",
            )
        if target < n:
            raise Refusal(
                AgentErrorCode.INVALID_PARTITIONS,
                f"KIP-253 never shrinks below initial_partition_count: {t.name} has {n} "
                f"(got {target}).",
            )
        to_mark = [
            MarkedPartition(partition=q, keys_move_to=keys_move_to(q, n, target))
            for q in range(target, u)
        ]
        ends: dict[int, tuple[int, int]] = {}
        with preflight_reads(params.cluster):
            left = remaining_records(params.cluster, t, {x["partition"] for x in to_mark}, ends)
            lags = group_lags(params.cluster, t.name, ends)
        records = sum(max(0, v) for v in left.values())
        already = sorted(p.partition for p in t.partitions if p.marked_for_deletion)
        actions = ShrinkPlan(
            summary=(
                f"Shrink {t.name} from {u} to {target} partitions: mark {len(to_mark)} "
                f"partition(s) for deletion (leaderEpochBeforeDeletion), then wait until each "
                "is empty and removed, by retention or DeleteRecords."
            ),
            topic=t.name,
            topic_id=t.topic_id,
            initial_partition_count=n,
            undeleted_partition_count=u,
            new_undeleted_partition_count=target,
            partitions_to_mark=to_mark,
            already_marked_for_deletion=already,
            ordering=ordering_promise(
                t.name, t.configs.get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"
            ),
            draining="a marked partition is removed once log_start_offset == log_end_offset: "
            "by retention (retention.ms / retention.bytes) or DeleteRecords",
            steps=["mark_partitions", "drain"],
        )
        information = {
            "records_to_drain": records,
            "records_per_partition": {str(p): n for p, n in sorted(left.items())},
            "group_lag": lags,
        }
        return Plan(actions, information)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        topic, u, target = (
            actions["topic"],
            actions["undeleted_partition_count"],
            actions["new_undeleted_partition_count"],
        )
        marks = ", ".join(
            f"{x['partition']} → {x['keys_move_to']}" for x in actions["partitions_to_mark"]
        )
        left = information.get("records_to_drain")
        lag = "; ".join(
            f"group {g} {sum(per.values())} behind"
            for g, per in sorted((information.get("group_lag") or {}).items())
        )
        drain_info = (
            f"{left} records left to drain (moves with traffic)" if left is not None else ""
        )
        if lag:
            drain_info += f"; on these partitions {lag}"
        return [
            ReviewRow(
                "Mark the highest partitions for deletion; their keys move back to lower ones",
                f"topic {topic}, partition → keys move to: {marks}",
                f"{u} partitions",
                f"{target} partitions",
            ),
            ReviewRow(
                "Remove each marked partition once drained (retention or DeleteRecords)",
                f"topic {topic}",
                "readable",
                "removed",
                drain_info,
                destructive=True,
            ),
            *_ordering_rows(actions, topic),
        ]

    def steps(self, params: PartitionsParams, plan: ShrinkPlan) -> list[StepDef]:
        return [
            StepDef(
                "mark_partitions",
                alter_partition_count,
                label=f"Mark partitions ≥ {params.partitions} for deletion",
            ),
            StepDef("drain", drain, label="Drain marked partitions", unit="records"),
        ]
