"""Models of the write side, a package by concern (NetBox ``core/models/``)."""

from workflows.models.workflow import Approval, StepLog, Workflow, WorkflowStep

__all__ = ["Approval", "StepLog", "Workflow", "WorkflowStep"]
