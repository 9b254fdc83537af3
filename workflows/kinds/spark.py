"""``remote_purge`` and ``orphan_sweep``: execute a reviewed Spark plan (DESIGN.md "Spark job
contract"; KIP-950 "delete" policy; KIP-405 remote-log metadata).

The request names a successful dry run (``spark_run``); the actions include ``plan_sha256``, its
``plan/`` digest, checked again before the first step and right before anything is deleted
(``PLAN_CHANGED``). Execution deletes exactly the reviewed plan, never a fresh re-plan: what these
jobs plan stays garbage (segments fenced below a delete-policy epoch; orphans older than the
window). ``remote_purge`` needs two approvers like the disablement that fenced them. Steps follow
Kafka's order (publish log start offsets, DELETE_SEGMENT_STARTED, delete, DELETE_SEGMENT_FINISHED)
and are idempotent. :func:`follow_spark_run` is shared with :mod:`workflows.kinds.tiering`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from django.db import transaction
from django.urls import reverse

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from broker_agent.contract.choices import DisablePolicy
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.plan_digest import plan_digest
from spark_tasks.quarantine_report import quarantined_count
from workflows.errors import ErrorCode
from workflows.kinds import (
    Actions,
    AnyContext,
    Params,
    Plan,
    Refusal,
    ReviewRow,
    StepDef,
    StepResult,
    WorkflowKind,
    approvals_required,
    integer,
    register,
    size_text,
)
from workflows.kinds.commands import record_command
from workflows.models import Workflow

if TYPE_CHECKING:
    from spark_tasks.remote import RemoteMetadata
    from workflows.steps import StepContext

__all__ = [
    "OrphanSweep",
    "RemotePurge",
    "SparkStepAction",
    "follow_spark_run",
]

#: How long a step follows a Spark run in one go (progress renews the lease) before it parks the
#: workflow in ``waiting`` and gives its worker slot back (a Spark job needs a slot to run).
FOLLOW_SLICE_SECONDS = 20.0
FOLLOW_POLL_SECONDS = 1.0
#: The kind whose delete-policy approvals a purge of fenced data requires (it imports this
#: module, so it is named, not imported).
DISABLE_TIERING = "disable_tiering"


class SparkStepAction:
    """Audit actions of the Spark-backed steps (dotted names, as the audit log expects)."""

    RUN_QUEUED = "spark.run_queued_by_workflow"
    PUBLISH_LOG_START_OFFSETS = "spark.publish_log_start_offsets"
    MARK_DELETE_STARTED = "spark.mark_delete_segment_started"
    MARK_DELETE_FINISHED = "spark.mark_delete_segment_finished"


# --- shared step helpers ---------------------------------------------------------------------


def _queued_run(ctx: AnyContext, key: str) -> SparkJobRun | None:
    event = (
        AuditEvent.objects.filter(
            workflow_id=ctx.workflow.pk,
            action=SparkStepAction.RUN_QUEUED,
            extra__idempotency_key=key,
        )
        .values("extra")
        .first()
    )
    if event is None:
        return None
    return SparkJobRun.objects.filter(pk=event["extra"]["spark_run"]).first()


#: How many times a step queues its Spark run again after the run was lost with its worker.
LOST_RUN_RESUBMITS = 2


def _attempt_key(key: str, attempt: int) -> str:
    return key if attempt == 0 else f"{key}:resubmit-{attempt}"


def _latest_run(ctx: AnyContext, key: str) -> tuple[int, SparkJobRun | None]:
    """The step's latest queued run and its attempt number (0 = the first), or (0, None)."""
    found: tuple[int, SparkJobRun | None] = (0, None)
    for attempt in range(LOST_RUN_RESUBMITS + 1):
        run = _queued_run(ctx, _attempt_key(key, attempt))
        if run is None:
            break
        found = (attempt, run)
    return found


