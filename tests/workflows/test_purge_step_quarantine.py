"""Issue #39 in a delete-policy disablement: the purge step follows its Spark purge run; a run
that quarantined a partition (its remote-log metadata names an object outside the store) purged
the rest of the cluster, so the step succeeds and names the quarantined partition in its log and
output instead of failing. (The Spark side, with a real store: ``tests/spark_tasks/
test_quarantine.py``.)"""

from __future__ import annotations

import types

import pytest
from django.db import transaction
from django.utils import timezone

from audit import trail
from audit.choices import AuditContext
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from workflows.kinds import StepResult
from workflows.kinds.spark import SparkStepAction
from workflows.kinds.tiering import purge_remote_segments
from workflows.models import Workflow, WorkflowStep

pytestmark = pytest.mark.django_db


def _purge_step(user, run: SparkJobRun):
    """A disablement's purge step whose Spark purge run was queued already (``run``)."""
    wf = Workflow.objects.create(
        kind="disable_tiering",
        cluster="lab",
        target="topic:fenced",
        requester=user,
        parameters={"cluster": "lab", "topic": "fenced", "policy": "delete"},
    )
    step = WorkflowStep.objects.create(
        workflow=wf, position=3, name="purge_remote_segments", attempts=1, idempotency_key="k1"
    )
    with transaction.atomic():
        trail.record(
            SparkStepAction.RUN_QUEUED,
            actor=None,
            context=AuditContext.WORKER,
            target_type="spark_run",
            target_id=run.pk,
            workflow=wf,
            extra={"idempotency_key": "k1:spark", "spark_run": run.pk, "step": step.name},
        )
    logged: list[str] = []
    ctx = types.SimpleNamespace(
        workflow=wf,
        step=step,
        params=types.SimpleNamespace(**wf.parameters),  # the purge step reads only the cluster
        plan=types.SimpleNamespace(),
        idempotency_key=step.idempotency_key,
        log=lambda message, level="info": logged.append(message),
        progress=lambda *a, **k: None,
    )
    return ctx, logged


def _purge_run(summary: dict) -> SparkJobRun:
    return SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        dry_run=False,
        cluster="lab",
        state=SparkRunState.SUCCEEDED,
        finished_at=timezone.now(),
        output_summary=summary,
    )


def test_the_purge_step_succeeds_for_the_rest_and_names_the_quarantined_partition(operator):
    run = _purge_run(
        {
            "segments": 6,
            "bytes": 6006,
            "quarantined": {"partitions": 1, "segments": 5, "bytes": 5010, "outside_objects": 2},
            "quarantined_partitions": [
                {
                    "cluster": "lab",
                    "topic": "fenced",
                    "partition": 0,
                    "outside_objects": 2,
                    "segments": 5,
                    "object_path": "s3://strata-remote/lab-evil/victim.log",
                }
            ],
        }
    )
    ctx, logged = _purge_step(operator, run)

    result = purge_remote_segments(ctx)

    assert result.status == StepResult.DONE
    assert result.output["spark_run"] == run.pk
    assert result.output["quarantined_partitions"] == ["fenced-0"]
    assert result.output["summary"]["quarantined"]["partitions"] == 1
    (line,) = [m for m in logged if "quarantined" in m]
    assert "quarantined 1 partition: fenced-0" in line
    assert "outside the remote store" in line and f"/spark/runs/{run.pk}/" in line


def test_a_purge_that_quarantined_nothing_names_nothing(operator):
    run = _purge_run({"segments": 6, "bytes": 6006, "quarantined": {"partitions": 0}})
    ctx, logged = _purge_step(operator, run)

    result = purge_remote_segments(ctx)

    assert result.status == StepResult.DONE
    assert "quarantined_partitions" not in result.output
    assert not [m for m in logged if "quarantined" in m]
