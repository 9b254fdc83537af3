"""State changes of the write side: every one is a ``do_*`` function with a keyword-only
``actor``, run in one transaction together with its audit event (Zulip's actions)."""

from workflows.actions.workflows import (
    do_approve_workflow,
    do_cancel_workflow,
    do_confirm_step,
    do_reject_workflow,
    do_request_workflow,
    preview_plan,
)

__all__ = [
    "do_approve_workflow",
    "do_cancel_workflow",
    "do_confirm_step",
    "do_reject_workflow",
    "do_request_workflow",
    "preview_plan",
]
