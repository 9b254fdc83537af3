"""Crash safety with a real worker: SIGKILL at every step boundary (test-only fault injection,
STRATA_FAULT_KILL_AT) and the workflow still completes, each step's effect exactly once."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from tests.testapp import noop
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import request_planned

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_worker_killed_at_every_step_boundary_completes_exactly_once(
    workflow_worker, api, operator, approver
):
    worker = workflow_worker(STRATA_FAULT_KILL_AT="noop_check:*:before,noop_check:*:after")
    created = request_planned(
        api,
        operator,
        {"kind": "noop_check", "cluster": "lab", "params": {"label": "crash", "brokers": 2}},
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wf_id = created["id"]
    wait_for(
        lambda: (
            Workflow.objects.values_list("state", flat=True).get(pk=wf_id) in WorkflowState.TERMINAL
        ),
        240,
        "the workflow to end despite the kills",
    )
    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (
        wf.error_message,
        worker.log_path.read_text()[-3000:],
    )
    steps = list(wf.steps.order_by("position"))
    assert [s.name for s in steps] == ["check", "apply", "apply", "verify"]
    # every boundary was hit: a marker per step and side, written just before the SIGKILL
    markers = sorted(p.name for p in (worker.log_path.parent / "faults").iterdir())
    assert len(markers) == 2 * len(steps), markers
    # killed before each step: claimed twice; killed after: not run again
    assert all(s.state == StepState.SUCCEEDED and s.attempts == 2 for s in steps)
    for step in steps:  # one completion per step, one effect per apply
        assert (
            AuditEvent.objects.filter(
                action=AuditAction.STEP_SUCCEEDED, workflow=wf, extra__position=step.position
            ).count()
            == 1
        )
    for step in steps[1:3]:
        assert (
            AuditEvent.objects.filter(
                action=noop.APPLIED, extra__idempotency_key=step.idempotency_key
            ).count()
            == 1
        )
    assert AuditEvent.objects.filter(action=AuditAction.WORKFLOW_RESUMED, workflow=wf).exists()
    assert (
        AuditEvent.objects.filter(action=AuditAction.WORKFLOW_SUCCEEDED, workflow=wf).count() == 1
    )
    assert verify_chain().ok
