"""End to end through a real Celery worker process, PostgreSQL and Redis: request → the worker
plans it → approval by another user → the worker runs it to success; a human gate waits for the
confirm button."""

from __future__ import annotations

import pytest

from audit.trail import verify_chain
from workflows.choices import StepState, WorkflowState
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import request_planned

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _state(pk: int) -> str:
    return Workflow.objects.values_list("state", flat=True).get(pk=pk)


def test_request_approve_and_a_real_worker_runs_it_to_success(
    workflow_worker, api, operator, approver
):
    workflow_worker()
    created = request_planned(
        api,
        operator,
        {"kind": "noop_check", "cluster": "lab", "params": {"label": "e2e", "brokers": 3}},
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL
    assert len(created["plan_hash"]) == 64 and created["plan"]["brokers"] == [0, 1, 2]
    approved = api(approver).post(
        f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
    )
    assert approved.json()["state"] == WorkflowState.APPROVED
    wait_for(lambda: _state(created["id"]) in WorkflowState.TERMINAL, 60, "the workflow to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    assert [s["state"] for s in body["steps"]] == [StepState.SUCCEEDED] * 5
    assert [s["broker"] for s in body["steps"] if s["name"] == "apply"] == [0, 1, 2]
    assert verify_chain().ok


def test_a_gate_waits_for_confirmation_then_the_worker_finishes(
    workflow_worker, api, operator, approver
):
    workflow_worker()
    created = request_planned(
        api,
        operator,
        {"kind": "noop_check", "cluster": "lab", "mode": "gate", "params": {"label": "gate"}},
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: _state(created["id"]) == WorkflowState.WAITING, 60, "the gate")
    assert api(operator).post(f"/workflows/{created['id']}/confirm").status_code == 200
    wait_for(lambda: _state(created["id"]) == WorkflowState.SUCCEEDED, 60, "success")
