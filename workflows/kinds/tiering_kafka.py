"""``disable_tiering`` / ``enable_tiering`` on a ``kafka`` cluster (#36): KIP-950 as Kafka 3.9
shipped it, topic config changes mapped by :mod:`broker_agent.contract.kafka39` (the one mapping).

No tiered epoch, no DISABLING state, no per-broker acknowledgement: the plan is the config diff
(before → after, with the ``local.retention.*`` change Kafka requires before
``remote.log.copy.disable=true``), applied by one IncrementalAlterConfigs through the seam
(:mod:`workflows.kinds.cluster_writes`), read back, then verified by the offsets: retain, the
latest-tiered offset (-5) stands still over ``STRATA_TIER_COPY_QUIET_SECONDS``; delete, each
partition's log start (-2) reaches its earliest-local offset (-4). Steps wait while Kafka does
not answer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from typing_extensions import TypedDict

from audit import targets
from broker_agent.contract import kafka39
from broker_agent.contract.choices import DisablePolicy, TieredState, TopicConfig
from broker_agent.contract.client import AgentError
from workflows.errors import ErrorCode
from workflows.kinds import Plan, Refusal, ReviewRow, StepDef, StepResult
from workflows.kinds.cluster_writes import KafkaWrites, writes_for
from workflows.kinds.commands import run_command, sync_console, waits_when_unreachable
from workflows.kinds.schema import Actions

if TYPE_CHECKING:
    from console.models import Partition, Topic
    from workflows.kinds.tiering_types import TopicParams
    from workflows.steps import StepContext

    KafkaContext = StepContext[TopicParams, "KafkaTieringPlan"]

__all__ = [
    "ALTER_CONFIGS",
    "NO_EPOCH",
    "KafkaTieringPlan",
    "kafka_review",
    "kafka_steps",
    "plan_disable",
    "plan_enable",
]

#: The audit action of the one config change each kafka tiering workflow sends.
ALTER_CONFIGS = "tiering.alter_configs"
POLL_SECONDS = 2.0
#: How long a retain verification lets latest-tiered keep moving (a copy in flight when the
#: config changed finishes) before it fails.
COPY_STOP_TIMEOUT_SECONDS = 600.0
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -4, -5

NO_EPOCH = (
    "Kafka shipped KIP-950 without a tiered epoch or per-broker acknowledgements: this is one "
    "topic config change, with no DISABLING state to follow and no epoch fencing what is "
    "deleted; it is verified by reading the configs and the offsets back"
)
DESTRUCTIVE_KEYS = (kafka39.REMOTE_STORAGE_ENABLE, kafka39.REMOTE_LOG_DELETE_ON_DISABLE)


class ConfigChange(TypedDict):
    config: str
    before: str  # the value as of the last sync
    default: bool  # ``before`` is Kafka's default (not set on the topic)
    after: str | None  # None: the override is deleted (back to the default)


class KafkaTieringPlan(Actions):
    """Both tiering kinds' plan on a kafka cluster (``backend`` tells it from the agents' one)."""

    summary: str
    backend: Literal["kafka"]
    topic: str
    topic_id: str
    tiered_state: str
    disable_policy: str | None = None  # the topic's as planned (a DISABLED one's)
    policy: Literal["retain", "delete"] | None = None  # disable only
    partitions: list[int]
    changes: list[ConfigChange]
    verification: str
    no_epoch: str
    steps: list[str]


# --- plans (from the PostgreSQL inventory) ---------------------------------------------------


def _diff(topic: Topic, changes: dict[str, str | None]) -> list[ConfigChange]:
    own = topic.configs or {}
    return [
        ConfigChange(
            config=key,
            before=str(own.get(key, TopicConfig.DEFAULTS.get(key, "false"))),
            default=key not in own,
            after=value,
        )
        for key, value in changes.items()
    ]


def _information(topic: Topic, partitions: list[Partition]) -> dict[str, Any]:
    """What the last sync knows of the remote data. Kafka's protocol gives no remote size or
    segment count (RemoteLogSizeBytes is a JMX metric), so the plan counts what ListOffsets
    gives: the offsets below each partition's local log start (-4), held in remote storage
    only."""
    at = getattr(topic.cluster, "synced_at", None)
    return {
        "remote_only_offsets": sum(
            max(p.local_log_start_offset - p.log_start_offset, 0) for p in partitions
        ),
        "synced_at": at.isoformat() if at else None,
    }


def plan_disable(topic: Topic, partitions: list[Partition], policy: str) -> Plan[KafkaTieringPlan]:
    try:
        changes = kafka39.disable_configs(dict(topic.configs or {}), policy)
    except kafka39.Kafka39MappingError as exc:
        raise Refusal(exc.error, f"{topic.name}: {exc.message} (as of the last sync).") from None
    if policy == DisablePolicy.RETAIN:
        effect = "copying stops; remote data stays readable and expires by retention.*"
        verification = (
            "The configs read back, then each partition's latest-tiered offset (ListOffsets -5) "
            f"stands still for {settings.STRATA_TIER_COPY_QUIET_SECONDS:g} s (copying stopped)."
        )
        verify = "verify_copy_stopped"
    else:
        effect = "the brokers delete the topic's remote data; the log start moves to the local one"
        verification = (
            "The configs read back, then each partition's log start offset (ListOffsets -2) "
            "reaches its earliest-local offset (-4): the remote range is gone."
        )
        verify = "verify_log_start"
    actions = KafkaTieringPlan(
        summary=f"Disable tiering of {topic.name} with policy {policy} on Kafka: "
        f"{len(changes)} topic config change(s) in one IncrementalAlterConfigs; {effect}.",
        backend="kafka",
        topic=topic.name,
        topic_id=topic.topic_id,
        tiered_state=topic.tiered_state,
        policy=policy,
        partitions=[p.partition for p in partitions],
        changes=_diff(topic, changes),
        verification=verification,
        no_epoch=NO_EPOCH,
        steps=["alter_tiering_configs", "verify_tiering_configs", verify],
    )
    return Plan(actions, _information(topic, partitions))


def plan_enable(topic: Topic, partitions: list[Partition]) -> Plan[KafkaTieringPlan]:
    changes = kafka39.enable_configs(dict(topic.configs or {}))
    if not changes:
        raise Refusal(ErrorCode.INVALID_REQUEST, f"{topic.name} is already tiered.")
    actions = KafkaTieringPlan(
        summary=f"Re-enable tiering of {topic.name} on Kafka: {len(changes)} topic config "
        "change(s) in one IncrementalAlterConfigs; copying resumes.",
        backend="kafka",
        topic=topic.name,
        topic_id=topic.topic_id,
        tiered_state=topic.tiered_state,
        **({"disable_policy": topic.disable_policy} if topic.disable_policy else {}),
        partitions=[p.partition for p in partitions],
        changes=_diff(topic, changes),
        verification="The configs read back: remote.storage.enable=true, copying not disabled.",
        no_epoch=NO_EPOCH,
        steps=["alter_tiering_configs", "verify_tiering_configs"],
    )
    return Plan(actions, _information(topic, partitions))


# --- review ----------------------------------------------------------------------------------


def kafka_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    topic, policy = actions["topic"], actions.get("policy")
    remote = (
        f"{information.get('remote_only_offsets', '?')} offsets below the local log start, in "
        "remote storage only (as of the last sync); their size is not available for this "
        "cluster (a JMX metric, not in Kafka's protocol)"
    )
    rows = [
        ReviewRow(
            "IncrementalAlterConfigs (one request, all or nothing)",
            f"topic {topic}: {c['config']}",
            f"{c['before']}{' (default)' if c['default'] else ''}",
            c["after"] if c["after"] is not None else "override deleted (Kafka's default)",
        )
        for c in actions["changes"]
    ]
    rows.append(
        ReviewRow("No tiered epoch, no per-broker acknowledgement", "Kafka 3.9", "", NO_EPOCH)
    )
    if policy == DisablePolicy.DELETE:
        rows.append(
            ReviewRow(
                "Remote data deleted by the brokers (remote.log.delete.on.disable)",
                f"every remote segment of {topic}",
                "readable",
                "deleted; log start offset moves to the local log start offset",
                remote,
                destructive=True,
            )
        )
    elif policy == DisablePolicy.RETAIN:
        rows.append(
            ReviewRow(
                "Remote data kept (policy retain)",
                f"topic {topic}",
                "readable",
                "readable; expires by retention.*",
                remote,
            )
        )
    rows.append(ReviewRow("Verify", f"topic {topic}", "", actions["verification"]))
    return rows


# --- steps -----------------------------------------------------------------------------------


def _target(plan: KafkaTieringPlan) -> kafka39.TieringView:
    if plan.policy is None:
        return kafka39.TieringView(TieredState.ENABLED)
    return kafka39.TieringView(TieredState.DISABLED, plan.policy)


def _wanted(plan: KafkaTieringPlan) -> dict[str, str | None]:
    return {c["config"]: c["after"] for c in plan.changes}


def _kafka(writes: object, cluster: str) -> KafkaWrites:
    if not isinstance(writes, KafkaWrites):
        raise Refusal(ErrorCode.PLAN_CHANGED, f"{cluster} is no longer a kafka cluster.")
    return writes


@waits_when_unreachable
def alter_tiering_configs(ctx: KafkaContext) -> StepResult:
    """The planned changes in one IncrementalAlterConfigs, audited; skipped when the topic is
    in the planned state already and the change is on record (a repeat)."""
    cluster, topic, plan = ctx.params.cluster, ctx.params.topic, ctx.plan
    want, target = _wanted(plan), _target(plan)
    with writes_for(cluster) as seam:
        try:
            writes = _kafka(seam, cluster)
        except Refusal as exc:
            return StepResult.fail(exc.code, exc.message)
        live = writes.topic_configs(topic)
        view = kafka39.from_configs(live)
        if view not in (target, kafka39.TieringView(plan.tiered_state, plan.disable_policy)):
            return StepResult.fail(
                ErrorCode.PLAN_CHANGED,
                f"{topic} is {view.tiered_state} ({view.disable_policy or 'no policy'}) now; the "
                f"plan was for {plan.tiered_state}. Request again.",
            )

        def alter() -> dict[str, Any]:
            writes.alter_topic_configs(topic, want)
            return {"configs": want}

        # In the target state but not on record (a worker killed between the change and its
        # audit): sent again, a no-op for Kafka, so the audit holds the command.
        try:
            _after, sent = run_command(
                ctx,
                ALTER_CONFIGS,
                alter,
                **targets.topic(cluster, topic),
                before={
                    "backend": writes.backend,
                    "tiered_state": view.tiered_state,
                    "disable_policy": view.disable_policy,
                    "configs": {k: live.get(k) for k in want},
                },
            )
        except AgentError as exc:
            if exc.retriable:
                raise
            return StepResult.fail(exc.error, f"Kafka refused the change: {exc.message}")
    return StepResult.done({"configs": want, "sent_now": sent})


@waits_when_unreachable
def verify_tiering_configs(ctx: KafkaContext) -> StepResult:
    """Until the configs read back (DescribeConfigs) show the planned state and values."""
    cluster, topic = ctx.params.cluster, ctx.params.topic
    want, target = _wanted(ctx.plan), _target(ctx.plan)
    with writes_for(cluster) as seam:
        live = _kafka(seam, cluster).topic_configs(topic)
    view = kafka39.from_configs(live)
    wrong = {k: live.get(k) for k, v in want.items() if v is not None and live.get(k) != v}
    if view == target and not wrong:
        if ctx.plan.policy is None:
            sync_console(ctx)  # nothing else to verify: pages show it now
        return StepResult.done(
            {"tiered_state": view.tiered_state, "configs": {k: live.get(k) for k in want}}
        )
    return StepResult.wait(
        f"{topic} reads back as {view.tiered_state} ({view.disable_policy or 'no policy'})"
        f"{f', {wrong}' if wrong else ''}; waiting for the brokers to apply the change.",
        retry_in=POLL_SECONDS,
    )


@waits_when_unreachable
def verify_copy_stopped(ctx: KafkaContext) -> StepResult:
    """Retain: latest-tiered stands still across two reads a quiet interval apart (bounded)."""
    cluster, topic, parts = ctx.params.cluster, ctx.params.topic, ctx.plan.partitions
    quiet = float(settings.STRATA_TIER_COPY_QUIET_SECONDS)
    deadline = time.monotonic() + COPY_STOP_TIMEOUT_SECONDS
    with writes_for(cluster) as seam:
        writes = _kafka(seam, cluster)
        first = writes.offsets(topic, parts, LATEST_TIERED)
        while True:
            until = time.monotonic() + quiet
            while (left := until - time.monotonic()) > 0:
                ctx.progress(0, 1, "checks")  # renews the lease
                time.sleep(min(left, 1.0))
            second = writes.offsets(topic, parts, LATEST_TIERED)
            if second == first:
                break
            moved = sorted(p for p in parts if second.get(p) != first.get(p))
            if time.monotonic() > deadline:
                return StepResult.fail(
                    "COPY_NOT_STOPPED",
                    f"{topic}: latest-tiered still advances on partitions {moved} "
                    f"{COPY_STOP_TIMEOUT_SECONDS:.0f} s after the change.",
                )
            ctx.log(f"latest-tiered still moved on partitions {moved}; reading again")
            first = second
    ctx.progress(1, 1, "checks")
    sync_console(ctx)
    return StepResult.done(
        {"latest_tiered": {str(p): o for p, o in sorted(second.items())}, "quiet_seconds": quiet}
    )


@waits_when_unreachable
def verify_log_start(ctx: KafkaContext) -> StepResult:
    """Delete: each partition's log start offset reaches its earliest-local offset."""
    cluster, topic, parts = ctx.params.cluster, ctx.params.topic, ctx.plan.partitions
    with writes_for(cluster) as seam:
        writes = _kafka(seam, cluster)
        start = writes.offsets(topic, parts, EARLIEST)
        local = writes.offsets(topic, parts, EARLIEST_LOCAL)
    done = [p for p in parts if start.get(p, -1) >= local.get(p, 0)]
    ctx.progress(len(done), len(parts), "partitions")
    if len(done) < len(parts):
        left = sorted(set(parts) - set(done))
        return StepResult.wait(
            f"{len(done)} of {len(parts)} partitions have their log start at the local log "
            f"start; waiting for {left} (the brokers delete the remote data).",
            retry_in=POLL_SECONDS,
        )
    sync_console(ctx)
    return StepResult.done(
        {
            "log_start": {str(p): o for p, o in sorted(start.items())},
            "earliest_local": {str(p): o for p, o in sorted(local.items())},
        }
    )


def kafka_steps(plan: KafkaTieringPlan) -> list[StepDef]:
    steps = [
        StepDef("alter_tiering_configs", alter_tiering_configs, label="IncrementalAlterConfigs"),
        StepDef("verify_tiering_configs", verify_tiering_configs, label="Configs read back"),
    ]
    if plan.policy == DisablePolicy.RETAIN:
        steps.append(
            StepDef(
                "verify_copy_stopped",
                verify_copy_stopped,
                label="Latest-tiered offsets stand still",
                unit="checks",
                total=1,
            )
        )
    elif plan.policy == DisablePolicy.DELETE:
        steps.append(
            StepDef(
                "verify_log_start",
                verify_log_start,
                label="Log start reaches the local log start",
                unit="partitions",
                total=len(plan.partitions),
            )
        )
    return steps
