"""The execution engine: runs an approved workflow's steps, one run per workflow at a time.

``run(workflow_id)`` claims the workflow's lease with a conditional UPDATE, plans it (in the
worker, never a request), starts it (re-computes the plan; different actions void the approvals),
then runs the steps in order. Each step function runs outside a transaction; its outcome commits
with its audit event, fenced by the lease, so a run that lost its lease commits nothing. Waits do
not count as failures; ``max_attempts`` raised runs fail the step. A killed run leaves a lease
that expires and ``reconcile()`` re-enqueues the workflow; an interrupted step runs again, which
is why steps are idempotent and ``attempts`` may exceed the effects.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.dispatch import Signal
from django.utils import timezone

from audit import targets, trail
from audit.choices import AuditContext, AuditOutcome
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.events import record_change, record_ready, workflow_snapshot
from workflows.kinds import get_kind
from workflows.models import Workflow, WorkflowStep
from workflows.planning import (
    PLAN_FIELDS,
    PlanOutcome,
    adopt_plan,
    approval_ttl,
    compute_plan,
    void_for_plan_change,
)
from workflows.queue import backoff_seconds, enqueue_run
from workflows.steps import StepContext, StepResult

__all__ = [
    "LeaseLost",
    "backoff_seconds",
    "reconcile",
    "run",
    "step_boundary",
]

#: Sent before a claimed step runs (``when="before"``), after its function returned success but
#: before that is recorded (``when="mid"``: the effect reached the cluster, PostgreSQL does not
#: know yet) and after its success is committed (``when="after"``), with ``workflow`` and
#: ``step``. Production connects nothing; the test app (``tests.testapp``) connects its fault
#: injector here (``make chaos``, the crash tests).
step_boundary = Signal()

#: Planning that fails for another reason than an unreachable cluster (a bug, bad data) is
#: retried this many times, then the workflow is refused with ``PLANNING_FAILED``.
PLAN_ERROR_ATTEMPTS = 5
#: An unreachable controller or agent is asked again after at most this many seconds.
UNAVAILABLE_RETRY_CAP_SECONDS = 30.0

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This run no longer owns the workflow: stop without writing anything."""


#: The workflow's plan (what its steps do) and what was shown with it: large, and fixed once
#: its steps run.
_PLAN_FIELDS = ("parameters", "plan", "plan_information", "plan_diff")


def _lease_delta() -> dt.timedelta:
    return dt.timedelta(seconds=settings.STRATA_WORKFLOW_LEASE_SECONDS)


