"""Crash safety of ``disable_tiering`` with real workers and the simulated cluster's processes.

- The worker is SIGKILLed at every step boundary (test-only STRATA_FAULT_KILL_AT): the workflow
  still completes exactly once — one tiered-epoch increment, one acknowledgement per broker, an
  intact audit chain (KIP-950 "Controller Failover in DISABLING State": a topic left DISABLING is
  driven on).
- A broker agent down for 30 s mid fan-out: the workflow waits, visibly, and completes when it
  returns (KIP-950 "Broker Dies in DISABLING State": retried until it answers).
- Redis (a private redis-server on a free port, never the shared one) restarted mid-run with
  nothing persisted: nothing is lost, the reconciler re-enqueues from PostgreSQL.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import TieredState
from tests.conftest import ROOT, child_env
from workflows.choices import AuditAction, WorkflowState
from workflows.kinds.tiering import TieringAction
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import stop_group
from .tiering_sim import (
    CLUSTER,
    acks_per_broker,
    register,
    request_planned,
    sim_cluster,
    state_of,
    sync,
    tiered_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data") as s:
        yield s


@pytest.fixture
def lab(sim):
    register(sim)
    return sim


def _request_and_approve(api, operator, approver, topic: str) -> int:
    """Request; a worker plans it; approve the planned actions' hash."""
    created = request_planned(
        api, operator, {"kind": "disable_tiering", "cluster": CLUSTER, "topic": topic}
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    return created["id"]


def _assert_exactly_once(sim, wf_id: int, topic: str) -> None:
    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    t = sim.controller.topic(topic)
    assert (t.tiered_state, t.tiered_epoch) == (TieredState.DISABLED, 1)  # one increment from 0
    assert sorted(t.tiering_acks) == [1, 2, 3]
    assert acks_per_broker(wf_id, TieringAction.DISABLE_REMOTE_TOPIC) == {1: 1, 2: 1, 3: 1}
    assert (
        AuditEvent.objects.filter(workflow=wf, action=TieringAction.START_DISABLEMENT).count() == 1
    )
    assert (
        AuditEvent.objects.filter(workflow=wf, action=TieringAction.COMPLETE_DISABLEMENT).count()
        == 1
    )
    for step in wf.steps.all():  # one completion per step
        assert (
            AuditEvent.objects.filter(
                workflow=wf, action=AuditAction.STEP_SUCCEEDED, extra__position=step.position
            ).count()
            == 1
        )
    assert verify_chain().ok


def test_sigkill_at_every_step_boundary_still_disables_exactly_once(
    lab, api, operator, approver, workflow_worker
):
    sim = lab
    worker = workflow_worker(
        STRATA_FAULT_KILL_AT="disable_tiering:*:before,disable_tiering:*:after"
    )
    tiered_topic(sim, "crash", partitions=3, records=90)
    sync()
    wf_id = _request_and_approve(api, operator, approver, "crash")
    wait_for(lambda: state_of(wf_id) in WorkflowState.TERMINAL, 240, "the workflow to end")
    try:
        _assert_exactly_once(sim, wf_id, "crash")
        steps = Workflow.objects.get(pk=wf_id).steps.count()
        markers = sorted(p.name for p in (worker.log_path.parent / "faults").iterdir())
        assert len(markers) == 2 * steps, markers  # every boundary was hit
        assert AuditEvent.objects.filter(
            workflow_id=wf_id, action=AuditAction.WORKFLOW_RESUMED
        ).exists()
    finally:
        stop_group(worker)


def test_a_broker_down_for_30s_mid_fan_out_makes_it_wait_visibly_then_complete(
    lab, api, operator, approver, client, workflow_worker
):
    sim = lab
    worker = workflow_worker()
    tiered_topic(sim, "outage", partitions=3, records=90)
    sync()
    sim.cli("kill-broker", "3")
    down_at = time.monotonic()
    try:
        wf_id = _request_and_approve(api, operator, approver, "outage")
        wait_for(lambda: state_of(wf_id) == WorkflowState.WAITING, 60, "the workflow to wait")
        wf = Workflow.objects.get(pk=wf_id)
        assert "Broker 3 unreachable" in wf.waiting_reason
        fan_out = [s.state for s in wf.steps.filter(name="disable_remote_topic")]
        # the third step is re-tried while the workflow waits: briefly running, then waiting
        assert fan_out[:2] == ["succeeded", "succeeded"] and fan_out[2] in ("waiting", "running")
        client.force_login(operator)
        page = client.get(f"/workflows/{wf_id}/").content.decode()
        assert "Waiting" in page and "Broker 3 unreachable" in page
        assert sim.controller.topic("outage").tiered_state == TieredState.DISABLING
        time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
        assert state_of(wf_id) == WorkflowState.WAITING  # still waiting after 30 s
    finally:
        sim.cli("start-broker", "3")
    wait_for(lambda: state_of(wf_id) in WorkflowState.TERMINAL, 90, "the workflow to end")
    try:
        _assert_exactly_once(sim, wf_id, "outage")
    finally:
        stop_group(worker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis(port: int, workdir) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc
        time.sleep(0.05)
    raise RuntimeError("private redis-server did not start")


@pytest.fixture
def private_redis_worker(django_db_blocker, tmp_path):
    """A private redis-server on a free port and a worker (+ beat) pointed at it."""
    port = _free_port()
    state = {"redis": _redis(port, tmp_path), "port": port}
    with django_db_blocker.unblock():
        env = child_env(
            REDIS_URL=f"redis://127.0.0.1:{port}/0",
            STRATA_RUN_DIR=str(tmp_path),
            STRATA_WORKFLOW_LEASE_SECONDS="3",
            STRATA_RECONCILE_SECONDS="1",
            STRATA_STEP_RETRY_BASE_SECONDS="0.2",
            STRATA_SYNC_INTERVAL_SECONDS="3600",
        )
    workers: list[subprocess.Popen] = []

    def start_worker() -> None:
        log = tmp_path / f"worker{len(workers)}.log"
        with log.open("w") as out:
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "config",
                        "worker",
                        "-B",
                        "--pool",
                        "prefork",
                        "--concurrency",
                        "2",
                        "--loglevel",
                        "INFO",
                        "--hostname",
                        f"redis-{port}-{len(workers)}@%h",
                        "--without-mingle",
                        "--without-gossip",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        wait_for(lambda: "ready." in log.read_text(), 60, "the private worker to be ready")

    def restart_redis() -> bool:
        """Restart Redis; act as the worker's supervisor (systemd Restart=always): a worker
        that exited on the lost connection is started again. True if it had to be."""
        state["redis"].kill()  # SIGKILL, nothing persisted: every queued message is gone
        state["redis"].wait()
        state["redis"] = _redis(port, tmp_path)
        time.sleep(3)
        if workers[-1].poll() is not None:
            start_worker()
            return True
        return False

    start_worker()
    yield restart_redis
    for worker in workers:
        stop_group(worker)
    state["redis"].kill()
    state["redis"].wait()


def test_redis_restarted_mid_run_loses_nothing(lab, api, operator, approver, private_redis_worker):
    sim = lab
    tiered_topic(sim, "restart", partitions=3, records=90)
    sync()
    sim.cli("kill-broker", "2")
    try:
        # The API's enqueues (the planning, then the run) go to the suite's Redis, which this
        # worker does not read: the private worker's reconciler finds the planning, then the
        # approved workflow in PostgreSQL.
        wf_id = _request_and_approve(api, operator, approver, "restart")
        wait_for(lambda: state_of(wf_id) == WorkflowState.WAITING, 60, "the workflow to wait")
        # the wake-up message of the waiting step dies with Redis
        worker_restarted = private_redis_worker()
    finally:
        sim.cli("start-broker", "2")
    wait_for(lambda: state_of(wf_id) in WorkflowState.TERMINAL, 90, "the workflow to end")
    _assert_exactly_once(sim, wf_id, "restart")
    # Known kombu/redis-py behaviour: the worker may exit with "Unrecoverable error" when its
    # broker connection drops; recorded here so a fix upstream shows up in the test output.
    print(f"worker exited on the Redis restart and was restarted: {worker_restarted}")