def _queue_once(
    ctx: AnyContext, key: str, job: str, arguments: dict[str, Any], dry_run: bool
) -> SparkJobRun:
    """Queue the run of ``key`` unless it is queued already (under the workflow's row lock, with
    its ``spark.run_queued_by_workflow`` audit event in the same transaction)."""
    from spark_tasks.tasks import enqueue_run

    with transaction.atomic():
        Workflow.objects.select_for_update().filter(pk=ctx.workflow.pk).first()
        run = _queued_run(ctx, key)
        if run is not None:
            return run
        run = enqueue_run(
            job,
            arguments,
            dry_run=dry_run,
            cluster=ctx.params.cluster,
            requested_by=None,
            audit_context=AuditContext.WORKER,
            workflow_id=ctx.workflow.pk,
        )
        trail.record(
            SparkStepAction.RUN_QUEUED,
            actor=None,
            context=AuditContext.WORKER,
            target_type="spark_run",
            target_id=run.pk,
            workflow=ctx.workflow,
            after={"job": job, "arguments": arguments, "dry_run": dry_run},
            extra={"idempotency_key": key, "spark_run": run.pk, "step": ctx.step.name},
        )
    ctx.log(f"Spark {job} run #{run.pk} queued: {reverse('spark_tasks:run-detail', args=[run.pk])}")
    return run


def follow_spark_run(
    ctx: AnyContext, job: str, arguments: dict[str, Any], *, dry_run: bool
) -> StepResult:
    """Queue ``job`` once for this step, then follow it to the end.

    Queued in one transaction with a ``spark.run_queued_by_workflow`` event naming the step's
    idempotency key, so a step run again after a crash finds its run instead of queueing another.
    The run's Spark tasks are the step's progress; after ``FOLLOW_SLICE_SECONDS`` the workflow waits
    and looks again. A run *lost* with its worker is queued again under the next attempt key, up to
    :data:`LOST_RUN_RESUBMITS` times (every job is idempotent, and a lost run says nothing about the
    job); any other failed or cancelled run fails the step with ``SPARK_RUN_FAILED``. A succeeded run
    that quarantined partitions (#39) completes the step, naming them in its log and output.
    """
    key = f"{ctx.idempotency_key}:spark"
    attempt, run = _latest_run(ctx, key)
    if run is None:
        run = _queue_once(ctx, key, job, arguments, dry_run)
    deadline = time.monotonic() + FOLLOW_SLICE_SECONDS
    while True:
        run.refresh_from_db()
        ctx.progress(run.tasks_done, max(run.tasks_total, run.tasks_done, 1), "tasks")
        if run.state == SparkRunState.SUCCEEDED:
            output = {
                "spark_run": run.pk,
                "spark_run_url": reverse("spark_tasks:run-detail", args=[run.pk]),
                "summary": _small(run.output_summary or {}),
                "output_dir": run.output_dir,
            }
            quarantined = _report_quarantine(ctx, job, run)
            if quarantined:
                output["quarantined_partitions"] = quarantined
            return StepResult.done(output)
        if run.state == SparkRunState.FAILED and run.lost and attempt < LOST_RUN_RESUBMITS:
            attempt += 1
            ctx.log(f"Spark {job} run #{run.pk} was lost with its worker: queued again")
            run = _queue_once(ctx, _attempt_key(key, attempt), job, arguments, dry_run)
            continue
        if run.state in SparkRunState.TERMINAL:
            return StepResult.fail(
                "SPARK_RUN_FAILED", f"Spark {job} run #{run.pk} {run.state}: {run.error[:500]}"
            )
        if time.monotonic() > deadline:
            return StepResult.wait(
                f"Spark {job} run #{run.pk} {run.state}: {run.tasks_done}/{run.tasks_total} "
                f"tasks, stage {run.stages_done}/{run.stages_total}",
                retry_in=FOLLOW_POLL_SECONDS,
            )
        time.sleep(FOLLOW_POLL_SECONDS)


#: Quarantined partitions a step's log and output name (the run's page names up to 100).
QUARANTINE_NAMED_IN_STEP = 20


def _report_quarantine(ctx: AnyContext, job: str, run: SparkJobRun) -> list[str]:
    """The partitions ``run`` quarantined (issue #39: their remote-log metadata names objects
    outside the store, so their cleanup was refused while the rest went on), logged on the step
    and returned as ``topic-partition`` names for its output; [] when there were none."""
    summary = run.output_summary or {}
    count = quarantined_count(summary)
    if not count:
        return []
    names = [
        f"{p.get('topic')}-{p.get('partition')}"
        for p in (summary.get("quarantined_partitions") or [])[:QUARANTINE_NAMED_IN_STEP]
    ]
    more = f" (first {len(names)} named)" if count > len(names) else ""
    ctx.log(
        f"Spark {job} run #{run.pk} quarantined {count} partition{'s' if count != 1 else ''}"
        f"{more}: {', '.join(names)}. Their remote-log metadata names objects outside the "
        "remote store, so their cleanup was refused (nothing of theirs was published, marked "
        "or deleted); every other partition was cleaned. See "
        f"{reverse('spark_tasks:run-detail', args=[run.pk])}"
    )
    return names


