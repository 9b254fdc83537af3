"""``tally_check``: a workflow kind written as one module, as a new kind would be.

It declares everything the framework needs and nothing else: its parameters (``counter``, a
name, and ``increments``, how many steps), its approval count, its plan and its steps by name.
Importing the module registers it; no other file names it (``test_kind_declares_itself``).
Each ``increment`` step writes one ``tally_check.incremented`` audit event per idempotency key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from workflows.kinds import (
    Actions,
    Params,
    Plan,
    StepDef,
    StepResult,
    WorkflowKind,
    integer,
    register,
    text,
)

if TYPE_CHECKING:
    from workflows.steps import StepContext

INCREMENTED = "tally_check.incremented"


class TallyParams(Params):
    counter: str = text("Counter", help="What is counted; the workflow's target.")
    increments: int = integer("Increments", ge=1, le=5)


class TallyPlan(Actions):
    increments: int
    steps: list[str]


def increment(ctx: StepContext[TallyParams, TallyPlan]) -> StepResult:
    key = ctx.step.idempotency_key
    with transaction.atomic():
        if not AuditEvent.objects.filter(action=INCREMENTED, target_id=key).exists():
            trail.record(
                INCREMENTED,
                context=AuditContext.WORKER,
                target_type="tally",
                target_id=key,
                workflow=ctx.workflow,
                after={"counter": ctx.params.counter, "n": ctx.definition.params["n"]},
            )
    return StepResult.done({"n": ctx.definition.params["n"]})


@register
class TallyCheck(WorkflowKind[TallyParams, TallyPlan]):
    name = "tally_check"
    label = "Tally (test kind)"
    description = "Counts to increments, one audited step each; touches no cluster."
    hidden = True
    needs_cluster = False
    approvals = 2
    params_model, actions_model = TallyParams, TallyPlan

    def target(self, params: TallyParams) -> str:
        return f"tally:{params.counter}"

    def plan(self, params: TallyParams) -> Plan[TallyPlan]:
        n = params.increments
        return Plan(TallyPlan(increments=n, steps=[f"increment {i}" for i in range(n)]))

    def steps(self, params: TallyParams, plan: TallyPlan) -> list[StepDef]:
        return [
            StepDef(f"increment_{i}", increment, label=f"Increment {i}", params={"n": i})
            for i in range(plan.increments)
        ]
