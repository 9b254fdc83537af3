"""Celery tasks that run Spark jobs. The ``SparkJobRun`` row is the source of truth.

:func:`enqueue_run` creates the row and enqueues ``execute_run`` on commit; ``execute_run`` claims
the run with a conditional update (QUEUED, or RUNNING with a stale heartbeat) and exits if it
lost the race. While a process works on a run a thread renews ``heartbeat_at`` and the job runs
under :mod:`spark_tasks.guard`, so it dies with its worker; the reaper fails a run whose
heartbeat stopped as ``lost`` within minutes, not after Redis' visibility timeout (#16).
Every transition writes an audit event in its transaction. Deletes get ``--store-root`` from
configuration, never from rows (#11); planning quarantines partitions naming objects outside
it (#39). A successful dry run stores its plan's digest. Beat schedule: ``config/settings.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.choices import AuditContext, AuditOutcome
from console.models import Cluster
from spark_tasks import jobkit, remote
from spark_tasks.audit import SparkAuditAction, finished_extra, record_run_event
from spark_tasks.models import (
    SparkJob,
    SparkJobRun,
    SparkRunState,
    StorageSnapshot,
)
from spark_tasks.plan_digest import plan_digest
from spark_tasks.quarantine_report import (
    QUARANTINE_JOBS,
    load_quarantined,
    record_quarantine_event,
)
from spark_tasks.submit import SubmitResult, spark_submit

__all__ = [
    "enqueue_run",
    "execute_run",
    "prune_run_files",
    "reap_stale_runs",
    "registered_clusters",
    "schedule_job",
]

log = logging.getLogger(__name__)

#: Which arguments each job accepts (key -> flag); anything else in ``arguments`` is refused.
JOB_ARGUMENTS: dict[str, tuple[str, ...]] = {
    SparkJob.INVENTORY_STATS: ("inventory",),
    SparkJob.RETENTION: ("inventory", "partitions", "now_ms", "in_flight_ms"),
    SparkJob.PURGE: ("inventory", "partitions"),
    SparkJob.ORPHANS: ("inventory", "remote_root", "older_than", "now_ms"),
    SparkJob.STORAGE_REPORT: ("inventory", "partitions", "now_ms"),
    SparkJob.DELETE_OBJECTS: ("plan",),
}
#: Jobs with a ``--dry-run`` flag.
DRY_RUN_JOBS = (SparkJob.RETENTION, SparkJob.PURGE, SparkJob.ORPHANS)
#: Jobs that take ``--store-root`` (the remote store's root: deletes never leave it).
STORE_ROOT_JOBS = (*DRY_RUN_JOBS, SparkJob.DELETE_OBJECTS)
#: Jobs whose deletions go through the remote-log metadata (Kafka's order, see ``remote``).
METADATA_JOBS = (SparkJob.RETENTION, SparkJob.PURGE)
NEEDS_PARTITIONS = (SparkJob.RETENTION, SparkJob.PURGE, SparkJob.STORAGE_REPORT)

#: The error of a run failed as lost (its row also says ``lost=True``).
LOST_ERROR = (
    "lost: no heartbeat for {seconds} s; the worker running it stopped "
    "(the job's processes stopped with it)"
)
HARD_LIMIT = settings.SPARK_TASK_HARD_TIME_LIMIT
SOFT_LIMIT = HARD_LIMIT - 120


class RunFailed(Exception):
    """A step failed; the run is recorded FAILED with this message."""


def enqueue_run(
    job: str,
    arguments: dict[str, Any] | None = None,
    *,
    dry_run: bool = True,
    cluster: str | None = None,
    requested_by=None,
    audit_context: str = AuditContext.WORKER,
    workflow_id: int | None = None,
) -> SparkJobRun:
    """Create a QUEUED run, audit who queued it, and enqueue ``execute_run`` on commit.

    ``requested_by`` is the user (None for beat and workflow steps), ``workflow_id`` the
    workflow whose step queues it; ``audit_context`` is used when no audit scope (a web or API
    request) is active.
    """
    if job not in SparkJob.ALL:
        raise ValueError(f"unknown Spark job {job!r}")
    arguments = dict(arguments or {})
    unknown = set(arguments) - set(JOB_ARGUMENTS[job])
    if unknown:
        raise ValueError(f"{job} does not take {', '.join(sorted(unknown))}")
    with transaction.atomic():
        run = SparkJobRun.objects.create(
            job=job,
            arguments=arguments,
            dry_run=_recorded_dry_run(job, dry_run),
            cluster=cluster,
            requested_by=requested_by,
            workflow_id=workflow_id,
        )
        record_run_event(
            run, SparkAuditAction.QUEUED, actor=requested_by, default_context=audit_context
        )
        transaction.on_commit(lambda: execute_run.delay(run.pk))
    return run


def _claim(run_id: int, task_id: str | None) -> bool:
    now = timezone.now()
    fields = {
        "state": SparkRunState.RUNNING,
        "started_at": now,
        "heartbeat_at": now,
        "celery_task_id": task_id or "",
    }
    with transaction.atomic():
        claimed = SparkJobRun.objects.filter(pk=run_id, state=SparkRunState.QUEUED).update(**fields)
        took_over = False
        if not claimed:  # a worker died mid-run: its redelivered message takes the run over
            took_over = claimed = SparkJobRun.objects.filter(
                pk=run_id, state=SparkRunState.RUNNING, heartbeat_at__lt=now - _lost_after()
            ).update(**fields)
        if claimed:
            run = SparkJobRun.objects.get(pk=run_id)
            record_run_event(run, SparkAuditAction.STARTED, extra={"took_over": bool(took_over)})
    return bool(claimed)


@shared_task(
    name="spark_tasks.execute_run",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=SOFT_LIMIT,
    time_limit=HARD_LIMIT,
    bind=True,
)
def execute_run(self, run_id: int) -> str:
    """Execute one ``SparkJobRun`` by primary key; returns its final state."""
    if not _claim(run_id, getattr(self.request, "id", None)):
        run = SparkJobRun.objects.filter(pk=run_id).first()
        log.info("spark run %s not claimed (state %s)", run_id, run and run.state)
        return run.state if run else "missing"
    run = SparkJobRun.objects.get(pk=run_id)
    work = run_work_dir(run.pk)
    out = work / "out"
    SparkJobRun.objects.filter(pk=run.pk).update(
        output_dir=str(out), log_path=str(work / "spark.log")
    )
    try:
        with _Heartbeat(run.pk):
            summary = _execute(run, work, out)
            plan = _plan_digest_fields(run, out)
    except Exception as exc:  # recorded on the row; the task itself succeeds
        log.exception("spark run %s failed", run.pk)
        _finish(run.pk, SparkRunState.FAILED, error=str(exc)[:4000])
        return SparkRunState.FAILED
    _finish(run.pk, SparkRunState.SUCCEEDED, summary=summary, plan=plan)
    return SparkRunState.SUCCEEDED


def _lost_after() -> dt.timedelta:
    return dt.timedelta(seconds=settings.SPARK_RUN_LOST_AFTER_SECONDS)


class _Heartbeat:
    """Renews the run's ``heartbeat_at`` from a thread every ``SPARK_HEARTBEAT_SECONDS`` while
    the block runs: the heartbeat says "a live process works on this run", whatever it is doing
    (waiting for the JVM, exporting the inventory, calling agents). A failed renewal is logged and
    tried again at the next beat; the thread closes its own database connection."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"spark-run-{run_id}-heartbeat")

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(settings.SPARK_HEARTBEAT_SECONDS):
                try:
                    SparkJobRun.objects.filter(pk=self.run_id, state=SparkRunState.RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                except DatabaseError:
                    log.warning("spark run %s: heartbeat not recorded", self.run_id, exc_info=True)
        finally:
            connection.close()


def _plan_digest_fields(run: SparkJobRun, out: Path) -> dict[str, Any]:
    """``plan_digest`` / ``plan_rows`` of a dry run of a planning job (its ``plan/``), else {}."""
    if not (run.dry_run and run.job in SparkJob.PLANNING):
        return {}
    try:
        digest, rows = plan_digest(out / "plan")
    except (OSError, ValueError) as exc:
        raise RunFailed(f"the plan of this dry run cannot be read for its digest: {exc}") from exc
    return {"plan_digest": digest, "plan_rows": rows}


def _finish(
    run_id: int,
    state: str,
    *,
    error: str = "",
    summary: dict | None = None,
    plan: dict[str, Any] | None = None,
) -> None:
    fields: dict[str, Any] = {"state": state, "finished_at": timezone.now(), "error": error}
    if summary is not None:
        fields["output_summary"] = summary
    fields.update(plan or {})
    with transaction.atomic():
        done = SparkJobRun.objects.filter(pk=run_id, state=SparkRunState.RUNNING).update(**fields)
        if done:
            run = SparkJobRun.objects.get(pk=run_id)
            record_run_event(
                run,
                SparkAuditAction.BY_FINAL_STATE[state],
                outcome=AuditOutcome.SUCCESS
                if state == SparkRunState.SUCCEEDED
                else AuditOutcome.FAILURE,
                extra=finished_extra(state, error, summary, plan),
            )
            if state == SparkRunState.SUCCEEDED:
                record_quarantine_event(run, summary)


def _progress_recorder(run_id: int):
    def record(progress: dict[str, Any]) -> None:
        SparkJobRun.objects.filter(pk=run_id, state=SparkRunState.RUNNING).update(
            heartbeat_at=timezone.now(),
            stages_total=int(progress.get("stages_total", 0)),
            stages_done=int(progress.get("stages_done", 0)),
            tasks_total=int(progress.get("tasks_total", 0)),
            tasks_done=int(progress.get("tasks_done", 0)),
        )

    return record


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _recorded_dry_run(job: str, dry_run: bool) -> bool:
    """What a run of ``job`` is recorded (and audited) as: a job that always deletes is never a
    dry run (asking for one is an error), a read-only job always is, a planning job is what was
    asked."""
    if job in SparkJob.ALWAYS_DELETES:
        if dry_run:
            raise ValueError(
                f"{job} always deletes (it carries out a reviewed plan): dry_run=False"
            )
        return False
    if job in SparkJob.READ_ONLY:
        return True
    return dry_run


def _deletes(run: SparkJobRun) -> bool:
    return run.job in SparkJob.ALWAYS_DELETES or (run.job in DRY_RUN_JOBS and not run.dry_run)


def _store_root(run: SparkJobRun, backend: remote.RemoteMetadata) -> str:
    """The remote store's root from configuration (``backend.remote_root()``), for the jobs that
    take ``--store-root``. A run that deletes fails without one; a dry run goes on unchecked (it
    deletes nothing; executing its plan needs the root and checks every row again)."""
    if run.job not in STORE_ROOT_JOBS:
        return ""
    try:
        return backend.remote_root()
    except Exception as exc:
        if _deletes(run):
            raise RunFailed(f"refusing to delete: {exc}") from exc
        log.warning("spark run %s: the plan is not checked against the store: %s", run.pk, exc)
        return ""


def _cli_args(
    run: SparkJobRun, out: Path, backend: remote.RemoteMetadata, work: Path, store_root: str
) -> list[str]:
    arguments = dict(run.arguments)
    if "inventory" in JOB_ARGUMENTS[run.job] and not arguments.get("inventory"):
        inventory, partitions = backend.export_inputs(work / "inputs")
        arguments["inventory"] = str(inventory)
        if run.job in NEEDS_PARTITIONS:
            arguments.setdefault("partitions", str(partitions))
    if run.job == SparkJob.ORPHANS and not arguments.get("remote_root"):
        arguments["remote_root"] = store_root or backend.remote_root()
    args: list[str] = []
    for key in JOB_ARGUMENTS[run.job]:
        value = arguments.get(key)
        if value not in (None, ""):
            args += [_flag(key), str(value)]
    if store_root:
        args += ["--store-root", store_root]
    return [*args, "--out", str(out)]


def _refusal(out: Path) -> str:
    """The message of a job that refused (``jobkit.ERROR_FILE`` in its ``--out``), or ""."""
    try:
        return str(json.loads((out / jobkit.ERROR_FILE).read_text()).get("message", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _submit(run: SparkJobRun, job: str, args: list[str], work: Path, out: Path) -> SubmitResult:
    result = spark_submit(
        job,
        args,
        work,
        on_progress=_progress_recorder(run.pk),
        out_dir=out,
    )
    SparkJobRun.objects.filter(pk=run.pk).update(
        exit_code=result.exit_code,
        log_tail=result.log_tail,
        peak_driver_rss_bytes=result.peak_driver_rss_bytes or None,
        stages_total=int(result.progress.get("stages_total", 0)),
        stages_done=int(result.progress.get("stages_done", 0)),
        tasks_total=int(result.progress.get("tasks_total", 0)),
        tasks_done=int(result.progress.get("tasks_done", 0)),
    )
    if not result.ok:
        refusal = "" if result.timed_out else _refusal(out)
        if refusal:
            raise RunFailed(f"{job} refused: {refusal}")
        why = "timed out" if result.timed_out else f"exited with {result.exit_code}"
        raise RunFailed(f"{job} {why}; see the log tail")
    return result


def _execute(run: SparkJobRun, work: Path, out: Path) -> dict[str, Any]:
    backend = remote.get_remote_metadata(run.cluster)
    try:
        return _execute_with(run, work, out, backend)
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def _execute_with(
    run: SparkJobRun, work: Path, out: Path, backend: remote.RemoteMetadata
) -> dict[str, Any]:
    store_root = _store_root(run, backend)
    args = _cli_args(run, out, backend, work, store_root)
    if run.job not in METADATA_JOBS or run.dry_run:
        if run.dry_run and run.job in DRY_RUN_JOBS:
            args.append("--dry-run")
        summary = _submit(run, run.job, args, work, out).summary or {}
        if run.job in QUARANTINE_JOBS and store_root:
            summary["quarantined_partitions"] = load_quarantined(out)
        if run.job == SparkJob.STORAGE_REPORT:
            summary["snapshots_loaded"] = load_storage_snapshots(run, out)
        if run.job in STORE_ROOT_JOBS:
            summary["store_root"] = store_root or None  # None: the plan was not checked
        return summary

    # Kafka's order: plan, publish log start offsets, mark, delete on executors, mark finished.
    # The plan is checked against the store while planning (--store-root is in args): the
    # partitions with a row outside it are quarantined there, out of plan/ and partitions/,
    # before anything is published, marked or deleted; the rest goes on.
    plan = _submit(run, run.job, [*args, "--dry-run"], work, out).summary or {}
    plan["quarantined_partitions"] = load_quarantined(out)
    steps: dict[str, Any] = {}
    steps["log_start_offsets_published"] = remote.publish_log_start_offsets(backend, out)
    steps["marked_delete_started"] = remote.mark_planned(backend, out)
    delete_out = work / "delete"
    deleted = (
        _submit(
            run,
            SparkJob.DELETE_OBJECTS,
            ["--plan", str(out / "plan"), "--store-root", store_root, "--out", str(delete_out)],
            work,
            delete_out,
        ).summary
        or {}
    )
    steps["deleted"] = deleted.get("deleted", {})
    steps["marked_delete_finished"] = remote.mark_deleted(backend, delete_out)
    return {**plan, "dry_run": False, "store_root": store_root, "execution": steps}


def load_storage_snapshots(run: SparkJobRun, out: Path) -> int:
    """Upsert ``storage_report``'s ``report/`` into one ``StorageSnapshot`` per day, cluster,
    topic and tier (the day of the report's clock, UTC)."""
    report = out / "report"
    if not report.exists():
        return 0
    now_ms = (run.output_summary or {}).get("now_ms") or run.arguments.get("now_ms")
    day = (
        dt.datetime.fromtimestamp(int(now_ms) / 1000, tz=dt.UTC).date()
        if now_ms
        else timezone.now().date()
    )
    loaded = 0
    for batch in ds.dataset(str(report), format="parquet").to_batches(batch_size=2000):
        rows = batch.to_pylist()
        objs = [
            StorageSnapshot(
                day=day,
                cluster=r["cluster"],
                topic=r["topic"],
                tier=r["tier"],
                bytes=r["bytes"] or 0,
                segments=r["segments"],
                partitions=r["partitions"] or 0,
                oldest_timestamp_ms=r["oldest_timestamp_ms"],
                newest_timestamp_ms=r["newest_timestamp_ms"],
                run=run,
                recorded_at=timezone.now(),
            )
            for r in rows
        ]
        StorageSnapshot.objects.bulk_create(
            objs,
            update_conflicts=True,
            unique_fields=["day", "cluster", "topic", "tier"],
            update_fields=[
                "bytes",
                "segments",
                "partitions",
                "oldest_timestamp_ms",
                "newest_timestamp_ms",
                "run",
                "recorded_at",
            ],
        )
        loaded += len(objs)
    return loaded


@shared_task(name="spark_tasks.schedule_job", soft_time_limit=60, time_limit=90)
def schedule_job(job: str, cluster: str | None = None, dry_run: bool = False) -> list[int]:
    """Beat's entry point: enqueue ``job`` for ``cluster`` (or every registered cluster), unless
    one is already queued or running for that cluster. Returns the new run ids."""
    clusters = [cluster] if cluster else registered_clusters()
    created: list[int] = []
    for name in clusters:
        with transaction.atomic():
            busy = (
                SparkJobRun.objects.select_for_update()
                .filter(job=job, cluster=name)
                .active()
                .exists()
            )
            if busy:
                continue
            run = enqueue_run(
                job, {}, dry_run=dry_run, cluster=name, audit_context=AuditContext.BEAT
            )
            created.append(run.pk)
    return created


def registered_clusters() -> list[str]:
    """The clusters beat covers: console's registered ``Cluster`` rows, by name."""
    return list(Cluster.objects.order_by("name").values_list("name", flat=True))


@shared_task(name="spark_tasks.reap_stale_runs", soft_time_limit=60, time_limit=90)
def reap_stale_runs(max_age_seconds: float | None = None) -> int:
    """Fail as lost the RUNNING runs whose heartbeat is older than ``max_age_seconds`` (default
    ``SPARK_RUN_LOST_AFTER_SECONDS``): no live process works on them (see the module docstring).
    Each is audited with ``lost: true``. Returns how many."""
    limit = dt.timedelta(seconds=max_age_seconds) if max_age_seconds is not None else _lost_after()
    cutoff = timezone.now() - limit
    reaped = 0
    stale = SparkJobRun.objects.filter(state=SparkRunState.RUNNING, heartbeat_at__lt=cutoff)
    for run_id in stale.values_list("pk", flat=True):
        error = LOST_ERROR.format(seconds=round(limit.total_seconds()))
        with transaction.atomic():
            done = SparkJobRun.objects.filter(
                pk=run_id, state=SparkRunState.RUNNING, heartbeat_at__lt=cutoff
            ).update(state=SparkRunState.FAILED, finished_at=timezone.now(), error=error, lost=True)
            if done:
                record_run_event(
                    SparkJobRun.objects.get(pk=run_id),
                    SparkAuditAction.FAILED,
                    default_context=AuditContext.BEAT,
                    outcome=AuditOutcome.FAILURE,
                    extra={
                        **finished_extra(SparkRunState.FAILED, error, None),
                        "reaped": True,
                        "lost": True,
                    },
                )
                reaped += 1
    return reaped


def run_work_dir(run_pk: int) -> Path:
    """A run's work directory: its inputs, ``out/`` (plan, ``deleted/``, summary), Spark log."""
    return Path(settings.SPARK_WORK_DIR) / f"run-{run_pk}"


def remove_run_files(run: SparkJobRun) -> None:
    """Delete a run's work directory (inputs, plan, ``deleted/``, Spark log)."""
    shutil.rmtree(run_work_dir(run.pk), ignore_errors=True)


@shared_task(name="spark_tasks.prune_run_files", soft_time_limit=600, time_limit=660)
def prune_run_files(days: int | None = None) -> int:
    """Delete the work directories of runs that finished more than ``days`` ago (default
    ``SPARK_RUN_FILES_DAYS``); returns how many. Beat runs it daily.

    An hourly retention run keeps a copy of the cluster's inventory, its plan and ``deleted/``:
    at 10M segments about 0.5 GB a run, so the files must not be kept for ever. The run's row
    stays: its state, summary (counts and bytes by reason), log tail and audit events are in
    PostgreSQL, and the audit log never refers to these files. Only the plan's per-topic page
    is gone, and it says so. Active runs are never touched, whatever their age.
    """
    keep = days if days is not None else settings.SPARK_RUN_FILES_DAYS
    cutoff = timezone.now() - dt.timedelta(days=keep)
    old = SparkJobRun.objects.exclude(state__in=SparkRunState.ACTIVE).filter(finished_at__lt=cutoff)
    removed = 0
    for run in old.only("pk").iterator():
        if run_work_dir(run.pk).exists():
            remove_run_files(run)
            removed += 1
    if removed:
        log.info("removed the files of %d Spark runs older than %d days", removed, keep)
    return removed