def _small(summary: dict[str, Any]) -> dict[str, Any]:
    """The scalar part of a job summary (what a step output and the audit event keep)."""
    return {
        k: v
        for k, v in summary.items()
        if isinstance(v, int | float | str | bool) or (isinstance(v, dict) and len(v) <= 20)
    }


# --- the reviewed plan ---------------------------------------------------------------------


class ReviewedPlanParams(Params):
    spark_run: int = integer(
        "Dry run #",
        ge=1,
        le=2**62,
        help="The succeeded dry run whose plan was reviewed (Spark jobs page).",
    )


class ReviewedPlan(Actions):
    """What a reviewed dry run's execution deletes: fixed by the plan's digest and size."""

    summary: str
    spark_run: int
    job: str
    plan_dir: str
    plan_rows: int
    plan_bytes: int | None
    plan_sha256: str
    by_reason: dict[str, dict[str, int]] | None  # per reason: segments, bytes
    steps: list[str]


if TYPE_CHECKING:
    ReviewedContext = StepContext[ReviewedPlanParams, ReviewedPlan]


class _ReviewedPlanKind(WorkflowKind[ReviewedPlanParams, ReviewedPlan]):
    """A kind that executes the plan of one succeeded dry run of ``job``."""

    job: ClassVar[str]
    #: The steps' names, in order (the plan lists them before the steps exist).
    step_names: ClassVar[tuple[str, ...]]
    params_model, actions_model = ReviewedPlanParams, ReviewedPlan

    def target(self, params: ReviewedPlanParams) -> str:
        # One execution of this job per cluster at a time: two would delete the same objects.
        return f"spark:{self.job}"

    def dry_run(self, params: ReviewedPlanParams) -> SparkJobRun:
        run: SparkJobRun | None = SparkJobRun.objects.filter(pk=params.spark_run).first()
        if run is None:
            raise Refusal(ErrorCode.INVALID_REQUEST, f"No Spark run #{params.spark_run}.")
        if run.job != self.job:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"Spark run #{run.pk} is a {run.job} run; {self.name} executes a {self.job} plan.",
            )
        if not run.dry_run:
            raise Refusal(ErrorCode.INVALID_REQUEST, f"Spark run #{run.pk} is not a dry run.")
        if run.state != SparkRunState.SUCCEEDED:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"Spark run #{run.pk} is {run.state}; only a succeeded dry run has a plan.",
            )
        if (run.cluster or "") != params.cluster:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"Spark run #{run.pk} planned cluster {run.cluster!r}, not {params.cluster!r}.",
            )
        return run

    def plan_dir(self, run: SparkJobRun) -> Path:
        path = Path(run.output_dir or "/nonexistent") / "plan"
        if not path.is_dir():
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"The plan of Spark run #{run.pk} is gone ({path}); start a new dry run.",
            )
        return path

    def plan(self, params: ReviewedPlanParams) -> Plan[ReviewedPlan]:
        run = self.dry_run(params)
        plan_dir = self.plan_dir(run)
        sha, rows = run.plan_digest, run.plan_rows
        if not sha or rows is None:  # a dry run from before digests were stored on the row
            try:
                sha, rows = plan_digest(plan_dir)
            except (OSError, ValueError) as exc:
                raise Refusal(
                    ErrorCode.INVALID_REQUEST,
                    f"The plan of Spark run #{run.pk} is unreadable: {exc}",
                ) from None
        if rows == 0:
            raise Refusal(
                ErrorCode.INVALID_REQUEST, f"Spark run #{run.pk} planned nothing to delete."
            )
        summary = {
            k: v
            for k, v in (run.output_summary or {}).items()
            if k not in ("seconds", "plan_seconds", "delete_seconds")
        }
        # A reviewed dry run's plan does not drift: what it deletes is fixed by its digest, so
        # its size is part of what is approved.
        actions = ReviewedPlan(
            summary=(
                f"Delete the {rows} objects ({summary.get('bytes', '?')} bytes) that {self.job} "
                f"dry run #{run.pk} planned, exactly as reviewed."
            ),
            spark_run=run.pk,
            job=self.job,
            plan_dir=str(plan_dir),
            plan_rows=rows,
            plan_bytes=summary.get("bytes"),
            plan_sha256=sha,
            by_reason=summary.get("by_reason"),
            steps=list(self.step_names),
        )
        information = {
            "dry_run_summary": _small(summary),
            "dry_run_finished_at": run.finished_at.isoformat() if run.finished_at else None,
        }
        return Plan(actions, information)

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        reasons = actions.get("by_reason") or {}
        why = (
            ", ".join(f"{reason}: {n}" for reason, n in sorted(reasons.items()))
            if isinstance(reasons, dict)
            else ""
        )
        rows = []
        if "publish_log_start_offsets" in actions.get("steps", []):
            rows += [
                ReviewRow(
                    "Publish the new log start offsets to the partitions' leaders",
                    f"the partitions in dry run #{actions['spark_run']}",
                ),
                ReviewRow(
                    "Mark the segments DELETE_SEGMENT_STARTED",
                    "remote-log metadata",
                    "COPY_SEGMENT_FINISHED",
                    "DELETE_SEGMENT_STARTED",
                ),
            ]
        rows.append(
            ReviewRow(
                f"Delete the objects {self.job} dry run #{actions['spark_run']} planned (Spark)",
                why or "the reviewed plan",
                "in the remote store",
                "deleted",
                f"{actions['plan_rows']} object{'' if actions['plan_rows'] == 1 else 's'}, "
                f"{size_text(actions.get('plan_bytes'))}; plan "
                f"sha256 {str(actions['plan_sha256'])[:12]}",
                destructive=True,
            )
        )
        if "mark_delete_finished" in actions.get("steps", []):
            rows.append(
                ReviewRow(
                    "Mark the segments DELETE_SEGMENT_FINISHED",
                    "remote-log metadata",
                    "DELETE_SEGMENT_STARTED",
                    "DELETE_SEGMENT_FINISHED",
                )
            )
        return rows


