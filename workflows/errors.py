"""The one error type of workflow actions: a stable code, a message and an HTTP status.

Codes are part of the API (other tools rely on them); KIP codes where Kafka has one."""

from __future__ import annotations

__all__ = ["ErrorCode", "WorkflowError"]


class ErrorCode:
    INVALID_REQUEST = "INVALID_REQUEST"
    UNKNOWN_KIND = "UNKNOWN_KIND"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    WORKFLOW_CONFLICT = "WORKFLOW_CONFLICT"
    SELF_APPROVAL_FORBIDDEN = "SELF_APPROVAL_FORBIDDEN"
    ALREADY_DECIDED = "ALREADY_DECIDED"
    PLAN_CHANGED = "PLAN_CHANGED"
    WORKFLOW_NOT_PENDING = "WORKFLOW_NOT_PENDING"
    WORKFLOW_NOT_CANCELLABLE = "WORKFLOW_NOT_CANCELLABLE"
    NOT_WAITING_FOR_CONFIRMATION = "NOT_WAITING_FOR_CONFIRMATION"
    BREAK_GLASS_REASON_REQUIRED = "BREAK_GLASS_REASON_REQUIRED"
    BROKER_NOT_AVAILABLE = "BROKER_NOT_AVAILABLE"  # Kafka's code: nothing answered, try later
    PLANNING_FAILED = "PLANNING_FAILED"


class WorkflowError(Exception):
    """Raised by ``do_*`` actions and kind pre-flights; nothing was changed when it is raised."""

    def __init__(
        self, code: str, message: str, status: int = 400, *, workflow_id: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        #: the workflow the error is about (``WORKFLOW_CONFLICT``: the open one): pages link it
        self.workflow_id = workflow_id

    def as_dict(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}
