"""Audit events of Spark runs, written through ``audit.trail.record`` in the transaction of
the run's state change (fail closed: when the event cannot be written, the change rolls back).

One event per transition (queued, by whom; started or taken over; finished with its outcome);
progress is not audited. Target ``spark_run:<id>``; ``after`` holds what a reviewer needs without
opening the run (job, cluster, dry run, then the plan's totals or the error); a quarantining run
gets one more event (``spark_tasks.quarantine_report``). ``record()`` is the last statement of
each transaction, since it takes the audit chain's lock.
"""

from __future__ import annotations

from typing import Any

from audit.choices import AuditContext, AuditOutcome
from audit.trail import current_scope, record
from spark_tasks.models import SparkJobRun, SparkRunState

__all__ = ["SparkAuditAction", "record_run_event"]


class SparkAuditAction:
    """Dotted audit action names of Spark runs."""

    QUEUED = "spark.run_queued"
    STARTED = "spark.run_started"
    SUCCEEDED = "spark.run_succeeded"
    FAILED = "spark.run_failed"
    CANCELLED = "spark.run_cancelled"

    BY_FINAL_STATE = {
        SparkRunState.SUCCEEDED: SUCCEEDED,
        SparkRunState.FAILED: FAILED,
        SparkRunState.CANCELLED: CANCELLED,
    }


#: Summary keys copied into a finished run's event (the rest stays on the run row).
SUMMARY_KEYS = (
    "segments",
    "bytes",
    "by_reason",
    "partitions",
    "quarantined",
    "execution",
    "deleted",
    "dry_run",
)


def _describe(run: SparkJobRun) -> dict[str, Any]:
    return {
        "job": run.job,
        "cluster": run.cluster,
        "dry_run": run.dry_run,
        "arguments": run.arguments,
    }


def record_run_event(
    run: SparkJobRun,
    action: str,
    *,
    actor: Any = None,
    default_context: str = AuditContext.WORKER,
    outcome: str = AuditOutcome.SUCCESS,
    extra: dict[str, Any] | None = None,
) -> None:
    """Append one event for ``run``; call inside ``transaction.atomic()`` after the change.

    ``actor`` is the user who asked (queued from the page) or None for workers and beat; the
    context is the current audit scope's (web, api) or ``default_context``.
    """
    scope = current_scope()
    after = _describe(run)
    after.update(extra or {})
    record(
        action,
        actor=actor if actor is not None else (scope.resolve_actor() if scope else None),
        context=scope.context if scope else default_context,
        target_type="spark_run",
        target_id=run.pk,
        after=after,
        outcome=outcome,
    )


def finished_extra(
    state: str, error: str, summary: dict[str, Any] | None, plan: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``plan``: a succeeded dry run's ``plan_digest`` / ``plan_rows`` (what approvals name)."""
    extra: dict[str, Any] = {"state": state}
    if error:
        extra["error"] = error[:1000]
    if summary:
        extra["summary"] = {k: summary[k] for k in SUMMARY_KEYS if k in summary}
    if plan:
        extra["plan"] = dict(plan)
    return extra
