"""Enqueueing workflow runs, by task name, and when to try again.

The engine and the actions schedule runs; :mod:`workflows.tasks` runs them and imports the
engine. Sending by name keeps that one-way (tasks → engine → queue), with no import cycle.
A run is sent only once the current transaction commits, with the primary key only.
"""

from __future__ import annotations

from celery import current_app
from django.conf import settings
from django.db import transaction

__all__ = ["RUN_WORKFLOW", "backoff_seconds", "enqueue_run"]

#: ``workflows.tasks.run_workflow``'s registered name (a stable name: queued messages carry it).
RUN_WORKFLOW = "workflows.tasks.run_workflow"


def enqueue_run(workflow_id: int, *, countdown: float = 0.0) -> None:
    """Run workflow ``workflow_id`` once the current transaction commits, after ``countdown``
    seconds."""

    def send() -> None:
        current_app.send_task(RUN_WORKFLOW, args=(workflow_id,), countdown=max(0.0, countdown))

    transaction.on_commit(send)


def backoff_seconds(attempt: int) -> float:
    """Exponential backoff: base * 2^(attempt-1), capped (``STRATA_STEP_RETRY_*_SECONDS``)."""
    base: float = settings.STRATA_STEP_RETRY_BASE_SECONDS
    cap: float = settings.STRATA_STEP_RETRY_MAX_SECONDS
    factor: int = 2 ** max(0, attempt - 1)
    return min(cap, base * factor)
