"""Every Spark run and its outcome land in the audit log, in the transaction of the change."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.utils import timezone

from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent
from audit.trail import audit_scope, verify_chain
from spark_tasks.audit import SparkAuditAction
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.tasks import enqueue_run, execute_run, reap_stale_runs, schedule_job


def _events(run: SparkJobRun) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(target_type="spark_run", target_id=str(run.pk)).order_by("seq")
    )


def test_a_dry_run_queued_from_the_page_names_the_operator(operator):
    with audit_scope(AuditContext.WEB, actor=operator), mock.patch.object(execute_run, "delay"):
        run = enqueue_run(SparkJob.RETENTION, {}, cluster="prod", requested_by=operator)
    (event,) = _events(run)
    assert (event.action, event.actor_name, event.context) == (
        SparkAuditAction.QUEUED,
        operator.username,
        AuditContext.WEB,
    )
    assert event.after["job"] == "retention" and event.after["dry_run"] is True


def test_scheduled_runs_are_queued_by_beat(db):
    with mock.patch.object(execute_run, "delay"):
        (run_id,) = schedule_job(SparkJob.STORAGE_REPORT, cluster="prod")
    (event,) = _events(SparkJobRun.objects.get(pk=run_id))
    assert event.context == AuditContext.BEAT and event.actor_id is None


def test_started_and_failed_are_recorded_with_the_error(db, settings, tmp_path):
    settings.SPARK_WORK_DIR = tmp_path
    settings.SPARK_REMOTE_METADATA = ""
    with mock.patch.object(execute_run, "delay"):
        run = enqueue_run(SparkJob.PURGE, {}, dry_run=False, cluster="prod")
    assert execute_run.apply(args=[run.pk]).get() == SparkRunState.FAILED
    queued, started, failed = _events(run)
    assert queued.action == SparkAuditAction.QUEUED
    assert started.action == SparkAuditAction.STARTED and started.context == AuditContext.WORKER
    assert failed.action == SparkAuditAction.FAILED
    assert failed.outcome == AuditOutcome.FAILURE
    assert "SPARK_REMOTE_METADATA" in failed.after["error"]
    assert verify_chain().ok


def test_a_reaped_run_is_recorded_as_failed(db):
    run = SparkJobRun.objects.create(
        job=SparkJob.RETENTION,
        state=SparkRunState.RUNNING,
        heartbeat_at=timezone.now() - dt.timedelta(days=1),
    )
    assert reap_stale_runs() == 1
    (event,) = _events(run)
    assert event.action == SparkAuditAction.FAILED and event.after["reaped"] is True


def test_a_deleting_run_is_recorded_and_audited_as_deleting(db):
    """delete_objects carries out a reviewed plan: never a dry run on its row or in the log."""
    with mock.patch.object(execute_run, "delay"):
        run = enqueue_run(SparkJob.DELETE_OBJECTS, {"plan": "/runs/7/out/plan"}, dry_run=False)
    run.refresh_from_db()
    assert run.dry_run is False
    (queued,) = _events(run)
    assert queued.action == SparkAuditAction.QUEUED and queued.after["dry_run"] is False
    with pytest.raises(ValueError, match="always deletes"):
        enqueue_run(SparkJob.DELETE_OBJECTS, {"plan": "/runs/7/out/plan"}, dry_run=True)
    # a job that only reads is a dry run whatever was asked
    with mock.patch.object(execute_run, "delay"):
        stats = enqueue_run(SparkJob.INVENTORY_STATS, {}, dry_run=False)
    assert stats.dry_run is True
