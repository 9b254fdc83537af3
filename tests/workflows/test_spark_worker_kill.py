"""Issue #16's acceptance: a worker SIGKILLed during a Spark purge step. Before, the job's
``spark-submit`` went on unsupervised under init, the run stayed RUNNING with a frozen
heartbeat until Redis' visibility timeout (~2 h), and the workflow and its topic were stuck.

Now, with real workers, real Spark and the simulated cluster: the job's processes are gone soon
after the worker, the run is failed as lost once its heartbeat is ``SPARK_RUN_LOST_AFTER_SECONDS``
old, the step queues it again and the workflow succeeds; nothing active is left behind.

The first worker's Spark master is a port nobody listens on, so its job is certainly still
waiting for executors when the worker is killed (no race with a fast job).
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from audit.trail import verify_chain
from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from tests import s3util
from workflows.choices import WorkflowState
from workflows.models import StepLog, Workflow, WorkflowStep

from .conftest import spark_dry_run, wait_for
from .tiering_sim import CLUSTER, register, request_planned, sim_cluster, state_of, tiered_topic

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SUPERVISION = {
    "SPARK_RUN_LOST_AFTER_SECONDS": "15",
    "SPARK_REAP_INTERVAL_SECONDS": "3",
    "SPARK_HEARTBEAT_SECONDS": "1",
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data", "--expiration", "external") as s:
        yield s


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(run: SparkJobRun) -> list[int]:
    """Pids whose command line names the run's work directory (guard, spark-submit's JVM, the
    Python driver)."""
    mark = f"/run-{run.pk}/".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if mark in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _jvm_started(run: SparkJobRun) -> bool:
    for pid in _processes_of(run):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"org.apache.spark.deploy.SparkSubmit" in fh.read():
                    return True
        except OSError:
            continue
    return False


def _story(pk: int) -> str:
    """What the workflow's steps said, for a failure message."""
    lines = [f"workflow {pk}: {state_of(pk)}"]
    for step in WorkflowStep.objects.filter(workflow_id=pk).order_by("position"):
        lines.append(f"  step {step.name}: {step.state} x{step.attempts} {step.last_error[:300]}")
    for entry in StepLog.objects.filter(workflow_id=pk):
        lines.append(f"    {entry.created_at:%H:%M:%S.%f} [{entry.level}] {entry.message[:300]}")
    for run in SparkJobRun.objects.order_by("pk"):
        lines.append(f"  run {run.pk} {run.job}: {run.state} lost={run.lost} {run.error[:200]}")
    return "\n".join(lines)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_killed_during_a_spark_purge_step_leaves_nothing_stuck(
    sim, settings, tmp_path, api, operator, approver, second_approver, workflow_worker
):
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    register(sim)
    tiered_topic(sim, "killed", partitions=1, records=200)
    sim.cli("disable-tiering", "killed", "--policy", "delete")
    leader = sim.partition("killed", 0).leader
    dry_run = spark_dry_run(SparkJob.PURGE, CLUSTER)  # before any worker: this process runs it

    first = workflow_worker(SPARK_MASTER=f"spark://127.0.0.1:{_closed_port()}", **SUPERVISION)
    body = request_planned(
        api, operator, {"kind": "remote_purge", "cluster": CLUSTER, "spark_run": dry_run.pk}
    )
    assert body["state"] == WorkflowState.PENDING_APPROVAL, body
    for user in (approver, second_approver):  # a purge of fenced data: two approvers
        api(user).post(f"/workflows/{body['id']}/approve", {"plan_hash": body["plan_hash"]})

    def stuck_run() -> SparkJobRun | None:
        return SparkJobRun.objects.filter(
            job=SparkJob.DELETE_OBJECTS, state=SparkRunState.RUNNING
        ).first()

    wait_for(lambda: stuck_run() is not None, 180, "the delete_objects run to start")
    run = stuck_run()
    wait_for(lambda: _jvm_started(run), 120, "spark-submit's JVM")
    job_processes = _processes_of(run)
    assert job_processes

    os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool; the job is in its own group
    first.wait()
    # within the guard's grace (10 s), well before the JVM would give up on its master (60 s)
    wait_for(lambda: not any(_alive(p) for p in job_processes), 30, "the job's processes to go")

    workflow_worker(**SUPERVISION)
    wait_for(lambda: state_of(body["id"]) in WorkflowState.TERMINAL, 600, "the workflow to end")
    done = api(operator).get(f"/workflows/{body['id']}").json()
    assert done["state"] == WorkflowState.SUCCEEDED, _story(body["id"])
    run.refresh_from_db()
    assert (run.state, run.lost) == (SparkRunState.FAILED, True), run.error
    again = SparkJobRun.objects.filter(job=SparkJob.DELETE_OBJECTS, pk__gt=run.pk).get()
    assert again.state == SparkRunState.SUCCEEDED
    # nothing is left that would refuse the next workflow on this topic or stack a run
    assert not SparkJobRun.objects.active().exists()
    assert not Workflow.objects.exclude(state__in=WorkflowState.TERMINAL).exists()
    after = list(sim.agent(leader).inventory("killed"))
    assert all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in after)
    assert not any(s3util.exists(s.object_path) for s in after)
    assert verify_chain().ok
