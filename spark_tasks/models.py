"""Records of Spark job runs, and the daily storage snapshots the storage report loads."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = ["SparkJob", "SparkJobRun", "SparkRunState", "StorageSnapshot", "StorageTier"]


class SparkRunState:
    """The life of a run. Only ``execute_run`` moves a run out of QUEUED (by a conditional update)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    CHOICES = [
        (QUEUED, "Queued"),
        (RUNNING, "Running"),
        (SUCCEEDED, "Succeeded"),
        (FAILED, "Failed"),
        (CANCELLED, "Cancelled"),
    ]
    ACTIVE = (QUEUED, RUNNING)
    TERMINAL = (SUCCEEDED, FAILED, CANCELLED)


class SparkJob:
    """The job modules (``spark_tasks/<name>.py``) a run may name."""

    INVENTORY_STATS = "inventory_stats"
    RETENTION = "retention"
    PURGE = "purge"
    ORPHANS = "orphans"
    STORAGE_REPORT = "storage_report"
    DELETE_OBJECTS = "delete_objects"

    CHOICES = [
        (INVENTORY_STATS, "Inventory statistics"),
        (RETENTION, "Remote retention"),
        (PURGE, "Purge after delete-policy disablement"),
        (ORPHANS, "Orphaned objects"),
        (STORAGE_REPORT, "Storage report"),
        (DELETE_OBJECTS, "Delete planned objects"),
    ]
    ALL = tuple(name for name, _ in CHOICES)
    #: Jobs that write a plan (``plan/``, ``partitions/``) an operator reviews.
    PLANNING = (RETENTION, PURGE, ORPHANS)
    #: Jobs that always delete (they carry out a reviewed plan): never recorded as a dry run.
    ALWAYS_DELETES = (DELETE_OBJECTS,)
    #: Jobs that only read: every run of them is a dry run.
    READ_ONLY = (INVENTORY_STATS, STORAGE_REPORT)
    #: Jobs an operator may start from the Spark jobs page, always as a dry run.
    OPERATOR_DRY_RUN = (RETENTION, PURGE, ORPHANS, STORAGE_REPORT, INVENTORY_STATS)


class SparkJobRunQuerySet(models.QuerySet):
    def active(self) -> SparkJobRunQuerySet:
        return self.filter(state__in=SparkRunState.ACTIVE)


class SparkJobRun(models.Model):
    """One submission of one job. The row is the source of truth; Celery carries only its pk."""

    job = models.CharField(max_length=40, choices=SparkJob.CHOICES)
    arguments = models.JSONField(default=dict, blank=True, help_text="The job's CLI arguments.")
    state = models.CharField(
        max_length=16, choices=SparkRunState.CHOICES, default=SparkRunState.QUEUED, db_index=True
    )
    # NULL = not tied to one cluster (the brief asks for a nullable name).
    cluster = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    dry_run = models.BooleanField(default=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="spark_runs",
    )
    workflow_id = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="The workflow whose step queued this run (an id, not a foreign key: "
        "spark_tasks sits below workflows and does not import it).",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    lost = models.BooleanField(
        default=False,
        help_text="Failed because no live process worked on it any more (its worker died).",
    )
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    output_dir = models.CharField(max_length=500, blank=True)
    output_summary = models.JSONField(default=dict, blank=True)
    stages_total = models.PositiveIntegerField(default=0)
    stages_done = models.PositiveIntegerField(default=0)
    tasks_total = models.PositiveIntegerField(default=0)
    tasks_done = models.PositiveIntegerField(default=0)
    peak_driver_rss_bytes = models.BigIntegerField(null=True, blank=True)
    celery_task_id = models.CharField(max_length=64, blank=True)
    # Set when a dry run of a planning job succeeds (spark_tasks.plan_digest): what an approval
    # of its plan names; blank / NULL for every other run.
    plan_digest = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the plan/ output (order-independent)."
    )
    plan_rows = models.BigIntegerField(null=True, blank=True, help_text="Rows of plan/.")

    objects = SparkJobRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["job", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.job} #{self.pk} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in SparkRunState.TERMINAL

    @property
    def duration_seconds(self) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at or timezone.now()
        return max(0.0, (end - self.started_at).total_seconds())

    @property
    def task_percent(self) -> int:
        if self.state == SparkRunState.SUCCEEDED:
            return 100
        if not self.tasks_total:
            return 0
        return min(100, int(100 * self.tasks_done / self.tasks_total))

    @property
    def stages_skipped(self) -> int:
        """Of a succeeded run, the stages Spark planned but skipped (their shuffle output was
        reused): why "8/10 stages" is a finished run, not an unfinished one."""
        if self.state != SparkRunState.SUCCEEDED:
            return 0
        return max(0, self.stages_total - self.stages_done)

    @property
    def has_plan(self) -> bool:
        return self.job in SparkJob.PLANNING and bool(self.output_dir)


class StorageTier:
    LOCAL = "local"
    REMOTE = "remote"

    CHOICES = [(LOCAL, "Local"), (REMOTE, "Remote")]
    ALL = (LOCAL, REMOTE)


class StorageSnapshot(models.Model):
    """Bytes, segments, oldest and newest record time per cluster, topic and tier, one per day.

    Loaded from ``storage_report``'s output; a later report of the same day replaces the day's row
    (the latest figure of a day is the day's figure).
    """

    day = models.DateField(db_index=True)
    cluster = models.CharField(max_length=200)
    topic = models.CharField(max_length=249)
    tier = models.CharField(max_length=10, choices=StorageTier.CHOICES)
    bytes = models.BigIntegerField(default=0)
    segments = models.BigIntegerField(null=True, blank=True)
    partitions = models.IntegerField(default=0)
    oldest_timestamp_ms = models.BigIntegerField(null=True, blank=True)
    newest_timestamp_ms = models.BigIntegerField(null=True, blank=True)
    run = models.ForeignKey(SparkJobRun, null=True, blank=True, on_delete=models.SET_NULL)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["cluster", "topic", "tier", "-day"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "cluster", "topic", "tier"], name="spark_storage_snapshot_unique_day"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.topic} {self.tier} {self.day}: {self.bytes} B"
