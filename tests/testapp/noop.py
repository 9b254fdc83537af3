"""``noop_check``: the framework's self-test kind. It touches no cluster.

Test-only: registered by the test app (``tests.testapp``, installed by ``tests.settings``), never
in production, so it never writes into a production audit log. It proves the framework end to
end without a cluster (request, planning, approval, execution by a real worker, per-broker
progress, human gate, retries, crash recovery) and is what ``bench/bench_workflows.py`` queues.

Parameters (besides ``cluster``, any name: no cluster is read): ``label`` (required; any name,
the workflow's target ``noop:<label>``), ``brokers`` (how many pseudo-brokers, hence per-broker
``apply`` steps: 1 to 50, default 2) and ``mode`` (``plain``, ``gate`` or ``flaky``). They are
the kind's own, so requests pass them in ``params`` (or ``--param`` on the command line); of the
flat request fields only ``cluster`` and ``mode`` apply.

Steps: ``check`` (progress over ``10 * brokers`` units) → ``confirm`` (mode ``gate`` only, a
human gate) → ``apply`` once per pseudo-broker ``0 .. brokers-1`` (mode ``flaky``: the first
attempt of each fails, to exercise backoff) → ``verify`` (every ``apply`` left exactly one
effect). The effect of ``apply`` is one ``noop_check.applied`` audit event per idempotency key,
so a step run twice would be visible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from django.db import transaction

from audit import targets, trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from workflows.kinds import (
    Actions,
    Params,
    Plan,
    StepDef,
    StepResult,
    WorkflowKind,
    choice,
    integer,
    register,
    text,
)
from workflows.models import Workflow

if TYPE_CHECKING:
    from workflows.steps import StepContext

APPLIED = "noop_check.applied"


class NoopMode:
    PLAIN = "plain"
    GATE = "gate"
    FLAKY = "flaky"
    ALL = (PLAIN, GATE, FLAKY)


class TransientNoopError(RuntimeError):
    """The simulated transient failure of mode ``flaky``."""


class NoopParams(Params):
    label: str = text("Label", help="Any name; the workflow's target (noop:<label>).")
    brokers: int = integer(
        "Pseudo-brokers", ge=1, le=50, default=2, help="How many per-broker apply steps."
    )
    mode: Literal["plain", "gate", "flaky"] = choice(  # NoopMode.ALL
        "Mode",
        default=NoopMode.PLAIN,
        help="gate: wait for a human confirmation; flaky: retry each apply once.",
    )


class NoopPlan(Actions):
    summary: str
    brokers: list[int]
    units: int
    mode: Literal["plain", "gate", "flaky"]
    steps: list[str]


if TYPE_CHECKING:
    NoopContext = StepContext[NoopParams, NoopPlan]


def check(ctx: NoopContext) -> None:
    total = ctx.plan.units
    for done in range(0, total + 1, max(1, total // 5)):
        ctx.progress(done, total, "units")
    ctx.progress(total, total, "units")


def gate(ctx: NoopContext) -> StepResult:
    return StepResult.done({"confirmed_by": ctx.step.confirmed_by_id})


def apply(ctx: NoopContext) -> StepResult:
    if ctx.plan.mode == NoopMode.FLAKY and ctx.step.attempts == 1:
        raise TransientNoopError("simulated transient failure (mode flaky, first attempt)")
    with transaction.atomic():
        # The workflow row lock serialises two runs of the same step (a zombie and its successor).
        Workflow.objects.select_for_update().filter(pk=ctx.workflow.pk).first()
        exists = AuditEvent.objects.filter(
            action=APPLIED, extra__idempotency_key=ctx.idempotency_key
        ).exists()
        if not exists:
            trail.record(
                APPLIED,
                actor=None,
                context=AuditContext.WORKER,
                **targets.broker(ctx.params.cluster, ctx.step.broker),
                workflow=ctx.workflow,
                after={"applied": True},
                extra={"idempotency_key": ctx.idempotency_key},
            )
    ctx.progress(1, 1, "effects")
    return StepResult.done({"already_applied": exists})


def verify(ctx: NoopContext) -> StepResult:
    keys = list(ctx.workflow.steps.filter(name="apply").values_list("idempotency_key", flat=True))
    counts = {
        key: AuditEvent.objects.filter(action=APPLIED, extra__idempotency_key=key).count()
        for key in keys
    }
    wrong = {k: n for k, n in counts.items() if n != 1}
    if wrong:
        return StepResult.fail("EFFECT_NOT_EXACTLY_ONCE", f"effects per step: {wrong}")
    return StepResult.done({"effects": len(keys)})


@register
class NoopCheck(WorkflowKind[NoopParams, NoopPlan]):
    name = "noop_check"
    label = "Framework self-test (no cluster)"
    description = (
        "Runs check → (confirm) → apply per pseudo-broker → verify without touching a cluster: "
        "a self-test of approvals, execution, progress, human gates and crash recovery."
    )
    hidden = True
    needs_cluster = False
    params_model, actions_model = NoopParams, NoopPlan

    def target(self, params: NoopParams) -> str:
        return f"noop:{params.label}"

    def plan(self, params: NoopParams) -> Plan[NoopPlan]:
        brokers = list(range(params.brokers))
        steps = ["check", *(["confirm"] if params.mode == NoopMode.GATE else [])]
        steps += [f"apply@{b}" for b in brokers] + ["verify"]
        return Plan(
            NoopPlan(
                summary=f"Self-test over {len(brokers)} pseudo-brokers; changes nothing.",
                brokers=brokers,
                units=10 * len(brokers),
                mode=params.mode,
                steps=steps,
            ),
            information={"note": "a self-test: nothing drifts"},
        )

    def steps(self, params: NoopParams, plan: NoopPlan) -> list[StepDef]:
        steps = [StepDef("check", check, label="Check", unit="units", total=plan.units)]
        if plan.mode == NoopMode.GATE:
            steps.append(
                StepDef(
                    "confirm",
                    gate,
                    label="Human confirmation",
                    gate=True,
                    gate_prompt="Confirm that the self-test may continue.",
                )
            )
        steps += [
            StepDef("apply", apply, label=f"Apply on {b}", broker=b, unit="effects", total=1)
            for b in plan.brokers
        ]
        steps.append(StepDef("verify", verify, label="Verify exactly-once"))
        return steps
