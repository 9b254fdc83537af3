"""``expand_partitions`` on a ``kafka`` cluster: Kafka's CreatePartitions, without KIP-253 (#36).

Kafka never shipped KIP-253: adding partitions remaps keys (murmur2(key) modulo the count) and
keeps no per-key order across the change, and no partition can be removed. So the plan warns of
the remapping, shows the ordered expansion unsupported (``linear_hashing`` capability, with its
reason) and leaves placement to Kafka. ``create_partitions`` is idempotent: a topic already at
or past the count (INVALID_PARTITIONS) counts as done, so a re-run after a worker killed between
command and audit finds the command that grew it on record. Steps go through
:mod:`workflows.kinds.cluster_writes` and wait, never fail, while the cluster does not answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audit import targets
from broker_agent.contract.choices import ErrorCode as AgentErrorCode
from broker_agent.contract.client import AgentError
from workflows.kinds import Actions, Plan, Refusal, ReviewRow, StepDef, StepResult
from workflows.kinds.cluster_writes import writes_for
from workflows.kinds.commands import preflight_reads, run_command, waits_when_unreachable

if TYPE_CHECKING:
    from workflows.kinds.topology import PartitionsParams
    from workflows.steps import StepContext

__all__ = [
    "KEY_REMAPPING",
    "KafkaExpandPlan",
    "kafka_expand_plan",
    "kafka_expand_review",
    "kafka_expand_steps",
]

POLL_SECONDS = 2.0
CREATE_PARTITIONS = "topology.create_partitions"

#: Kafka's behaviour on adding partitions, for the plan and its review.
KEY_REMAPPING = (
    "adding partitions changes which partition a key maps to: murmur2(key) mod count; per-key "
    "order is not kept across the change — KIP-253's ordered expansion is not available on "
    "this cluster"
)
DEFAULT_PLACEMENT = (
    "Kafka's default placement: the controller spreads the new partitions' replicas over the "
    "live brokers (rack-aware where racks are set)"
)


class KafkaExpandPlan(Actions):
    summary: str
    backend: str  # "kafka": how the kind tells this plan from KIP-253's
    topic: str
    partition_count: int
    new_partition_count: int
    replication_factor: int
    new_partitions: list[int]
    placement: str
    key_remapping: str
    ordered_expansion: str  # why KIP-253's ordered expansion is unavailable here
    steps: list[str]


if TYPE_CHECKING:
    KafkaExpandContext = StepContext[PartitionsParams, KafkaExpandPlan]


def kafka_expand_plan(params: PartitionsParams) -> Plan[KafkaExpandPlan]:
    """The plan, from the cluster's Metadata now (see the module docstring)."""
    from console import capabilities
    from console.models import Cluster

    cluster, topic, target = params.cluster, params.topic, params.partitions
    with preflight_reads(cluster):
        row = Cluster.objects.get(name=cluster)
        with writes_for(cluster) as writes:
            try:
                parts = writes.partitions(topic)
            except AgentError as exc:
                if exc.error != AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
                raise Refusal(
                    AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {topic!r}.", 404
                ) from None
            live = writes.live_brokers()
    count = len(parts)
    if target <= count:
        raise Refusal(
            AgentErrorCode.INVALID_PARTITIONS,
            f"{topic} has {count} partitions: expansion needs more (got {target}). Kafka cannot "
            "remove partitions, so a topic's count only grows.",
        )
    rf = max((len(p.replicas) for p in parts.values()), default=1)
    if rf > len(live):
        raise Refusal(
            AgentErrorCode.INVALID_REPLICATION_FACTOR,
            f"{topic} has replication factor {rf} but only {len(live)} live brokers.",
        )
    ordered = capabilities.by_key(row)[capabilities.LINEAR_HASHING]
    actions = KafkaExpandPlan(
        summary=(
            f"Add {target - count} partition(s) to {topic}, {count} → {target} (Kafka's "
            "CreatePartitions), then read the metadata back until each new partition has a "
            "leader. Keys are remapped: murmur2(key) mod the new count."
        ),
        backend=row.backend,
        topic=topic,
        partition_count=count,
        new_partition_count=target,
        replication_factor=rf,
        new_partitions=list(range(count, target)),
        placement=DEFAULT_PLACEMENT,
        key_remapping=KEY_REMAPPING,
        ordered_expansion="available" if ordered.supported else f"unavailable: {ordered.reason}",
        steps=["create_partitions", "verify_partitions"],
    )
    return Plan(actions, {"live_brokers": len(live)})


