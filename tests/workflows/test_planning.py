"""Planning in the worker, actions vs information, and "unavailable is a wait, not a failure"
(issue 11). In-process with the self-test kind; the cluster-facing tests are in
test_write_path_under_load.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from console.models import Cluster, Partition, Topic
from tests.testapp import noop
from workflows import engine, planning
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds import Plan, PlanUnavailable, Refusal
from workflows.models import Workflow

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def _due(wf: Workflow) -> None:
    """Skip the backoff wait (no sleeping in tests)."""
    Workflow.objects.filter(pk=wf.pk).update(resume_at=None)


def _with_information(value):
    original = noop.NoopCheck.plan

    def plan(self, params):
        p = original(self, params)
        return Plan(p.actions, {**p.information, "bytes": value()})

    return plan


def test_a_request_is_planned_by_the_worker_not_by_the_request(operator, monkeypatch):
    calls = []
    original = noop.NoopCheck.plan
    monkeypatch.setattr(
        noop.NoopCheck, "plan", lambda self, p: calls.append(p) or original(self, p)
    )
    wf = request_noop(operator, plan=False)
    assert wf.state == WorkflowState.PLANNING and calls == [] and wf.plan_hash == ""
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL and len(calls) == 1


def test_an_unreachable_cluster_keeps_planning_waiting_then_it_plans(operator, monkeypatch):
    original = noop.NoopCheck.plan

    def down(self, params):
        raise PlanUnavailable("controller 127.0.0.1:1 refused the connection")

    monkeypatch.setattr(noop.NoopCheck, "plan", down)
    wf = request_noop(operator, plan=False)
    for _ in range(3):
        _due(wf)
        assert engine.run(wf.pk) == WorkflowState.PLANNING
    wf.refresh_from_db()
    assert "refused the connection" in wf.waiting_reason and wf.resume_at is not None
    assert wf.plan_attempts == 3
    # one audit event for the wait, not one per attempt
    assert AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_WAITING).count() == 1
    monkeypatch.setattr(noop.NoopCheck, "plan", original)
    _due(wf)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    wf.refresh_from_db()
    assert wf.waiting_reason == "" and wf.plan_attempts == 0 and len(wf.plan_hash) == 64


def test_planning_waits_while_the_clusters_inventory_is_rebuilt(operator):
    """Partitions and replicas are UNLOGGED: after a PostgreSQL crash the cluster's topics say
    they hold partitions and no partition row is there. A plan made then would see nothing to
    move or grow; planning waits for the sync that rebuilds them."""
    lab = Cluster.objects.create(name="lab", controller_url="http://127.0.0.1:1", secret_ref="x")
    topic = Topic.objects.create(
        cluster=lab,
        name="orders",
        initial_partition_count=2,
        undeleted_partition_count=2,
        partition_count=2,
    )
    wf = request_noop(operator, plan=False, cluster="lab")
    assert engine.run(wf.pk) == WorkflowState.PLANNING
    wf.refresh_from_db()
    assert "inventory of cluster lab is being rebuilt" in wf.waiting_reason
    for n in range(2):  # the next sync
        Partition.objects.create(cluster=lab, topic=topic, topic_name="orders", partition=n)
    _due(wf)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL


def test_planning_gives_up_after_the_approval_ttl(operator, monkeypatch):
    monkeypatch.setattr(
        noop.NoopCheck, "plan", lambda self, p: (_ for _ in ()).throw(PlanUnavailable("down"))
    )
    wf = request_noop(operator, plan=False)
    Workflow.objects.filter(pk=wf.pk).update(created_at=timezone.now() - dt.timedelta(hours=25))
    assert engine.run(wf.pk) == WorkflowState.REFUSED
    assert Workflow.objects.get(pk=wf.pk).error_code == "BROKER_NOT_AVAILABLE"


def test_a_refusal_while_planning_ends_the_workflow_refused(operator, monkeypatch):
    def refuse(self, params):
        raise Refusal("TIERED_STORAGE_DISABLEMENT_IN_PROGRESS", "topic is DISABLING", 409)

    monkeypatch.setattr(noop.NoopCheck, "plan", refuse)
    wf = request_noop(operator)
    assert wf.state == WorkflowState.REFUSED and wf.is_terminal
    assert wf.error_code == "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS"
    # a refused workflow frees its target
    monkeypatch.undo()
    assert request_noop(operator).state == WorkflowState.PENDING_APPROVAL


def test_drifting_information_never_voids_an_approval(operator, approver, monkeypatch):
    counter = iter(range(10**6, 10**7, 4096))
    monkeypatch.setattr(noop.NoopCheck, "plan", _with_information(lambda: next(counter)))
    wf = request_noop(operator)
    first_bytes, first_hash = wf.plan_information["bytes"], wf.plan_hash
    wf = approve(wf, approver)
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED
    wf.refresh_from_db()
    assert wf.plan_hash == first_hash and wf.plan_information["bytes"] > first_bytes
    assert not wf.approvals.filter(voided_at__isnull=False).exists()
    assert not AuditEvent.objects.filter(action=AuditAction.WORKFLOW_PLAN_CHANGED).exists()


def test_an_approved_workflow_waits_for_an_unreachable_cluster_then_runs(
    operator, approver, monkeypatch
):
    wf = approve(request_noop(operator), approver)
    original = noop.NoopCheck.plan
    monkeypatch.setattr(
        noop.NoopCheck, "plan", lambda self, p: (_ for _ in ()).throw(PlanUnavailable("down"))
    )
    for _ in range(2):
        _due(wf)
        assert engine.run(wf.pk) == WorkflowState.APPROVED
    wf.refresh_from_db()
    assert "before it starts" in wf.waiting_reason and not wf.steps.exists()
    assert wf.approvals.get().voided_at is None
    monkeypatch.setattr(noop.NoopCheck, "plan", original)
    _due(wf)
    assert engine.run(wf.pk) == WorkflowState.SUCCEEDED
    wf.refresh_from_db()
    assert wf.waiting_reason == "" and wf.error_code == ""


def test_waiting_at_start_is_bounded_by_the_approvals_expiry(operator, approver, monkeypatch):
    wf = approve(request_noop(operator), approver)
    monkeypatch.setattr(
        noop.NoopCheck, "plan", lambda self, p: (_ for _ in ()).throw(PlanUnavailable("down"))
    )
    assert engine.run(wf.pk) == WorkflowState.APPROVED
    wf.approvals.update(created_at=timezone.now() - dt.timedelta(hours=25))
    _due(wf)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    assert AuditEvent.objects.filter(action=AuditAction.WORKFLOW_APPROVALS_EXPIRED).exists()


def test_changed_actions_at_start_void_approvals_and_keep_the_diff(operator, approver, monkeypatch):
    wf = approve(request_noop(operator, brokers=2), approver)
    original = noop.NoopCheck.plan

    def broker_joined(self, params):
        p = original(self, params)
        return Plan(p.actions.model_copy(update={"brokers": [0, 1, 2]}), p.information)

    monkeypatch.setattr(noop.NoopCheck, "plan", broker_joined)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    wf.refresh_from_db()
    assert [(c["path"], c["before"], c["after"]) for c in wf.plan_diff] == [
        ("brokers", [0, 1], [0, 1, 2])
    ]
    assert wf.approvals.get().void_reason == "plan changed"


def test_refreshing_a_pending_plan_updates_information_and_keeps_approvals(
    operator, approver, second_approver, settings, monkeypatch
):
    settings.STRATA_PLAN_REFRESH_SECONDS = 0
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    counter = iter(range(1, 10**6))
    monkeypatch.setattr(noop.NoopCheck, "plan", _with_information(lambda: next(counter)))
    wf = approve(request_noop(operator), approver)
    before_at, before_bytes = wf.plan_information_at, wf.plan_information["bytes"]
    assert planning.refresh_pending_plans(now=timezone.now() + dt.timedelta(seconds=1)) == []
    wf.refresh_from_db()
    assert wf.plan_information["bytes"] > before_bytes and wf.plan_information_at > before_at
    assert wf.approvals.get().voided_at is None
    assert approve(wf, second_approver).state == WorkflowState.APPROVED


def test_refreshing_a_pending_plan_whose_actions_changed_voids_approvals(
    operator, approver, settings, monkeypatch
):
    settings.STRATA_PLAN_REFRESH_SECONDS = 0
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = approve(request_noop(operator), approver)
    original = noop.NoopCheck.plan
    monkeypatch.setattr(
        noop.NoopCheck,
        "plan",
        lambda self, p: Plan(original(self, p).actions.model_copy(update={"mode": "gate"}), {}),
    )
    assert planning.refresh_pending_plans(now=timezone.now() + dt.timedelta(seconds=1)) == [wf.pk]
    wf.refresh_from_db()
    assert wf.state == WorkflowState.PENDING_APPROVAL and wf.plan_diff[0]["path"] == "mode"
    assert wf.approvals.get().void_reason == "plan changed"
    event = AuditEvent.objects.get(action=AuditAction.WORKFLOW_PLAN_CHANGED, workflow=wf)
    assert event.extra["changes"][0]["after"] == "gate"


def test_the_reconciler_picks_up_a_planning_workflow_whose_message_was_lost(operator):
    wf = request_noop(operator, plan=False)
    assert engine.reconcile() == []  # its planning task is merely queued
    Workflow.objects.filter(pk=wf.pk).update(created_at=timezone.now() - dt.timedelta(hours=1))
    assert engine.reconcile() == [wf.pk]
    assert not wf.steps.filter(state=StepState.RUNNING).exists()
