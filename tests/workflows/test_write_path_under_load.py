"""The core loop — request → approve → execute — on a cluster that carries traffic (issue 11).

``make run``'s demo load runs against the simulated cluster's real processes, the console syncs
every 2 s and pending plans refresh their information every few seconds, as in ``make run``.
A retain disablement of ``demo.payments`` and a log-dir recovery must each succeed after exactly
the approvals they require, none voided, while the figures in their plans keep moving: only the
actions are approved.
"""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from broker_agent.contract.choices import LogDirState, TieredState
from console.models import Cluster
from console.sync import do_sync_cluster
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.models import Workflow

from .conftest import wait_for, wait_planned
from .simcluster import Sim, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLUSTER = "busy"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-busy")) as s:
        s.cli("demo-load", "--detach", "--rate", "150")  # the load `make run` starts
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker(STRATA_SYNC_INTERVAL_SECONDS="2", STRATA_PLAN_REFRESH_SECONDS="2")


@pytest.fixture
def cluster(sim: Sim) -> Cluster:
    c = sim.register(CLUSTER)
    do_sync_cluster(c)
    return c


def _local_bytes(information: dict[str, Any]) -> int:
    return sum(d["local_bytes"] for d in information["disk_growth"]["log_dirs"])


def _finished(pk: int, timeout: float = 240) -> Workflow:
    wait_for(lambda: Workflow.objects.get(pk=pk).is_terminal, timeout, f"workflow #{pk} to end")
    return Workflow.objects.get(pk=pk)


def _assert_exact_approvals(wf: Workflow) -> None:
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    approvals = list(wf.approvals.all())
    assert len(approvals) == wf.approvals_required
    assert all(a.voided_at is None for a in approvals)
    assert not AuditEvent.objects.filter(
        workflow=wf, action=AuditAction.WORKFLOW_PLAN_CHANGED
    ).exists()
    assert wf.plan_diff == []


def test_retain_disablement_under_load_succeeds_after_its_one_approval(
    sim, worker, cluster, api, operator, approver
):
    created = api(operator).post(
        "/workflows",
        {
            "kind": "disable_tiering",
            "cluster": CLUSTER,
            "topic": "demo.payments",
            "policy": "retain",
            "reason": "stop tiering payments",
        },
    )
    assert created.status_code == 201
    wf = wait_planned(created.json()["id"])
    assert wf.state == WorkflowState.PENDING_APPROVAL, (wf.error_code, wf.error_message)
    first_local = _local_bytes(wf.plan_information)
    # traffic moves the plan's figures while it waits for its approver: the worker refreshes
    # them, and the approval still names the same actions
    wait_for(
        lambda: _local_bytes(Workflow.objects.get(pk=wf.pk).plan_information) > first_local,
        90,
        "the pending plan's information to move with the traffic",
    )
    refreshed = Workflow.objects.get(pk=wf.pk)
    assert refreshed.plan_hash == wf.plan_hash and refreshed.state == WorkflowState.PENDING_APPROVAL
    decided = api(approver).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
    assert decided.status_code == 200, decided.json()
    wf = _finished(wf.pk)
    _assert_exact_approvals(wf)
    assert _local_bytes(wf.plan_information) > first_local  # re-read at start, not approved
    topic = sim.controller.topic("demo.payments")
    assert (topic.tiered_state, topic.tiered_epoch) == (TieredState.DISABLED, 1)


def test_log_dir_recovery_under_load_succeeds_after_its_one_approval(
    sim, worker, cluster, api, operator, approver
):
    broker = sim.controller.topic("demo.orders").partitions[0].replicas[0]
    log_dir = sim.dir_of(broker, "demo.orders", 0)
    sim.break_log_dir(broker, log_dir)
    created = api(operator).post(
        "/workflows",
        {
            "kind": "recover_log_dir",
            "cluster": CLUSTER,
            "broker": broker,
            "log_dir": log_dir,
            "mode": "replace",
            "reason": "disk died",
        },
    )
    assert created.status_code == 201
    wf = wait_planned(created.json()["id"])
    assert wf.state == WorkflowState.PENDING_APPROVAL, (wf.error_code, wf.error_message)
    assert {"topic": "demo.orders", "partition": 0} in wf.plan["replicas"]
    decided = api(approver).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
    assert decided.status_code == 200, decided.json()
    wait_for(
        lambda: (
            Workflow.objects.get(pk=wf.pk)
            .steps.filter(name="confirm_disk_replaced", state=StepState.WAITING)
            .exists()
        ),
        120,
        "the disk-replaced gate",
    )
    sim.replace_disk(broker, log_dir)
    confirmed = api(operator).post(f"/workflows/{wf.pk}/confirm", {"comment": "new disk"})
    assert confirmed.status_code == 200, confirmed.json()
    wf = _finished(wf.pk, timeout=300)
    _assert_exact_approvals(wf)
    wait_until(lambda: sim.dir_state(broker, log_dir) == LogDirState.ONLINE, 30, "dir online")
