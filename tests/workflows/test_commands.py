"""``manage.py request_workflow`` and ``approve_workflow``: the same rules as the API, context cli."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from workflows import engine
from workflows.choices import AuditAction, WorkflowState
from workflows.models import Workflow
from workflows.output import workflow_out

pytestmark = pytest.mark.django_db


def _request(*args: str) -> dict:
    """Request, then plan it as a worker would; returns the command's JSON, planned."""
    out = io.StringIO()
    call_command("request_workflow", *args, stdout=out)
    body = json.loads(out.getvalue())
    assert body["state"] == WorkflowState.PLANNING
    engine.run(body["id"])
    return workflow_out(Workflow.objects.get(pk=body["id"]))


def test_request_then_approve_from_the_command_line(operator, approver):
    body = _request(
        "noop_check",
        "--as",
        operator.username,
        "--cluster",
        "lab",
        "--param",
        "label=cli",
        "--param",
        "brokers=2",
        "--reason",
        "from cron",
    )
    assert body["state"] == WorkflowState.PENDING_APPROVAL and body["approvals_required"] == 1
    out = io.StringIO()
    call_command(
        "approve_workflow",
        str(body["id"]),
        "--as",
        approver.username,
        "--plan-hash",
        body["plan_hash"],
        stdout=out,
    )
    assert json.loads(out.getvalue())["state"] == WorkflowState.APPROVED
    events = AuditEvent.objects.filter(workflow_id=body["id"]).exclude(
        action=AuditAction.WORKFLOW_PLANNED  # the worker's
    )
    assert set(events.values_list("context", flat=True)) == {"cli"}
    assert events.filter(action=AuditAction.WORKFLOW_APPROVED, actor=approver).exists()


def test_command_refusals_exit_non_zero_with_the_code(admin, approver):
    with pytest.raises(CommandError, match="INVALID_REQUEST"):
        _request("noop_check", "--as", admin.username, "--cluster", "lab")
    body = _request("noop_check", "--as", admin.username, "--cluster", "lab", "--param", "label=x")
    with pytest.raises(CommandError, match="SELF_APPROVAL_FORBIDDEN"):
        call_command(
            "approve_workflow",
            str(body["id"]),
            "--as",
            admin.username,
            "--plan-hash",
            body["plan_hash"],
        )
    with pytest.raises(CommandError, match="PLAN_CHANGED"):
        call_command(
            "approve_workflow", str(body["id"]), "--as", approver.username, "--plan-hash", "0" * 64
        )
    with pytest.raises(CommandError, match="No active user"):
        call_command("approve_workflow", str(body["id"]), "--as", "nobody", "--plan-hash", "x")


def test_reject_from_the_command_line(operator, approver):
    body = _request(
        "noop_check", "--as", operator.username, "--cluster", "lab", "--param", "label=r"
    )
    out = io.StringIO()
    call_command(
        "approve_workflow",
        str(body["id"]),
        "--as",
        approver.username,
        "--reject",
        "--comment",
        "not now",
        stdout=out,
    )
    assert json.loads(out.getvalue())["state"] == WorkflowState.REJECTED


def test_verify_audit_json_output(operator):
    _request("noop_check", "--as", operator.username, "--cluster", "lab", "--param", "label=v")
    out = io.StringIO()
    call_command("verify_audit", "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["ok"] is True and body["first_broken"] is None and body["events"] > 0