def _check_plan(ctx: ReviewedContext) -> None:
    """Right before the first deletion: the reviewed plan output is still what was approved."""
    sha, _rows = plan_digest(Path(ctx.plan.plan_dir))
    if sha != ctx.plan.plan_sha256:
        raise Refusal(
            ErrorCode.PLAN_CHANGED,
            f"The plan of Spark run #{ctx.plan.spark_run} changed since it was approved "
            f"({ctx.plan.plan_sha256[:12]} → {sha[:12]}).",
            409,
        )


def _backend(ctx: ReviewedContext) -> RemoteMetadata:
    from spark_tasks import remote

    return remote.get_remote_metadata(ctx.params.cluster)


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def publish_log_start_offsets(ctx: ReviewedContext) -> StepResult:
    """Kafka's order, step 1: the new log start offsets go out before any object is deleted."""
    from spark_tasks import remote

    _check_plan(ctx)
    backend = _backend(ctx)
    try:
        published = remote.publish_log_start_offsets(backend, Path(ctx.plan.plan_dir).parent)
    finally:
        _close(backend)
    record_command(
        ctx,
        SparkStepAction.PUBLISH_LOG_START_OFFSETS,
        target_type="spark_run",
        target_id=ctx.plan.spark_run,
        after={"partitions": published},
    )
    return StepResult.done({"partitions": published})


def mark_delete_started(ctx: ReviewedContext) -> StepResult:
    """Every planned segment → DELETE_SEGMENT_STARTED (unreadable at once; KIP-405 states)."""
    from spark_tasks import remote

    backend = _backend(ctx)
    try:
        marked = remote.mark_planned(backend, Path(ctx.plan.plan_dir).parent)
    finally:
        _close(backend)
    record_command(
        ctx,
        SparkStepAction.MARK_DELETE_STARTED,
        target_type="spark_run",
        target_id=ctx.plan.spark_run,
        before={"state": "COPY_SEGMENT_FINISHED"},
        after={"state": "DELETE_SEGMENT_STARTED", "segments": marked},
    )
    ctx.progress(marked, marked, "segments")
    return StepResult.done({"segments": marked})


