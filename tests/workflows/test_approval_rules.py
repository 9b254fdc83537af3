"""Approvals name the plan hash; nobody approves their own request or twice; any rejection
rejects; approvals expire; requester or admin cancels before it runs; once it runs, an admin may
stop it with a reason."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from workflows.choices import AuditAction, WorkflowState
from workflows.models import Approval, Workflow

from .conftest import approve, planned, request_noop

pytestmark = pytest.mark.django_db


def _approve(api, user, wf, **body):
    return api(user).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash, **body})


def test_an_approval_by_another_approver_approves_the_workflow(api, operator, approver):
    wf = request_noop(operator)
    response = _approve(api, approver, wf, comment="looks right")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == WorkflowState.APPROVED
    assert response.json()["approvals"][0]["approver"] == approver.username
    event = AuditEvent.objects.get(action=AuditAction.WORKFLOW_APPROVED)
    assert event.extra["plan_hash"] == wf.plan_hash and event.extra["comment"] == "looks right"
    assert AuditEvent.objects.filter(action=AuditAction.WORKFLOW_READY, workflow=wf).exists()


def test_self_approval_is_forbidden(api, admin):
    """Even an admin (who may request and approve) cannot approve their own request."""
    wf = request_noop(admin)
    response = _approve(api, admin, wf)
    assert response.status_code == 403
    assert response.json()["error"] == "SELF_APPROVAL_FORBIDDEN"
    wf.refresh_from_db()
    assert wf.state == WorkflowState.PENDING_APPROVAL and not wf.approvals.exists()
    denied = AuditEvent.objects.get(action=AuditAction.WORKFLOW_APPROVED)
    assert (
        denied.outcome == AuditOutcome.DENIED and denied.extra["error"] == "SELF_APPROVAL_FORBIDDEN"
    )


def test_approving_twice_is_refused(api, operator, approver, settings):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    assert _approve(api, approver, wf).status_code == 200
    response = _approve(api, approver, wf)
    assert response.status_code == 409 and response.json()["error"] == "ALREADY_DECIDED"
    assert wf.approvals.count() == 1


def test_two_approver_policy_needs_two_different_approvers(
    api, operator, approver, second_approver, settings
):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 1, "when": {"mode=gate": 2}}}
    wf = request_noop(operator, mode="gate")
    assert wf.approvals_required == 2
    assert _approve(api, approver, wf).json()["state"] == WorkflowState.PENDING_APPROVAL
    assert _approve(api, second_approver, wf).json()["state"] == WorkflowState.APPROVED


def test_approving_a_stale_plan_hash_is_409_plan_changed(api, operator, approver):
    wf = request_noop(operator)
    response = api(approver).post(f"/workflows/{wf.pk}/approve", {"plan_hash": "f" * 64})
    assert response.status_code == 409 and response.json()["error"] == "PLAN_CHANGED"
    wf.refresh_from_db()
    assert wf.state == WorkflowState.PENDING_APPROVAL and not wf.approvals.exists()


def test_approving_without_a_plan_hash_is_invalid(api, operator, approver):
    wf = request_noop(operator)
    response = api(approver).post(f"/workflows/{wf.pk}/approve", {})
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"


@pytest.mark.parametrize("persona", ["viewer", "operator"])
def test_approving_needs_the_approver_role(api, request, admin, persona):
    wf = request_noop(admin)
    response = _approve(api, request.getfixturevalue(persona), wf)
    assert response.status_code == 403 and response.json()["error"] == "FORBIDDEN"


def test_any_rejection_rejects(api, operator, approver, second_approver, settings):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    _approve(api, approver, wf)
    response = api(second_approver).post(f"/workflows/{wf.pk}/reject", {"comment": "no"})
    assert response.status_code == 200 and response.json()["state"] == WorkflowState.REJECTED
    # nothing more can be decided
    third = api(approver).post(f"/workflows/{wf.pk}/reject", {})
    assert third.status_code == 409


def test_a_rejection_must_say_why(api, operator, approver):
    wf = request_noop(operator)
    for body in ({}, {"comment": "   "}):
        response = api(approver).post(f"/workflows/{wf.pk}/reject", body)
        assert response.status_code == 400 and "comment is required" in response.json()["message"]
    wf.refresh_from_db()
    assert wf.state == WorkflowState.PENDING_APPROVAL and not wf.approvals.exists()


def test_the_requester_cannot_reject_their_own_request(api, admin):
    wf = request_noop(admin)
    response = api(admin).post(f"/workflows/{wf.pk}/reject", {})
    assert response.json()["error"] == "SELF_APPROVAL_FORBIDDEN"


def test_approvals_expire(api, operator, approver, second_approver, settings):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    approve(wf, approver)
    Approval.objects.filter(workflow=wf).update(
        created_at=timezone.now()
        - dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS, minutes=1)
    )
    # the second approval alone is not enough: the first one aged out
    assert _approve(api, second_approver, wf).json()["state"] == WorkflowState.PENDING_APPROVAL
    body = api(approver).get(f"/workflows/{wf.pk}").json()
    assert [a["voided"] for a in body["approvals"]] == [True, False]
    # the approver whose approval expired may approve again
    assert _approve(api, approver, wf).json()["state"] == WorkflowState.APPROVED


def test_an_approver_whose_approval_expired_may_still_reject(api, operator, approver, settings):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    approve(wf, approver)
    Approval.objects.filter(workflow=wf).update(
        created_at=timezone.now()
        - dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS, minutes=1)
    )
    response = api(approver).post(f"/workflows/{wf.pk}/reject", {"comment": "changed my mind"})
    assert response.status_code == 200, response.content
    assert response.json()["state"] == WorkflowState.REJECTED


def test_the_requester_can_cancel_before_it_runs(api, operator):
    wf = request_noop(operator)
    response = api(operator).post(f"/workflows/{wf.pk}/cancel", {"comment": "wrong topic"})
    assert response.status_code == 200 and response.json()["state"] == WorkflowState.CANCELLED


def test_an_admin_can_cancel_an_approved_workflow(api, operator, approver, admin):
    wf = approve(request_noop(operator), approver)
    assert api(admin).post(f"/workflows/{wf.pk}/cancel").json()["state"] == WorkflowState.CANCELLED


def test_others_cannot_cancel(api, operator, approver):
    wf = request_noop(operator)
    response = api(approver).post(f"/workflows/{wf.pk}/cancel")
    assert response.status_code == 403


def test_a_running_workflow_cannot_be_cancelled(api, operator):
    wf = request_noop(operator)
    Workflow.objects.filter(pk=wf.pk).update(state=WorkflowState.RUNNING)
    response = api(operator).post(f"/workflows/{wf.pk}/cancel")
    assert response.status_code == 409 and response.json()["error"] == "WORKFLOW_NOT_CANCELLABLE"


def test_unknown_workflow_is_404(api, approver):
    response = api(approver).post("/workflows/999999/approve", {"plan_hash": "x"})
    assert response.status_code == 404 and response.json()["error"] == "NOT_FOUND"
    assert api(approver).get("/workflows/999999").status_code == 404


def _running(wf) -> Workflow:
    """As if a worker had started it and holds its lease."""
    Workflow.objects.filter(pk=wf.pk).update(
        state=WorkflowState.RUNNING,
        lease_owner="worker-that-died",
        lease_expires_at=timezone.now() + dt.timedelta(hours=1),
    )
    wf.refresh_from_db()
    return wf


def test_an_admin_stops_a_started_workflow_only_with_a_reason(api, operator, approver, admin):
    """Issue #16: a workflow stuck on a lost worker could be cancelled by nobody."""
    wf = _running(approve(request_noop(operator), approver))
    response = api(admin).post(f"/workflows/{wf.pk}/cancel", {"comment": "   "})
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"
    response = api(admin).post(f"/workflows/{wf.pk}/cancel", {"comment": "worker lost, retry"})
    assert response.status_code == 200, response.content
    wf.refresh_from_db()
    assert wf.state == WorkflowState.CANCELLED and wf.lease_owner == ""
    refused, event = AuditEvent.objects.filter(
        action=AuditAction.WORKFLOW_CANCELLED, workflow=wf
    ).order_by("seq")
    assert refused.outcome != AuditOutcome.SUCCESS and event.outcome == AuditOutcome.SUCCESS
    assert event.extra["stopped_while"] == WorkflowState.RUNNING
    assert event.extra["comment"] == "worker lost, retry" and event.actor_id == admin.pk


