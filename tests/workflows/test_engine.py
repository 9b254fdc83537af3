"""The execution engine, run in-process (the real-worker tests are in test_worker_*.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from tests.testapp import noop
from workflows import engine
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds import Plan
from workflows.models import Workflow, WorkflowStep

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def _drive(wf: Workflow, limit: int = 20) -> Workflow:
    """Run until the workflow stops moving, skipping backoff waits (no sleeping in tests)."""
    for _ in range(limit):
        Workflow.objects.filter(pk=wf.pk).update(resume_at=None)
        WorkflowStep.objects.filter(workflow=wf, state=StepState.PENDING).update(not_before=None)
        if engine.run(wf.pk) == "not-claimed":
            break
        wf.refresh_from_db()
        if wf.state != WorkflowState.RUNNING:
            break
    wf.refresh_from_db()
    return wf


def _effects(wf: Workflow) -> dict[str, int]:
    keys = wf.steps.filter(name="apply").values_list("idempotency_key", flat=True)
    return {
        k: AuditEvent.objects.filter(action=noop.APPLIED, extra__idempotency_key=k).count()
        for k in keys
    }


def test_an_approved_workflow_runs_every_step_to_success(operator, approver):
    wf = approve(request_noop(operator, brokers=3), approver)
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED
    wf.refresh_from_db()
    assert wf.started_at and wf.finished_at and wf.lease_owner == ""
    steps = list(wf.steps.order_by("position"))
    assert [s.name for s in steps] == ["check", "apply", "apply", "apply", "verify"]
    assert [s.broker for s in steps if s.name == "apply"] == [0, 1, 2]
    assert all(s.state == StepState.SUCCEEDED and s.attempts == 1 for s in steps)
    assert steps[0].progress_done == steps[0].progress_total == 30
    assert set(_effects(wf).values()) == {1}
    actions = list(
        AuditEvent.objects.filter(workflow=wf).order_by("seq").values_list("action", flat=True)
    )
    assert actions[:5] == [
        AuditAction.WORKFLOW_REQUESTED,
        AuditAction.WORKFLOW_PLANNED,
        AuditAction.WORKFLOW_APPROVED,
        AuditAction.WORKFLOW_READY,
        AuditAction.WORKFLOW_STARTED,
    ]
    assert actions.count(AuditAction.STEP_SUCCEEDED) == 5
    assert actions[-1] == AuditAction.WORKFLOW_SUCCEEDED


def test_a_pending_workflow_is_not_run(operator):
    wf = request_noop(operator)
    assert engine.run(wf.pk) == "not-claimed"
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.PENDING_APPROVAL


def test_a_human_gate_waits_until_an_operator_confirms(api, operator, approver, viewer):
    wf = approve(request_noop(operator, mode="gate"), approver)
    assert engine.run(wf.pk) == WorkflowState.WAITING
    wf.refresh_from_db()
    gate = wf.steps.get(name="confirm")
    assert gate.state == StepState.WAITING and "Confirm" in wf.waiting_reason
    assert not wf.steps.filter(name="apply", state=StepState.SUCCEEDED).exists()
    assert engine.run(wf.pk) == "not-claimed"  # a waiting gate is not resumed by itself
    assert api(viewer).post(f"/workflows/{wf.pk}/confirm").status_code == 403
    response = api(operator).post(f"/workflows/{wf.pk}/confirm", {"comment": "disk swapped"})
    assert response.status_code == 200 and response.json()["state"] == WorkflowState.RUNNING
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED
    gate.refresh_from_db()
    assert gate.confirmed_by == operator and gate.state == StepState.SUCCEEDED
    confirmed = AuditEvent.objects.get(action=AuditAction.WORKFLOW_CONFIRMED, outcome="success")
    assert confirmed.extra["comment"] == "disk swapped"
    again = api(operator).post(f"/workflows/{wf.pk}/confirm")
    assert again.status_code == 409 and again.json()["error"] == "NOT_WAITING_FOR_CONFIRMATION"


def test_a_failing_step_is_retried_with_backoff_and_applied_once(operator, approver):
    wf = approve(request_noop(operator, mode="flaky", brokers=2), approver)
    assert engine.run(wf.pk) == WorkflowState.RUNNING  # first apply failed: backing off
    wf.refresh_from_db()
    step = wf.steps.get(name="apply", broker=0)
    assert step.state == StepState.PENDING and "simulated transient" in step.last_error
    assert wf.resume_at and wf.resume_at > timezone.now() and step.not_before == wf.resume_at
    assert engine.run(wf.pk) == "not-claimed"  # not before the backoff is over
    wf = _drive(wf)
    assert wf.state == WorkflowState.SUCCEEDED
    assert list(wf.steps.filter(name="apply").values_list("attempts", flat=True)) == [2, 2]
    assert set(_effects(wf).values()) == {1}
    assert AuditEvent.objects.filter(action=AuditAction.STEP_RETRY, workflow=wf).count() == 2
    assert wf.logs.filter(level="error").count() == 2


def test_backoff_grows_exponentially_and_is_capped(settings):
    settings.STRATA_STEP_RETRY_BASE_SECONDS = 2
    settings.STRATA_STEP_RETRY_MAX_SECONDS = 30
    assert [engine.backoff_seconds(n) for n in (1, 2, 3, 4, 5, 6)] == [2, 4, 8, 16, 30, 30]


def test_a_step_failing_every_attempt_fails_the_workflow(operator, approver, monkeypatch):
    def broken(ctx):
        raise OSError("disk on fire")

    monkeypatch.setattr(noop, "apply", broken)
    wf = _drive(approve(request_noop(operator, brokers=1), approver))
    assert wf.state == WorkflowState.FAILED and wf.error_code == "STEP_FAILED"
    step = wf.steps.get(name="apply")
    assert step.state == StepState.FAILED and step.attempts == step.max_attempts == 5
    assert step.failures == 5
    assert wf.steps.get(name="verify").state == StepState.CANCELLED
    failed = AuditEvent.objects.get(action=AuditAction.WORKFLOW_FAILED, workflow=wf)
    assert "disk on fire" in failed.extra["message"]


def _run_until_terminal(wf: Workflow, runs: int = 12) -> None:
    """Run the engine on ``wf`` as the beat would, each time as soon as it is due."""
    for _ in range(runs):
        Workflow.objects.filter(pk=wf.pk).update(resume_at=timezone.now() - dt.timedelta(seconds=1))
        WorkflowStep.objects.filter(workflow=wf).update(not_before=None)
        engine.run(wf.pk)
        wf.refresh_from_db()
        if wf.state in WorkflowState.TERMINAL:
            return


def test_waiting_runs_are_not_failures(operator, approver, monkeypatch):
    """A step that waits (a Spark run, an unreachable broker) is re-run many times; one
    exception afterwards is retried, not the last straw: only raising runs count."""
    from workflows.kinds import StepResult

    runs, original = {"n": 0}, noop.apply

    def waits_then_raises_once(ctx):
        runs["n"] += 1
        if runs["n"] <= 6:
            return StepResult.wait("still following", retry_in=0.01)
        if runs["n"] == 7:
            raise ConnectionError("redis went away for a moment")
        return original(ctx)

    monkeypatch.setattr(noop, "apply", waits_then_raises_once)
    wf = approve(request_noop(operator, brokers=1), approver)
    _run_until_terminal(wf)
    assert wf.state == WorkflowState.SUCCEEDED, wf.error_message
    step = wf.steps.get(name="apply")
    assert (step.attempts, step.failures) == (8, 1)
    retry = AuditEvent.objects.get(action=AuditAction.STEP_RETRY, workflow=wf)
    assert retry.extra["failures"] == 1 and retry.extra["attempts"] == 7


def test_a_wait_is_audited_once_and_again_only_when_its_reason_changes(
    operator, approver, monkeypatch
):
    """A re-check that finds nothing new writes no audit event (a probe every 5 s wrote two
    per probe); a new reason is news."""
    from workflows.kinds import StepResult

    runs, original = {"n": 0}, noop.apply
    reasons = ["acks 0 of 3", "acks 0 of 3", "acks 0 of 3", "acks 2 of 3", "acks 2 of 3"]

    def waits(ctx):
        runs["n"] += 1
        if runs["n"] <= len(reasons):
            return StepResult.wait(reasons[runs["n"] - 1], retry_in=0.01)
        return original(ctx)

    monkeypatch.setattr(noop, "apply", waits)
    wf = approve(request_noop(operator, brokers=1), approver)
    _run_until_terminal(wf)
    assert wf.state == WorkflowState.SUCCEEDED, wf.error_message
    waits_audited = AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_WAITING)
    assert [e.extra["reason"] for e in waits_audited.order_by("seq")] == [
        "acks 0 of 3",
        "acks 2 of 3",
    ]
    assert wf.steps.get(name="apply").attempts == 6


def test_a_steps_last_error_holds_errors_never_a_waits_reason(operator, approver, monkeypatch):
    """The "Last error" column showed "Waiting for a confirmation." and every wait's status. A
    wait's reason is the workflow's waiting_reason (which the step sees again on its next
    re-check); last_error is what the step last raised, cleared when it succeeds."""
    from workflows.kinds import StepResult

    runs, seen, original = {"n": 0}, [], noop.apply
    script = ["wait", "wait", "raise", "wait"]

    def scripted(ctx):
        seen.append((ctx.workflow.waiting_reason, ctx.step.last_error))
        runs["n"] += 1
        if runs["n"] > len(script):
            return original(ctx)
        if script[runs["n"] - 1] == "raise":
            raise ConnectionError("agent reset the connection")
        return StepResult.wait(f"acks {runs['n']} of 3", retry_in=0.01)

    monkeypatch.setattr(noop, "apply", scripted)
    wf = approve(request_noop(operator, brokers=1), approver)
    Workflow.objects.filter(pk=wf.pk).update(resume_at=None)
    engine.run(wf.pk)
    wf.refresh_from_db()
    step = wf.steps.get(name="apply")
    assert (wf.state, wf.waiting_reason) == (WorkflowState.WAITING, "acks 1 of 3")
    assert step.state == StepState.WAITING and step.last_error == ""
    _run_until_terminal(wf)
    assert wf.state == WorkflowState.SUCCEEDED, wf.error_message
    assert seen == [
        ("", ""),
        ("acks 1 of 3", ""),  # a re-check sees the reason it waited for
        ("acks 2 of 3", ""),
        ("", "ConnectionError: agent reset the connection"),  # the retry cleared the wait
        ("acks 4 of 3", "ConnectionError: agent reset the connection"),
    ]
    assert wf.steps.get(name="apply").last_error == ""


def test_a_changed_plan_voids_approvals_and_returns_to_pending(
    api, operator, approver, second_approver, monkeypatch
):
    wf = approve(request_noop(operator), approver)
    old_hash = wf.plan_hash
    original = noop.NoopCheck.plan

    def drifted(self, params):
        plan = original(self, params)
        changed = plan.actions.model_copy(update={"summary": "the cluster changed"})
        return Plan(changed, plan.information)

    monkeypatch.setattr(noop.NoopCheck, "plan", drifted)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    wf.refresh_from_db()
    assert wf.plan_hash != old_hash and wf.plan["summary"] == "the cluster changed"
    assert [(c["path"], c["after"]) for c in wf.plan_diff] == [("summary", "the cluster changed")]
    assert wf.approvals.get().void_reason == "plan changed"
    assert not wf.steps.exists()
    event = AuditEvent.objects.get(action=AuditAction.WORKFLOW_PLAN_CHANGED)
    assert event.extra["old_plan_hash"] == old_hash and event.extra["approvals_voided"] == 1
    # approving the old hash is refused; the new one runs
    stale = api(second_approver).post(f"/workflows/{wf.pk}/approve", {"plan_hash": old_hash})
    assert stale.json()["error"] == "PLAN_CHANGED"
    assert (
        api(approver)
        .post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
        .json()["state"]
        == "approved"
    )
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED


def test_approvals_that_expired_before_the_start_return_it_to_pending(operator, approver, settings):
    wf = approve(request_noop(operator), approver)
    wf.approvals.update(created_at=timezone.now() - dt.timedelta(hours=25))
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    assert AuditEvent.objects.filter(action=AuditAction.WORKFLOW_APPROVALS_EXPIRED).exists()


def test_a_refusal_at_the_start_fails_the_workflow(operator, approver, monkeypatch):
    from workflows.kinds import Refusal

    wf = approve(request_noop(operator), approver)

    def refuse(self, params):
        raise Refusal("TIERED_STORAGE_DISABLEMENT_IN_PROGRESS", "topic is DISABLING")

    monkeypatch.setattr(noop.NoopCheck, "plan", refuse)
    assert engine.run(wf.pk) == WorkflowState.FAILED
    wf.refresh_from_db()
    assert wf.error_code == "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS"


def test_break_glass_runs_without_approvals(api, admin):
    response = api(admin).post(
        "/workflows",
        {
            "kind": "noop_check",
            "cluster": "lab",
            "params": {"label": "bg"},
            "break_glass": True,
            "break_glass_reason": "outage, approvers asleep",
        },
    )
    assert engine.run(response.json()["id"]) == WorkflowState.APPROVED  # planned, no approval
    assert engine.run(response.json()["id"]) == WorkflowState.SUCCEEDED
    started = AuditEvent.objects.get(action=AuditAction.WORKFLOW_STARTED)
    assert started.extra["break_glass"] is True


def test_a_held_lease_keeps_a_second_run_out(operator, approver):
    wf = approve(request_noop(operator), approver)
    Workflow.objects.filter(pk=wf.pk).update(
        lease_owner="elsewhere", lease_expires_at=timezone.now() + dt.timedelta(minutes=1)
    )
    assert engine.run(wf.pk) == "not-claimed"


def test_a_run_that_lost_its_lease_cannot_complete_its_step(operator, approver, monkeypatch):
    """Fencing: a stalled run whose workflow was handed over writes nothing."""
    original = noop.apply

    def stalls(ctx):
        result = original(ctx)
        Workflow.objects.filter(pk=ctx.workflow.pk).update(lease_owner="successor")
        return result

    monkeypatch.setattr(noop, "apply", stalls)
    wf = approve(request_noop(operator, brokers=1), approver)
    assert engine.run(wf.pk) == "lease-lost"
    assert wf.steps.get(name="apply").state == StepState.RUNNING
    assert not AuditEvent.objects.filter(
        action=AuditAction.STEP_SUCCEEDED, extra__step="apply"
    ).exists()


def test_the_reconciler_resumes_a_workflow_whose_lease_expired(operator, approver):
    """A worker died inside 'apply' after its effect: the next run repeats it, effect once."""
    wf = approve(request_noop(operator, brokers=1), approver)
    original = noop.apply
    noop_apply_calls = []

    def dies_after_effect(ctx):
        original(ctx)
        noop_apply_calls.append(ctx.step.attempts)
        raise SystemExit("worker killed")  # BaseException: not retried, lease given back

    noop.apply, saved = dies_after_effect, noop.apply
    try:
        with pytest.raises(SystemExit):
            engine.run(wf.pk)
    finally:
        noop.apply = saved
    # a SIGKILL would leave the lease behind: simulate an expired one
    Workflow.objects.filter(pk=wf.pk).update(
        lease_owner="dead-worker", lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert engine.reconcile() == [wf.pk]
    resumed = AuditEvent.objects.get(action=AuditAction.WORKFLOW_RESUMED)
    assert resumed.context == "beat" and resumed.before == {"lease_owner": "dead-worker"}
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED
    step = Workflow.objects.get(pk=wf.pk).steps.get(name="apply")
    assert step.attempts == 2 and noop_apply_calls == [1]
    assert set(_effects(wf).values()) == {1}
    assert step.output == {"already_applied": True}


def test_the_reconciler_leaves_healthy_workflows_alone(operator, approver):
    wf = approve(request_noop(operator), approver)  # just approved, its task is queued
    assert engine.reconcile() == []
    Workflow.objects.filter(pk=wf.pk).update(approved_at=timezone.now() - dt.timedelta(hours=1))
    assert engine.reconcile() == [wf.pk]  # its message was lost (Redis restarted)
