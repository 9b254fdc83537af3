"""Celery tasks of the write side. They take primary keys only; the rows are the truth.

``acks_late`` and ``task_reject_on_worker_lost`` are set project-wide (config/settings.py): a
task whose worker dies is redelivered, which is safe because ``engine.run`` claims the workflow's
lease and each step with conditional updates, and steps are idempotent.
"""

from __future__ import annotations

from celery import shared_task

from audit.choices import AuditContext
from audit.trail import audit_scope
from workflows import engine, planning

__all__ = ["reconcile_workflows", "refresh_plans", "run_workflow"]


@shared_task(
    name="workflows.tasks.run_workflow",
    soft_time_limit=3000,
    time_limit=3300,
    ignore_result=True,
)
def run_workflow(workflow_id: int) -> str:
    """Plan or run workflow ``workflow_id`` as far as it goes now (see ``workflows.engine``)."""
    with audit_scope(AuditContext.WORKER):
        return engine.run(int(workflow_id))


@shared_task(
    name="workflows.tasks.reconcile_workflows",
    soft_time_limit=50,
    time_limit=60,
    ignore_result=True,
)
def reconcile_workflows() -> list[int]:
    """Beat: resume workflows whose lease expired or whose wake-up was lost."""
    with audit_scope(AuditContext.BEAT):
        return engine.reconcile()


@shared_task(
    name="workflows.tasks.refresh_plans",
    soft_time_limit=120,
    time_limit=150,
    ignore_result=True,
)
def refresh_plans() -> list[int]:
    """Beat: refresh the information of plans pending approval (``workflows.planning``)."""
    with audit_scope(AuditContext.BEAT):
        return planning.refresh_pending_plans()