def test_a_stopped_workflow_is_never_run_again(api, operator, approver, admin):
    """The run that held the lease is fenced and no worker claims a cancelled workflow."""
    from workflows import engine

    wf = _running(approve(request_noop(operator), approver))
    api(admin).post(f"/workflows/{wf.pk}/cancel", {"comment": "stop"})
    events = AuditEvent.objects.count()
    engine.run(wf.pk)  # what a redelivered task or the reconciler would do
    wf.refresh_from_db()
    assert wf.state == WorkflowState.CANCELLED and not wf.steps.exists()
    assert AuditEvent.objects.count() == events
    assert not Workflow.objects.filter(pk=wf.pk, lease_owner="worker-that-died").exists()


def test_only_an_admin_stops_a_started_workflow(api, operator, approver):
    wf = _running(approve(request_noop(operator), approver))
    for user in (operator, approver):
        response = api(user).post(f"/workflows/{wf.pk}/cancel", {"comment": "please"})
        assert response.status_code in (403, 409)
    wf.refresh_from_db()
    assert wf.state == WorkflowState.RUNNING


def test_an_ended_workflow_cannot_be_cancelled(api, operator, admin):
    wf = request_noop(operator)
    api(operator).post(f"/workflows/{wf.pk}/cancel")
    response = api(admin).post(f"/workflows/{wf.pk}/cancel", {"comment": "again"})
    assert response.status_code == 409 and "ended" in response.json()["message"]


def test_a_purge_of_fenced_data_is_approved_only_by_two_approvers(
    api, operator, approver, second_approver, tmp_path
):
    """The delete policy that fenced the data needed two approvers; executing its purge (the
    deletion itself) needs two as well: one approval leaves it pending (issue #39)."""
    from console.models import Cluster
    from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState

    Cluster.objects.create(
        name="lab", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    (tmp_path / "plan").mkdir()
    run = SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        state=SparkRunState.SUCCEEDED,
        cluster="lab",
        dry_run=True,
        output_dir=str(tmp_path),
        plan_digest="a" * 64,
        plan_rows=3,
        output_summary={"bytes": 3000, "by_reason": {"purge_disabled": {"segments": 3}}},
    )
    created = api(operator).post(
        "/workflows",
        {"kind": "remote_purge", "cluster": "lab", "params": {"spark_run": run.pk}, "reason": "x"},
    )
    assert created.status_code == 201, created.content
    assert created.json()["approvals_required"] == 2
    wf = planned(Workflow.objects.get(pk=created.json()["id"]))
    assert wf.state == WorkflowState.PENDING_APPROVAL, wf.error
    assert _approve(api, approver, wf).json()["state"] == WorkflowState.PENDING_APPROVAL
    assert _approve(api, second_approver, wf).json()["state"] == WorkflowState.APPROVED