def kafka_expand_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    topic, count, target = (
        actions["topic"],
        actions["partition_count"],
        actions["new_partition_count"],
    )
    new = actions["new_partitions"]
    return [
        ReviewRow(
            "Add partitions (CreatePartitions)",
            f"topic {topic}",
            f"{count} partitions",
            f"{target} partitions",
        ),
        ReviewRow(
            "Place the new partitions' replicas",
            f"partitions {new[0]}..{new[-1]}" if len(new) > 1 else f"partition {new[0]}",
            "",
            f"RF {actions['replication_factor']}",
            actions["placement"],
        ),
        ReviewRow(
            f"Keys remapped: {actions['key_remapping']}",
            f"topic {topic}",
            f"murmur2(key) mod {count}",
            f"murmur2(key) mod {target}",
            "per-key order not kept across the change",
            destructive=True,
        ),
        ReviewRow(
            "Ordered expansion (KIP-253)", f"topic {topic}", "", actions["ordered_expansion"]
        ),
    ]


@waits_when_unreachable
def create_partitions(ctx: KafkaExpandContext) -> StepResult:
    """CreatePartitions to the planned count, once (see the module docstring)."""
    cluster, topic, target = ctx.params.cluster, ctx.params.topic, ctx.plan.new_partition_count
    with writes_for(cluster) as writes:

        def before() -> dict[str, Any]:
            return {"backend": writes.backend, "partition_count": len(writes.partitions(topic))}

        def call() -> dict[str, Any]:
            answer = None
            try:
                writes.create_partitions(topic, target)
            except AgentError as exc:
                if exc.error != AgentErrorCode.INVALID_PARTITIONS:
                    raise
                if len(writes.partitions(topic)) < target:
                    raise
                answer = f"{exc.error}: {exc.message}"  # already at (or past) the count
            out: dict[str, Any] = {"partition_count": target}
            if answer:
                out["answer"] = answer
            return out

        try:
            after, now = run_command(
                ctx, CREATE_PARTITIONS, call, **targets.topic(cluster, topic), before=before
            )
        except AgentError as exc:
            if exc.retriable:
                raise
            return StepResult.fail(exc.error, exc.message)
    return StepResult.done({**after, "applied_now": now})


@waits_when_unreachable
def verify_partitions(ctx: KafkaExpandContext) -> StepResult:
    """Until Metadata lists every new partition with a leader."""
    new = ctx.plan.new_partitions
    with writes_for(ctx.params.cluster) as writes:
        parts = writes.partitions(ctx.params.topic)
    led = sorted(p for p in new if p in parts and parts[p].leader >= 0)
    ctx.progress(len(led), len(new), "partitions")
    if len(led) == len(new):
        return StepResult.done({"partitions_led": {str(p): parts[p].leader for p in led}})
    return StepResult.wait(
        f"{len(led)} of {len(new)} new partitions have a leader in the cluster's metadata.",
        retry_in=POLL_SECONDS,
    )


def kafka_expand_steps(params: PartitionsParams, plan: KafkaExpandPlan) -> list[StepDef]:
    return [
        StepDef(
            "create_partitions",
            create_partitions,
            label=f"CreatePartitions: {plan.partition_count} → {plan.new_partition_count}",
        ),
        StepDef(
            "verify_partitions",
            verify_partitions,
            label="New partitions led",
            unit="partitions",
            total=len(plan.new_partitions),
        ),
    ]
