"""``remote_purge`` / ``orphan_sweep``: execute a reviewed Spark plan from a dry run, end to end
through the API with a real worker, real Spark (local[2]) and the simulated cluster. The worker
plans the request; the approval names the plan's hash; the plan's actions are the dry run's
rows, bytes and reasons + the digest of its ``plan/`` output (stored on the dry run)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from audit.trail import verify_chain
from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.models import SparkJob, SparkJobRun
from spark_tasks.plan_digest import plan_digest
from tests import s3util
from workflows.choices import WorkflowState
from workflows.models import Workflow, WorkflowStep

from .conftest import spark_dry_run, wait_for
from .tiering_sim import (
    CLUSTER,
    register,
    request_outcome,
    request_planned,
    sim_cluster,
    state_of,
    tiered_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data", "--expiration", "external") as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def lab(sim, settings, tmp_path):
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    register(sim)
    return sim


def _dry_run(job: str, **arguments):
    return spark_dry_run(job, CLUSTER, **arguments)


def _exists(object_path: str) -> bool:
    return s3util.exists(object_path)


def _execute(api, operator, approvers, kind: str, run_id: int) -> dict:
    body = request_planned(api, operator, {"kind": kind, "cluster": CLUSTER, "spark_run": run_id})
    assert body["state"] == WorkflowState.PENDING_APPROVAL, body
    assert body["approvals_required"] == len(approvers), body
    for approver in approvers:
        api(approver).post(f"/workflows/{body['id']}/approve", {"plan_hash": body["plan_hash"]})
    wait_for(lambda: state_of(body["id"]) in WorkflowState.TERMINAL, 180, f"{kind} to end")
    done = api(operator).get(f"/workflows/{body['id']}").json()
    assert done["state"] == WorkflowState.SUCCEEDED, done
    return {**body, "steps": done["steps"]}


def test_remote_purge_deletes_exactly_the_reviewed_plan(
    lab, api, operator, approver, second_approver, worker
):
    sim = lab
    tiered_topic(sim, "fenced", partitions=1, records=200)
    sim.cli("disable-tiering", "fenced", "--policy", "delete")
    leader = sim.partition("fenced", 0).leader
    planned = [s for s in sim.agent(leader).inventory("fenced")]
    assert planned
    run = _dry_run(SparkJob.PURGE)
    # refusals by the worker's planning: no such run, the wrong kind of run
    for kind, run_id in (("remote_purge", 10**9), ("orphan_sweep", run.pk)):
        outcome = request_outcome(
            api, operator, {"kind": kind, "cluster": CLUSTER, "spark_run": run_id}
        )
        assert outcome == ("refused", "INVALID_REQUEST"), (kind, outcome)
    assert not WorkflowStep.objects.exists()
    assert sorted(Workflow.objects.values_list("kind", flat=True)) == [
        "orphan_sweep",
        "remote_purge",
    ]
    sha256, rows = plan_digest(Path(run.output_dir) / "plan")
    assert (run.plan_digest, run.plan_rows) == (sha256, rows)  # stored when the dry run ended
    # two approvers, as the delete policy that fenced these segments
    body = _execute(api, operator, (approver, second_approver), "remote_purge", run.pk)
    plan = body["plan"]
    assert (plan["spark_run"], plan["plan_rows"], plan["plan_sha256"]) == (
        run.pk,
        len(planned),
        sha256,
    )
    assert [s["name"] for s in body["steps"]] == [
        "publish_log_start_offsets",
        "mark_delete_started",
        "delete_objects",
        "mark_delete_finished",
    ]
    after = list(sim.agent(leader).inventory("fenced"))
    assert all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in after)
    assert not any(_exists(s.object_path) for s in after)
    # the run that deleted names the workflow that queued it (its page links to it)
    executed = SparkJobRun.objects.exclude(pk=run.pk).filter(dry_run=False)
    assert list(executed.values_list("workflow_id", flat=True)) == [body["id"]]
    assert verify_chain().ok


def test_orphan_sweep_deletes_the_reviewed_orphans_and_nothing_referenced(
    lab, api, operator, approver, worker
):
    sim = lab
    tiered_topic(sim, "kept", partitions=1, records=100)
    leader = sim.partition("kept", 0).leader
    referenced = list(sim.agent(leader).inventory("kept"))
    orphan = s3util.sibling(referenced[0].object_path, "orphan-0001.log")
    s3util.put(orphan, b"x" * 1000)
    now_ms = int(time.time() * 1000) + 2 * HOUR_MS  # the orphan is "older than 1 h" then
    run = _dry_run(SparkJob.ORPHANS, older_than="1h", now_ms=now_ms)
    body = _execute(api, operator, (approver,), "orphan_sweep", run.pk)
    # the plan also holds garbage earlier tests left (objects of finished deletes)
    assert body["plan"]["plan_rows"] >= 1 and body["plan"]["plan_bytes"] >= 1000
    assert not s3util.exists(orphan)
    assert all(_exists(s.object_path) for s in referenced)
    # the segments' metadata records (beside their objects) are not orphans: still readable
    after = list(sim.agent(leader).inventory("kept"))
    assert [s.segment_id for s in after] == [s.segment_id for s in referenced]
    assert verify_chain().ok
