"""``tally_check``: a workflow kind written as one module, as a new kind would be.

It declares everything the framework needs and nothing else: its parameters (``counter``, a
name, and ``increments``, how many steps), its approval count, its plan and its steps by name.
Importing the module registers it; no other file names it (``test_kind_declares_itself``).
Each ``increment`` step writes one ``tally_check.incremented`` audit event per idempotency key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from workflows.kinds import Field, Plan, StepDef, StepResult, WorkflowKind, register

if TYPE_CHECKING:
    from workflows.engine import StepContext

INCREMENTED = "tally_check.incremented"


def increment(ctx: StepContext) -> StepResult:
    key = ctx.step.idempotency_key
    with transaction.atomic():
        if not AuditEvent.objects.filter(action=INCREMENTED, target_id=key).exists():
            trail.record(
                INCREMENTED,
                context=AuditContext.WORKER,
                target_type="tally",
                target_id=key,
                workflow=ctx.workflow,
                after={"counter": ctx.params["counter"], "n": ctx.definition.params["n"]},
            )
    return StepResult.done({"n": ctx.definition.params["n"]})


@register
class TallyCheck(WorkflowKind):
    name = "tally_check"
    label = "Tally (test kind)"
    description = "Counts to increments, one audited step each; touches no cluster."
    hidden = True
    needs_cluster = False
    approvals = 2
    fields = (
        Field("counter", "Counter", help="What is counted; the workflow's target."),
        Field("increments", "Increments", "int", min_value=1, max_value=5),
    )

    def target(self, params: dict[str, Any]) -> str:
        return f"tally:{params['counter']}"

    def plan(self, params: dict[str, Any]) -> Plan:
        n = params["increments"]
        return Plan(actions={"increments": n, "steps": [f"increment {i}" for i in range(n)]})

    def steps(self, params: dict[str, Any], plan: dict[str, Any]) -> list[StepDef]:
        return [
            StepDef(f"increment_{i}", increment, label=f"Increment {i}", params={"n": i})
            for i in range(plan["increments"])
        ]
