"""``elect_leaders``: move a topic's leadership back to its preferred replicas (Kafka's
ElectLeaders, PREFERRED), on an ``agents`` or a ``kafka`` cluster alike (#36).

After a restart a broker rejoins the ISR as a follower and, without
``auto.leader.rebalance.enable``, stays one; the preferred leader is the first assigned replica.
Planned from the PostgreSQL inventory (no call to the cluster); whether a preferred replica is
in the ISR moves with traffic, so it is information. ``elect`` is idempotent
(ELECTION_NOT_NEEDED is fine) and its audit always holds one election, even across a worker
killed between command and audit; PREFERRED_LEADER_NOT_AVAILABLE waits. Steps go through
:mod:`workflows.kinds.cluster_writes` and wait, never fail, while the cluster does not answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import field_validator
from typing_extensions import TypedDict

from audit import targets
from broker_agent.contract.choices import ErrorCode as AgentErrorCode
from broker_agent.contract.client import AgentError
from broker_agent.contract.models import TOPIC_NAME_MAX_LENGTH
from workflows.kinds import (
    Actions,
    Params,
    Plan,
    Refusal,
    ReviewRow,
    StepDef,
    StepResult,
    WorkflowKind,
    optional_text,
    register,
    text,
)
from workflows.kinds.cluster_writes import writes_for
from workflows.kinds.commands import preflight_reads, run_command, waits_when_unreachable

if TYPE_CHECKING:
    from workflows.steps import StepContext

__all__ = ["ElectLeaders", "LeaderAction"]

POLL_SECONDS = 2.0
#: The per-partition answers an ``elect`` step accepts as done, or waits on.
SETTLED = (None, AgentErrorCode.ELECTION_NOT_NEEDED)
NOT_YET = AgentErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class LeaderAction:
    ELECT_PREFERRED = "leaders.elect_preferred"


class ElectParams(Params):
    topic: str = text("Topic", max_length=TOPIC_NAME_MAX_LENGTH)
    partitions: str | None = optional_text(
        "Partitions",
        help="Comma-separated partition numbers (e.g. 0,3); every partition of the topic when "
        "left empty.",
        max_length=2000,
    )

    @field_validator("partitions")
    @classmethod
    def _partition_list(cls, value: str | None) -> str | None:
        """``" 3,0, 3"`` → ``"0,3"``: the stored (and hashed) form is sorted and unique."""
        if value is None:
            return None
        try:
            numbers = {int(x) for x in value.split(",") if x.strip()}
        except ValueError:
            raise ValueError("a comma-separated list of partition numbers") from None
        if not numbers or min(numbers) < 0:
            raise ValueError("a comma-separated list of partition numbers (0 or more)")
        return ",".join(str(n) for n in sorted(numbers))

    def partition_numbers(self) -> list[int] | None:
        return None if self.partitions is None else [int(x) for x in self.partitions.split(",")]


class Election(TypedDict):
    partition: int
    leader: int  # now (-1: none)
    preferred: int  # the first replica of the assignment


class ElectPlan(Actions):
    summary: str
    topic: str
    backend: str
    elections: list[Election]
    steps: list[str]


if TYPE_CHECKING:
    ElectContext = StepContext[ElectParams, ElectPlan]


def _preferred(ctx: ElectContext) -> dict[int, int]:
    return {e["partition"]: e["preferred"] for e in ctx.plan.elections}


def _sent_before(ctx: ElectContext) -> bool:
    """Whether a run of this step already had an election answered (audited)."""
    from audit.choices import AuditOutcome
    from audit.models import AuditEvent

    return AuditEvent.objects.filter(
        workflow=ctx.workflow,
        action=LeaderAction.ELECT_PREFERRED,
        outcome=AuditOutcome.SUCCESS,
        extra__idempotency_key__startswith=f"{ctx.idempotency_key}:",
    ).exists()


@waits_when_unreachable
def elect(ctx: ElectContext) -> StepResult:
    """Ask the election for the planned partitions not on their preferred leader yet."""
    cluster, topic = ctx.params.cluster, ctx.params.topic
    preferred = _preferred(ctx)
    with writes_for(cluster) as writes:
        leaders = writes.leaders(topic)
        todo = sorted(p for p, want in preferred.items() if leaders.get(p) != want)
        if not todo:
            if _sent_before(ctx):
                return StepResult.done({"elected": [], "already_preferred": sorted(preferred)})
            # Led by the preferred replicas, yet no election of this step is on record: a
            # worker killed between the command and its audit. Asked again (each answers
            # ELECTION_NOT_NEEDED), so the audit holds the command that moved them.
            todo = sorted(preferred)
        try:
            answer, _now = run_command(
                ctx,
                LeaderAction.ELECT_PREFERRED,
                lambda: {
                    str(p): error
                    for p, error in writes.elect_preferred_leaders(topic, todo).items()
                },
                **targets.topic(cluster, topic),
                before={
                    "backend": writes.backend,
                    "leaders": {str(p): leaders.get(p, -1) for p in todo},
                },
                key=f"{ctx.idempotency_key}:run-{ctx.step.attempts}",
            )
        except AgentError as exc:
            if exc.retriable:
                raise
            return StepResult.fail(exc.error, exc.message)
    failed = {p: e for p, e in answer.items() if e not in SETTLED and e != NOT_YET}
    if failed:
        p, error = sorted(failed.items())[0]
        return StepResult.fail(
            str(error), f"The election of {topic}-{p} was refused: {error} ({len(failed)} failed)."
        )
    waiting = sorted(int(p) for p, e in answer.items() if e == NOT_YET)
    if waiting:
        ctx.log(f"preferred replicas not electable yet: partitions {waiting}", "warning")
        return StepResult.wait(
            f"The preferred replicas of {topic} partitions {waiting} are not in the ISR or not "
            f"online yet ({NOT_YET}); asking again.",
            retry_in=POLL_SECONDS,
        )
    return StepResult.done(
        {
            "elected": sorted(int(p) for p, e in answer.items() if e is None),
            "not_needed": sorted(int(p) for p, e in answer.items() if e is not None),
        }
    )


@waits_when_unreachable
def verify_leaders(ctx: ElectContext) -> StepResult:
    """Until each planned partition is led by its preferred replica, as the cluster answers."""
    preferred = _preferred(ctx)
    with writes_for(ctx.params.cluster) as writes:
        leaders = writes.leaders(ctx.params.topic)
    moved = sorted(p for p, want in preferred.items() if leaders.get(p) == want)
    ctx.progress(len(moved), len(preferred), "partitions")
    if len(moved) == len(preferred):
        return StepResult.done({"leaders": {str(p): leaders[p] for p in moved}})
    left = sorted(set(preferred) - set(moved))
    return StepResult.wait(
        f"{len(moved)} of {len(preferred)} partitions are led by their preferred replica; "
        f"waiting for {left}.",
        retry_in=POLL_SECONDS,
    )


@register
class ElectLeaders(WorkflowKind[ElectParams, ElectPlan]):
    name = "elect_leaders"
    label = "Elect preferred leaders"
    description = (
        "Move a topic's leadership back to each partition's preferred replica (the first of "
        "its assignment), e.g. after a broker restart: Kafka's ElectLeaders, on agents and "
        "kafka clusters."
    )
    approvals = None  # the site's STRATA_APPROVALS_DEFAULT (1 unless set)
    params_model = ElectParams
    actions_model = ElectPlan

    def target(self, params: ElectParams) -> str:
        return f"topic:{params.topic}"

    def plan(self, params: ElectParams) -> Plan[ElectPlan]:
        from console.models import Cluster, Partition

        with preflight_reads(params.cluster):
            cluster = Cluster.objects.get(name=params.cluster)
        rows = list(
            Partition.objects.filter(cluster=cluster, topic_name=params.topic)
            .order_by("partition")
            .values_list("partition", "leader", "replicas", "isr")
        )
        if not rows:
            raise Refusal(
                AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Unknown topic {params.topic!r} in the inventory of {params.cluster} "
                "(as of its last sync).",
                404,
            )
        asked = params.partition_numbers()
        known = {r[0] for r in rows}
        unknown = sorted(set(asked or ()) - known)
        if unknown:
            raise Refusal(
                AgentErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{params.topic} has no partition(s) {unknown} (it has {len(known)}).",
                404,
            )
        chosen = [r for r in rows if asked is None or r[0] in asked]
        elections = [
            Election(partition=p, leader=leader, preferred=replicas[0])
            for p, leader, replicas, _isr in chosen
            if replicas and leader != replicas[0]
        ]
        if not elections:
            raise Refusal(
                AgentErrorCode.ELECTION_NOT_NEEDED,
                f"Every partition asked of {params.topic} is led by its preferred replica "
                "already (as of the last sync).",
            )
        out_of_isr = sorted(
            p for p, leader, replicas, isr in chosen if replicas and replicas[0] not in isr
        )
        actions = ElectPlan(
            summary=(
                f"Elect the preferred leader of {len(elections)} partition(s) of "
                f"{params.topic} (ElectLeaders, PREFERRED), then read the leaders back."
            ),
            topic=params.topic,
            backend=cluster.backend,
            elections=elections,
            steps=["elect", "verify_leaders"],
        )
        information = {
            "inventory_synced_at": cluster.synced_at.isoformat() if cluster.synced_at else None,
            "preferred_not_in_isr": out_of_isr,
        }
        return Plan(actions, information)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        topic = actions["topic"]
        waiting = set(information.get("preferred_not_in_isr") or ())
        return [
            ReviewRow(
                "Elect the preferred leader",
                f"{topic}-{e['partition']}",
                f"broker {e['leader']}" if e["leader"] >= 0 else "no leader",
                f"broker {e['preferred']}",
                "preferred replica not in the ISR yet: waits" if e["partition"] in waiting else "",
            )
            for e in actions["elections"]
        ]

    def steps(self, params: ElectParams, plan: ElectPlan) -> list[StepDef]:
        return [
            StepDef(
                "elect",
                elect,
                label=f"Elect preferred leaders ({plan.backend})",
            ),
            StepDef(
                "verify_leaders",
                verify_leaders,
                label="Leaders back on the preferred replicas",
                unit="partitions",
                total=len(plan.elections),
            ),
        ]