class _Run:
    def __init__(self, workflow_id: int) -> None:
        self.workflow_id = workflow_id
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.wf: Workflow

    # --- lease -------------------------------------------------------------------------

    def claim(self) -> bool:
        now = timezone.now()
        free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
        due = Q(resume_at__isnull=True) | Q(resume_at__lte=now)
        runnable = (
            Q(state__in=[WorkflowState.PLANNING, WorkflowState.APPROVED, WorkflowState.RUNNING])
            & due
        )
        resumable = Q(state=WorkflowState.WAITING, resume_at__lte=now)
        claimed = (
            Workflow.objects.filter(pk=self.workflow_id)
            .filter(free)
            .filter(runnable | resumable)
            .update(lease_owner=self.owner, lease_expires_at=now + _lease_delta())
        )
        if claimed:
            self.wf = Workflow.objects.get(pk=self.workflow_id)
        return bool(claimed)

    def renew(self) -> None:
        renewed = Workflow.objects.filter(pk=self.wf.pk, lease_owner=self.owner).update(
            lease_expires_at=timezone.now() + _lease_delta()
        )
        if not renewed:
            raise LeaseLost(self.owner)

    def locked(self, *, plan: bool = True) -> Workflow:
        """Inside a transaction: lock the row and check we still own it (fencing).

        ``plan=False`` (a step's completion, once per step): the plan and its information are
        not read again but kept from this run's copy — they do not change while the steps run,
        and at 300 brokers they are 200 KB of JSON a step would parse (#17)."""
        rows = Workflow.objects.select_for_update().filter(pk=self.wf.pk, lease_owner=self.owner)
        if not plan:
            rows = rows.defer(*_PLAN_FIELDS)
        wf = rows.first()
        if wf is None:
            raise LeaseLost(self.owner)
        if not plan:
            for name in _PLAN_FIELDS:
                setattr(wf, name, getattr(self.wf, name))
        self.wf = wf
        return wf

    def release(self, wf: Workflow) -> None:
        wf.lease_owner, wf.lease_expires_at = "", None

    # --- transitions ------------------------------------------------------------------

    def _transition(
        self,
        wf: Workflow,
        action: str,
        before: dict[str, Any],
        *,
        outcome: str = AuditOutcome.SUCCESS,
        extra: dict[str, Any] | None = None,
        fields: tuple[str, ...] = (),
    ) -> None:
        wf.save(
            update_fields=[
                "state",
                "lease_owner",
                "lease_expires_at",
                "resume_at",
                "current_step",
                "waiting_reason",
                "error_code",
                "error_message",
                "updated_at",
                *fields,
            ]
        )
        record_change(wf, action, before, outcome=outcome, extra=extra)

    def plan(self) -> str:
        """planning → pending_approval / approved / refused, or planning again later."""
        outcome = compute_plan(self.wf)
        now = timezone.now()
        with transaction.atomic():
            wf = self.locked()
            self.release(wf)
            if wf.state != WorkflowState.PLANNING:
                wf.save(update_fields=["lease_owner", "lease_expires_at", "updated_at"])
                return wf.state
            before = workflow_snapshot(wf)
            if outcome.plan is not None:
                adopt_plan(wf, outcome, now)
                wf.waiting_reason, wf.resume_at = "", None
                if wf.expected_plan_hash and wf.expected_plan_hash != wf.plan_hash:
                    return self._refuse(
                        wf,
                        before,
                        WorkflowError(
                            ErrorCode.PLAN_CHANGED,
                            f"The actions' hash is {wf.plan_hash}, not the expected "
                            f"{wf.expected_plan_hash}; review the plan and request again.",
                            409,
                        ),
                    )
                ready = wf.break_glass or wf.approvals_required == 0
                wf.state = WorkflowState.APPROVED if ready else WorkflowState.PENDING_APPROVAL
                wf.approved_at = now if ready else None
                self._transition(
                    wf,
                    AuditAction.WORKFLOW_PLANNED,
                    before,
                    extra={"plan_hash": wf.plan_hash, "actions": wf.plan},
                    fields=(*PLAN_FIELDS, "approved_at"),
                )
                if ready:
                    record_ready(wf, actor=None, context=AuditContext.WORKER)
                    _schedule(wf.pk, 0)
                return wf.state
            if outcome.refusal is not None:
                return self._refuse(wf, before, outcome.refusal)
            wf.plan_attempts += 1
            if outcome.error and wf.plan_attempts >= PLAN_ERROR_ATTEMPTS:
                return self._refuse(
                    wf, before, WorkflowError(ErrorCode.PLANNING_FAILED, outcome.error, 500)
                )
            if outcome.unavailable and now - wf.created_at >= approval_ttl():
                return self._refuse(
                    wf,
                    before,
                    WorkflowError(
                        ErrorCode.BROKER_NOT_AVAILABLE,
                        f"The cluster did not answer for {settings.STRATA_APPROVAL_TTL_HOURS:g} "
                        f"h of planning: {outcome.unavailable}",
                        503,
                    ),
                )
            self._wait_to_retry(
                wf, before, f"Planning waits for the cluster: {outcome.unavailable}", outcome
            )
            return wf.state

    def _refuse(self, wf: Workflow, before: dict[str, Any], refusal: WorkflowError) -> str:
        wf.state, wf.finished_at, wf.resume_at = WorkflowState.REFUSED, timezone.now(), None
        wf.waiting_reason = ""
        wf.error_code, wf.error_message = refusal.code[:64], refusal.message
        self._transition(
            wf,
            AuditAction.WORKFLOW_REFUSED,
            before,
            outcome=AuditOutcome.DENIED,
            extra={"error": refusal.code, "message": refusal.message[:2000]},
            fields=(*PLAN_FIELDS, "finished_at"),
        )
        return wf.state

    def _wait_to_retry(
        self, wf: Workflow, before: dict[str, Any], reason: str, outcome: PlanOutcome
    ) -> None:
        """Stay in the current state (planning / approved) and plan again after a backoff.
        Audited once per wait, not once per attempt."""
        if outcome.error:
            reason = f"Planning failed (attempt {wf.plan_attempts} of {PLAN_ERROR_ATTEMPTS}): {outcome.error}"
        delay = min(backoff_seconds(wf.plan_attempts), UNAVAILABLE_RETRY_CAP_SECONDS)
        first = not wf.waiting_reason
        wf.waiting_reason, wf.resume_at = reason, timezone.now() + dt.timedelta(seconds=delay)
        fields = ["plan_attempts", "waiting_reason", "resume_at", "lease_owner"]
        fields += ["lease_expires_at", "updated_at"]
        wf.save(update_fields=fields)
        if first:
            record_change(
                wf,
                AuditAction.WORKFLOW_WAITING,
                before,
                extra={"reason": reason[:2000], "at": wf.state, "retry_in_seconds": delay},
            )
        _schedule(wf.pk, delay)

    def start(self) -> bool:
        """approved → running, or back to pending_approval / failed / waiting. True to go on."""
        kind = get_kind(self.wf.kind)
        outcome = compute_plan(self.wf)
        now = timezone.now()
        with transaction.atomic():
            wf = self.locked()
            if wf.state != WorkflowState.APPROVED:
                return wf.state in (WorkflowState.RUNNING, WorkflowState.WAITING)
            before = workflow_snapshot(wf)
            self.release(wf)
            valid = wf.valid_approvals(now).count()
            if not wf.break_glass and valid < wf.approvals_required:
                wf.approvals.filter(voided_at__isnull=True).update(
                    voided_at=now, void_reason="expired"
                )
                wf.state, wf.approved_at = WorkflowState.PENDING_APPROVAL, None
                wf.waiting_reason, wf.resume_at = "", None
                self._transition(
                    wf,
                    AuditAction.WORKFLOW_APPROVALS_EXPIRED,
                    before,
                    extra={"approvals_valid": valid, "approvals_required": wf.approvals_required},
                    fields=("approved_at",),
                )
                return False
            refusal: WorkflowError | None
            if outcome.plan is None and outcome.refusal is None:
                wf.plan_attempts += 1
                if wf.break_glass and now - (wf.approved_at or now) >= approval_ttl():
                    refusal = WorkflowError(
                        ErrorCode.BROKER_NOT_AVAILABLE,
                        f"The cluster did not answer before start: {outcome.unavailable or outcome.error}",
                        503,
                    )
                else:
                    self._wait_to_retry(
                        wf,
                        before,
                        "Approved; waits for the cluster to answer before it starts: "
                        f"{outcome.unavailable}",
                        outcome,
                    )
                    return False
            else:
                refusal = outcome.refusal
            if refusal is not None:
                wf.state, wf.finished_at = WorkflowState.FAILED, now
                wf.error_code, wf.error_message = refusal.code, refusal.message
                wf.waiting_reason, wf.resume_at = "", None
                self._transition(
                    wf,
                    AuditAction.WORKFLOW_FAILED,
                    before,
                    outcome=AuditOutcome.FAILURE,
                    extra={"error": refusal.code, "message": refusal.message, "at": "preflight"},
                    fields=("finished_at",),
                )
                return False
            old_hash, old_plan = wf.plan_hash, wf.plan
            changes = adopt_plan(wf, outcome, now)
            wf.waiting_reason, wf.resume_at = "", None
            if wf.plan_hash != old_hash:
                voided = void_for_plan_change(wf, changes, now)
                wf.state, wf.approved_at = WorkflowState.PENDING_APPROVAL, None
                wf.break_glass, wf.break_glass_reason = False, ""
                self._transition(
                    wf,
                    AuditAction.WORKFLOW_PLAN_CHANGED,
                    {**before, "plan": old_plan},
                    extra={
                        "old_plan_hash": old_hash,
                        "new_plan_hash": wf.plan_hash,
                        "approvals_voided": voided,
                        "changes": changes,
                        "new_plan": wf.plan,
                    },
                    fields=(
                        *PLAN_FIELDS,
                        "plan_diff",
                        "approved_at",
                        "break_glass",
                        "break_glass_reason",
                    ),
                )
                return False
            definitions = kind.steps(kind.read_params(wf.parameters), kind.read_plan(wf.plan))
            WorkflowStep.objects.bulk_create(
                [
                    WorkflowStep(
                        workflow=wf,
                        position=i,
                        name=d.name,
                        label=d.label or d.name,
                        broker=d.broker,
                        gate=d.gate,
                        max_attempts=d.max_attempts,
                        progress_unit=d.unit,
                        progress_total=d.total,
                        params=trail.normalise(d.params),
                        idempotency_key=f"wf{wf.pk}:{i}:{d.name}"
                        + (f":b{d.broker}" if d.broker is not None else ""),
                    )
                    for i, d in enumerate(definitions)
                ]
            )
            wf.state, wf.started_at = WorkflowState.RUNNING, now
            wf.lease_owner, wf.lease_expires_at = self.owner, now + _lease_delta()
            self._transition(
                wf,
                AuditAction.WORKFLOW_STARTED,
                before,
                extra={"steps": [d.name for d in definitions], "break_glass": wf.break_glass},
                fields=(*PLAN_FIELDS, "started_at"),
            )
        return True

    def resume_if_waiting(self) -> None:
        """waiting → running, unless this run only re-tries the step it waits on.

        A workflow waiting for an unreachable broker (or any ``StepResult.wait``) stays
        ``waiting`` while its step is re-tried, and becomes ``running`` in :meth:`complete`
        once the step gets through: an SRE watching the page sees one steady "Waiting"
        instead of a flicker to "Running" on every attempt, and the audit log records one
        resumption when the wait ended, not one per attempt.
        """
        with transaction.atomic():
            wf = self.locked()
            if wf.state != WorkflowState.WAITING:
                return
            step = (
                WorkflowStep.objects.filter(workflow_id=wf.pk)
                .exclude(state=StepState.SUCCEEDED)
                .order_by("position")
                .first()
            )
            if step is not None and step.state == StepState.WAITING and not step.gate:
                return
            before = workflow_snapshot(wf)
            wf.state, wf.waiting_reason, wf.resume_at = WorkflowState.RUNNING, "", None
            self._transition(wf, AuditAction.WORKFLOW_RESUMED, before)

    def execute(self) -> str:
        if self.wf.state == WorkflowState.PLANNING:
            return self.plan()
        if self.wf.state == WorkflowState.APPROVED and not self.start():
            return self.wf.state
        self.resume_if_waiting()
        kind = get_kind(self.wf.kind)
        # Each step row finds its definition by name (and broker, for a fan-out), never by
        # position: a row always runs the function it was created for.
        params, plan = kind.read_params(self.wf.parameters), kind.read_plan(self.wf.plan)
        definitions = {(d.name, d.broker): d for d in kind.steps(params, plan)}
        while True:
            step = (
                WorkflowStep.objects.filter(workflow_id=self.wf.pk)
                .exclude(state=StepState.SUCCEEDED)
                .order_by("position")
                .first()
            )
            if step is None:
                return self.finish()
            definition = definitions.get((step.name, step.broker))
            if definition is None:  # the kind's code changed under a running workflow
                return self.fail(
                    step,
                    "STEP_MISMATCH",
                    f"step {step.position} {step.name!r}"
                    + (f" (broker {step.broker})" if step.broker is not None else "")
                    + " is no longer a step of this kind",
                )
            if step.state in StepState.TERMINAL:  # failed/cancelled step left by a crash
                return self.fail(step, "STEP_FAILED", step.last_error or "step failed")
            if step.gate and step.confirmed_at is None:
                return self.wait(
                    step, definition.gate_prompt or "Waiting for a confirmation.", None
                )
            if step.not_before and step.not_before > timezone.now():
                return self.defer(step.not_before)
            if not self.claim_step(step):
                continue
            step_boundary.send(_Run, workflow=self.wf, step=step, when="before")
            ctx = StepContext(self.wf, step, definition, params=params, plan=plan, renew=self.renew)
            try:
                result = definition.run(ctx) or StepResult.done()
            except LeaseLost:
                raise
            except WorkflowError as exc:
                return self.fail(step, exc.code, exc.message)
            except Exception as exc:  # a step's failure, retried with backoff
                log.warning("step %s of %s failed: %s", step.name, self.wf, exc, exc_info=True)
                ctx.log(f"attempt {step.attempts} failed: {exc!r}", level="error")
                step.failures += 1
                if step.failures >= step.max_attempts:
                    return self.fail(step, "STEP_FAILED", f"{type(exc).__name__}: {exc}")
                return self.retry(step, f"{type(exc).__name__}: {exc}")
            if result.status == StepResult.FAIL:
                return self.fail(step, result.code or "STEP_FAILED", result.reason)
            if result.status == StepResult.WAIT:
                return self.wait(step, result.reason, result.retry_in)
            # the step's effect is done and not yet recorded: the hardest moment to crash
            step_boundary.send(_Run, workflow=self.wf, step=step, when="mid")
            self.complete(step, result.output)
            step_boundary.send(_Run, workflow=self.wf, step=step, when="after")

    def claim_step(self, step: WorkflowStep) -> bool:
        self.renew()
        now = timezone.now()
        claimed = WorkflowStep.objects.filter(pk=step.pk, state__in=StepState.CLAIMABLE).update(
            state=StepState.RUNNING,
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), now),
            not_before=None,
            updated_at=now,
        )
        Workflow.objects.filter(pk=self.wf.pk, lease_owner=self.owner).update(
            current_step=step.label or step.name
        )
        step.refresh_from_db()
        return bool(claimed)

    def complete(self, step: WorkflowStep, output: dict[str, Any]) -> None:
        now = timezone.now()
        with transaction.atomic():
            wf = self.locked(plan=False)
            done = WorkflowStep.objects.filter(
                pk=step.pk, state=StepState.RUNNING, attempts=step.attempts
            ).update(
                state=StepState.SUCCEEDED,
                finished_at=now,
                output=trail.normalise(output),
                last_error="",
                progress_done=Coalesce(F("progress_total"), F("progress_done")),
                updated_at=now,
            )
            if not done:
                raise LeaseLost(f"step {step.pk} was claimed by another run")
            if wf.state == WorkflowState.WAITING:  # the step it waited on got through
                before = workflow_snapshot(wf)
                wf.state, wf.waiting_reason, wf.resume_at = WorkflowState.RUNNING, "", None
                self._transition(wf, AuditAction.WORKFLOW_RESUMED, before)
            trail.record(
                AuditAction.STEP_SUCCEEDED,
                actor=None,
                context=AuditContext.WORKER,
                **(
                    targets.broker(self.wf.cluster, step.broker)
                    if step.broker is not None
                    else {"target_type": "workflow", "target_id": self.wf.pk}
                ),
                workflow=self.wf,
                before={"state": StepState.RUNNING},
                after={"state": StepState.SUCCEEDED, "output": trail.normalise(output)},
                extra={
                    "step": step.name,
                    "position": step.position,
                    "attempts": step.attempts,
                    "idempotency_key": step.idempotency_key,
                },
            )

    def _step_update(self, step: WorkflowStep, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(step, name, value)
        step.save(update_fields=[*fields, "updated_at"])

    def retry(self, step: WorkflowStep, error: str) -> str:
        delay = backoff_seconds(step.failures)
        when = timezone.now() + dt.timedelta(seconds=delay)
        with transaction.atomic():
            wf = self.locked()
            before = workflow_snapshot(wf)
            self._step_update(
                step,
                state=StepState.PENDING,
                last_error=error,
                not_before=when,
                failures=step.failures,
            )
            self.release(wf)
            wf.resume_at = when
            wf.save(update_fields=["lease_owner", "lease_expires_at", "resume_at", "updated_at"])
            record_change(
                wf,
                AuditAction.STEP_RETRY,
                before,
                outcome=AuditOutcome.FAILURE,
                extra={
                    "step": step.name,
                    "position": step.position,
                    "attempts": step.attempts,
                    "failures": step.failures,
                    "error": error[:2000],
                    "retry_in_seconds": delay,
                },
            )
            _schedule(wf.pk, delay)
        return wf.state

    def wait(self, step: WorkflowStep, reason: str, retry_in: float | None) -> str:
        when = timezone.now() + dt.timedelta(seconds=retry_in) if retry_in else None
        with transaction.atomic():
            wf = self.locked()
            before = workflow_snapshot(wf)
            # The same wait again (a re-check that found nothing new) changes no state worth an
            # event: one audit event per wait, not one per re-check (a probe every 5 s for ten
            # minutes was 240 events). A new reason is news and is recorded.
            again = (
                wf.state == WorkflowState.WAITING
                and wf.waiting_reason == reason
                and wf.current_step == (step.label or step.name)
            )
            # the reason is the workflow's waiting_reason; the step's last_error keeps errors only
            self._step_update(step, state=StepState.WAITING, not_before=when)
            self.release(wf)
            wf.state, wf.waiting_reason, wf.resume_at = WorkflowState.WAITING, reason, when
            if again:
                wf.save(
                    update_fields=["lease_owner", "lease_expires_at", "resume_at", "updated_at"]
                )
                if retry_in:
                    _schedule(wf.pk, retry_in)
                return wf.state
            self._transition(
                wf,
                AuditAction.WORKFLOW_WAITING,
                before,
                extra={
                    "step": step.name,
                    "position": step.position,
                    "reason": reason,
                    "gate": step.gate and step.confirmed_at is None,
                    "retry_in_seconds": retry_in,
                },
            )
            if retry_in:
                _schedule(wf.pk, retry_in)
        return wf.state

    def defer(self, when: dt.datetime) -> str:
        with transaction.atomic():
            wf = self.locked()
            self.release(wf)
            wf.resume_at = when
            wf.save(update_fields=["lease_owner", "lease_expires_at", "resume_at", "updated_at"])
            _schedule(wf.pk, max(0.0, (when - timezone.now()).total_seconds()))
        return wf.state

    def fail(self, step: WorkflowStep | None, code: str, message: str) -> str:
        now = timezone.now()
        with transaction.atomic():
            wf = self.locked()
            before = workflow_snapshot(wf)
            if step is not None:
                self._step_update(
                    step,
                    state=StepState.FAILED,
                    last_error=message,
                    finished_at=now,
                    failures=step.failures,
                )
                WorkflowStep.objects.filter(workflow=wf, state=StepState.PENDING).update(
                    state=StepState.CANCELLED
                )
            self.release(wf)
            wf.state, wf.finished_at, wf.resume_at = WorkflowState.FAILED, now, None
            wf.error_code, wf.error_message = code[:64], message
            self._transition(
                wf,
                AuditAction.WORKFLOW_FAILED,
                before,
                outcome=AuditOutcome.FAILURE,
                extra={
                    "error": code,
                    "message": message[:2000],
                    "step": step.name if step else None,
                },
                fields=("finished_at",),
            )
        return wf.state

    def finish(self) -> str:
        now = timezone.now()
        with transaction.atomic():
            wf = self.locked()
            before = workflow_snapshot(wf)
            self.release(wf)
            wf.state, wf.finished_at, wf.resume_at = WorkflowState.SUCCEEDED, now, None
            wf.current_step, wf.waiting_reason = "", ""
            self._transition(wf, AuditAction.WORKFLOW_SUCCEEDED, before, fields=("finished_at",))
        return wf.state


def _schedule(workflow_id: int, delay: float) -> None:
    enqueue_run(workflow_id, countdown=delay)


def run(workflow_id: int) -> str:
    """Run the workflow as far as it goes now; returns its state, or ``not-claimed``."""
    r = _Run(workflow_id)
    if not r.claim():
        return "not-claimed"
    try:
        return r.execute()
    except LeaseLost:
        log.warning("workflow %s: lease lost by %s; another run owns it", workflow_id, r.owner)
        return "lease-lost"
    except BaseException:
        # Unexpected (a bug, a soft time limit): give the lease back so the reconciler resumes.
        Workflow.objects.filter(pk=workflow_id, lease_owner=r.owner).update(
            lease_owner="", lease_expires_at=None
        )
        raise


def reconcile(now: dt.datetime | None = None) -> list[int]:
    """Find workflows that should be moving and are not; re-enqueue them. Returns their ids.

    - running with an expired lease (its worker died): the lease is cleared (audited,
      context beat) and the workflow re-enqueued;
    - approved / running / waiting whose ``resume_at`` passed and that nobody holds: a lost
      message (Redis restarted) or a backoff whose countdown task was lost.
    A grace of one lease period keeps it from racing the tasks that are merely queued.
    """
    now = now or timezone.now()
    grace = now - _lease_delta()
    expired = list(
        Workflow.objects.filter(
            state__in=WorkflowState.ACTIVE, lease_expires_at__lt=now
        ).values_list("pk", flat=True)
    )
    for pk in expired:
        with transaction.atomic():
            wf = (
                Workflow.objects.select_for_update().filter(pk=pk, lease_expires_at__lt=now).first()
            )
            if wf is None:
                continue
            dead_owner = wf.lease_owner
            Workflow.objects.filter(pk=pk).update(lease_owner="", lease_expires_at=None)
            record_change(
                wf,
                AuditAction.WORKFLOW_RESUMED,
                {"lease_owner": dead_owner},
                context=AuditContext.BEAT,
                after={"lease_owner": ""},
                extra={"reason": "lease expired", "current_step": wf.current_step},
            )
    unheld = Q(lease_expires_at__isnull=True)
    due = Q(resume_at__isnull=True) | Q(resume_at__lte=now)
    stalled = list(
        Workflow.objects.filter(unheld)
        .filter(
            Q(state=WorkflowState.PLANNING, created_at__lt=grace) & due
            | Q(state=WorkflowState.APPROVED, approved_at__lt=grace) & due
            | Q(state=WorkflowState.RUNNING, updated_at__lt=grace) & due
            | Q(state=WorkflowState.WAITING, resume_at__lte=now)
        )
        .values_list("pk", flat=True)[:1000]
    )
    todo = sorted(set(expired) | set(stalled))
    for pk in todo:
        enqueue_run(pk)
    return todo