def delete_objects(ctx: ReviewedContext) -> StepResult:
    """The ``delete_objects`` Spark job over the reviewed ``plan/`` (executors delete)."""
    if ctx.workflow.kind == OrphanSweep.name:
        _check_plan(ctx)
    return follow_spark_run(
        ctx, SparkJob.DELETE_OBJECTS, {"plan": ctx.plan.plan_dir}, dry_run=False
    )


def mark_delete_finished(ctx: ReviewedContext) -> StepResult:
    """Segments whose object is gone → DELETE_SEGMENT_FINISHED."""
    from spark_tasks import remote

    out = ctx.output_of("delete_objects").get("output_dir")
    if not out:
        raise RuntimeError("the delete_objects step left no output directory")
    backend = _backend(ctx)
    try:
        finished = remote.mark_deleted(backend, Path(out))
    finally:
        _close(backend)
    record_command(
        ctx,
        SparkStepAction.MARK_DELETE_FINISHED,
        target_type="spark_run",
        target_id=ctx.plan.spark_run,
        before={"state": "DELETE_SEGMENT_STARTED"},
        after={"state": "DELETE_SEGMENT_FINISHED", "segments": finished},
    )
    return StepResult.done({"segments": finished})


@register
class RemotePurge(_ReviewedPlanKind):
    name = "remote_purge"
    label = "Purge remote segments (reviewed Spark plan)"
    description = (
        "Executes the plan of a reviewed purge dry run: publish log start offsets, mark "
        "DELETE_SEGMENT_STARTED, delete the objects, mark DELETE_SEGMENT_FINISHED (KIP-950 "
        "delete policy). Needs the approvals of a delete-policy disablement (two unless the "
        "site says otherwise): it deletes the remote data such a disablement fenced."
    )
    job = SparkJob.PURGE
    step_names = (
        "publish_log_start_offsets",
        "mark_delete_started",
        "delete_objects",
        "mark_delete_finished",
    )
    approvals = None  # not a count of its own: approvals_for derives it from the disablement

    def approvals_for(self, params: ReviewedPlanParams) -> int:
        """What the delete-policy disablement that fenced the data requires (two approvers,
        unless the site's ``STRATA_APPROVAL_POLICY`` for ``disable_tiering`` says otherwise).

        The purge job plans only segments below a delete-policy disablement's
        ``purge_below_tiered_epoch`` (``spark_tasks.purge``): executing it is the destructive
        half of that disablement, the deletion the second approver signed up for. One approval
        here would let one approver do what the disablement needed two for (issue #39). One
        rule, one function: the count is the disablement's own, site policy included, not a
        copy of its number."""
        return approvals_required(
            DISABLE_TIERING, {"cluster": params.cluster, "policy": DisablePolicy.DELETE}
        )

    def steps(self, params: ReviewedPlanParams, plan: ReviewedPlan) -> list[StepDef]:
        return [
            StepDef(
                "publish_log_start_offsets",
                publish_log_start_offsets,
                label="Publish log start offsets",
            ),
            StepDef(
                "mark_delete_started",
                mark_delete_started,
                label="Mark DELETE_SEGMENT_STARTED",
                unit="segments",
                total=plan.plan_rows,
            ),
            StepDef("delete_objects", delete_objects, label="Delete objects (Spark)", unit="tasks"),
            StepDef(
                "mark_delete_finished",
                mark_delete_finished,
                label="Mark DELETE_SEGMENT_FINISHED",
            ),
        ]


@register
class OrphanSweep(_ReviewedPlanKind):
    name = "orphan_sweep"
    label = "Sweep orphaned remote objects (reviewed Spark plan)"
    description = (
        "Deletes the objects a reviewed orphans dry run found in the remote store without any "
        "metadata record (older than its window)."
    )
    job = SparkJob.ORPHANS
    step_names = ("delete_objects",)
    approvals = None  # the site's STRATA_APPROVALS_DEFAULT (1 unless set)

    def steps(self, params: ReviewedPlanParams, plan: ReviewedPlan) -> list[StepDef]:
        return [
            StepDef("delete_objects", delete_objects, label="Delete objects (Spark)", unit="tasks")
        ]
