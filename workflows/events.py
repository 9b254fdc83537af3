"""The audit events of a workflow's own changes (requested, approved, planned, waiting, ...).

One helper, :func:`record_change`, writes them for the actions (a person's decision) and the
engine (a worker's transition) alike, inside the caller's transaction; :func:`workflow_snapshot`
is the before / after an event shows. It sits below the engine, the planning and the actions,
which all use it, so none of them imports another for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from audit import trail
from audit.choices import AuditContext, AuditOutcome
from workflows.choices import AuditAction, WorkflowState

if TYPE_CHECKING:
    from workflows.models import Workflow

__all__ = ["record_change", "record_ready", "workflow_snapshot"]


def workflow_snapshot(wf: Workflow) -> dict[str, Any]:
    """The fields an audit event's before/after shows for a workflow."""
    return {
        "state": wf.state,
        "plan_hash": wf.plan_hash,
        "current_step": wf.current_step,
        "approvals_required": wf.approvals_required,
        "break_glass": wf.break_glass,
    }


def record_change(
    wf: Workflow,
    action: str,
    before: dict[str, Any] | None,
    *,
    actor: Any = None,
    context: str | None = AuditContext.WORKER,
    outcome: str = AuditOutcome.SUCCESS,
    after: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """The audit event of a change of ``wf`` (in the caller's transaction): by ``actor`` (None:
    a worker or the beat), ``after`` defaulting to the workflow's snapshot now."""
    trail.record(
        action,
        actor=actor,
        context=context,
        target_type="workflow",
        target_id=wf.pk,
        workflow=wf,
        before=before,
        after=workflow_snapshot(wf) if after is None else after,
        outcome=outcome,
        extra=extra or {},
    )


def record_ready(wf: Workflow, *, actor: Any, context: str | None) -> None:
    """Audit: enough valid approvals (or break-glass / no approval needed): ``approved``."""
    record_change(
        wf,
        AuditAction.WORKFLOW_READY,
        {"state": WorkflowState.PENDING_APPROVAL},
        actor=actor,
        context=context,
        extra={
            "break_glass": wf.break_glass,
            "break_glass_reason": wf.break_glass_reason,
            "approvers": list(wf.valid_approvals().values_list("approver__username", flat=True)),
        },
    )
