"""Choices of the write side, as classes of constants with their groupings (NetBox style).

Never spell these values as bare strings elsewhere: import the class and use its attribute.
"""

from __future__ import annotations

__all__ = [
    "ApprovalDecision",
    "AuditAction",
    "StepState",
    "WorkflowState",
]


class AuditAction:
    """The audit actions of workflows. The workflow kinds add their own dotted names
    (``tiering.disable_remote_topic``); the log (the ``audit`` app) accepts any."""

    WORKFLOW_REQUESTED = "workflow.requested"
    WORKFLOW_PLANNED = "workflow.planned"  # a worker computed the plan: pending approval
    WORKFLOW_REFUSED = "workflow.refused"  # planning refused it (a KIP error or a rule)
    WORKFLOW_PLAN_REFRESHED = "workflow.plan_refreshed"  # information re-read, actions unchanged
    WORKFLOW_APPROVED = "workflow.approved"  # one approver's approval
    WORKFLOW_REJECTED = "workflow.rejected"
    WORKFLOW_READY = "workflow.ready"  # enough valid approvals (or break-glass): approved
    WORKFLOW_CANCELLED = "workflow.cancelled"
    WORKFLOW_PLAN_CHANGED = "workflow.plan_changed"
    WORKFLOW_APPROVALS_EXPIRED = "workflow.approvals_expired"
    WORKFLOW_STARTED = "workflow.started"
    WORKFLOW_RESUMED = "workflow.resumed"
    WORKFLOW_WAITING = "workflow.waiting"
    WORKFLOW_CONFIRMED = "workflow.confirmed"
    WORKFLOW_SUCCEEDED = "workflow.succeeded"
    WORKFLOW_FAILED = "workflow.failed"
    STEP_SUCCEEDED = "workflow.step_succeeded"
    STEP_RETRY = "workflow.step_retry"
    STEP_FAILED = "workflow.step_failed"


class WorkflowState:
    """``planning``: requested, a worker computes the plan (no web request ever does);
    ``refused``: planning found a real refusal (a KIP error, a rule) — nothing was changed."""

    PLANNING = "planning"
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    REFUSED = "refused"

    ALL = (
        PLANNING,
        PENDING_APPROVAL,
        APPROVED,
        RUNNING,
        WAITING,
        SUCCEEDED,
        FAILED,
        REJECTED,
        CANCELLED,
        REFUSED,
    )
    #: Open workflows hold their target: at most one open workflow per (cluster, target).
    OPEN = (PLANNING, PENDING_APPROVAL, APPROVED, RUNNING, WAITING)
    TERMINAL = (SUCCEEDED, FAILED, REJECTED, CANCELLED, REFUSED)
    #: Before execution started: the requester or an admin may still cancel.
    CANCELLABLE = (PLANNING, PENDING_APPROVAL, APPROVED)
    #: The engine owns these: a page polls while a workflow is in one of them.
    ACTIVE = (PLANNING, APPROVED, RUNNING, WAITING)
    CHOICES = [(s, s.replace("_", " ").capitalize()) for s in ALL]


class StepState:
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    ALL = (PENDING, RUNNING, WAITING, SUCCEEDED, FAILED, CANCELLED)
    DONE = (SUCCEEDED,)
    TERMINAL = (SUCCEEDED, FAILED, CANCELLED)
    #: A step in one of these may be claimed by the run holding the workflow's lease
    #: (RUNNING: the run that claimed it died before finishing it).
    CLAIMABLE = (PENDING, RUNNING, WAITING)
    CHOICES = [(s, s.capitalize()) for s in ALL]


class ApprovalDecision:
    APPROVE = "approve"
    REJECT = "reject"

    ALL = (APPROVE, REJECT)
    CHOICES = [(APPROVE, "Approve"), (REJECT, "Reject")]
