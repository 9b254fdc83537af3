"""``recover_log_dir`` on a cluster whose controller offers no restart control (as a real Kafka
cluster: ``sim up --no-restart-control``): Kafka brings a failed dir back only when the broker
restarts (KIP-112 "fix disks and reboot broker"), so the runbook's restart becomes a manual step
(#36): the workflow waits, holding no worker, until an operator restarts the broker and confirms
it in the console; who and when are audited; then the replicas come back and are verified."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import LogDirState
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds.disks import DiskAction
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_plan_stable, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLUSTER = "manual"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-manual"), extra=("--no-restart-control",)) as s:
        s.controller.create_topic("orders", 2, 3)
        wait_until(
            lambda: all(len(p.created) == 3 for p in s.controller.topic("orders").partitions),
            15,
            "orders created",
        )
        yield s


def _waiting_at(wf_id: int, step: str) -> bool:
    return Workflow.objects.filter(
        pk=wf_id, state=WorkflowState.WAITING, steps__name=step, steps__state=StepState.WAITING
    ).exists()


def test_without_a_restart_control_an_operator_restarts_the_broker_and_confirms(
    sim, workflow_worker, api, operator, approver
):
    workflow_worker()
    sim.register(CLUSTER)
    assert sim.controller.sim_controls() == {}  # the capability is absent
    sim.produce("orders", [{"key": f"k{i}", "value": f"v{i}"} for i in range(50)])
    broker = sim.controller.topic("orders").partitions[0].leader
    name = sim.dir_of(broker, "orders", 0)
    sim.break_log_dir(broker, name)
    params = {"cluster": CLUSTER, "broker": broker, "log_dir": name, "mode": "replace"}
    wait_plan_stable("recover_log_dir", params)
    created = request_planned(api, operator, {"kind": "recover_log_dir", **params})
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["plan"]["restart"] == "manual"
    wf_id = created["id"]
    api(approver).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})

    wait_for(lambda: _waiting_at(wf_id, "confirm_disk_replaced"), 120, "the disk gate")
    sim.replace_disk(broker, name)
    assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
    wait_for(lambda: _waiting_at(wf_id, "restart_broker"), 120, "the restart gate")
    wf = Workflow.objects.get(pk=wf_id)
    assert f"Restart broker {broker}" in wf.waiting_reason
    assert wf.lease_owner == ""  # waiting on a person holds no worker
    # the running broker keeps the dir offline though the new disk works (KIP-112)
    assert sim.dir_state(broker, name) == LogDirState.OFFLINE

    sim.cli("restart-broker", str(broker))  # the operator's restart, by hand
    confirmed = api(operator).post(f"/workflows/{wf_id}/confirm", {"comment": "restarted"})
    assert confirmed.status_code == 200
    wait_for(lambda: Workflow.objects.get(pk=wf_id).state in WorkflowState.TERMINAL, 180, "the end")

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    restart = wf.steps.get(name="restart_broker")
    assert restart.confirmed_by == operator and restart.confirmed_at is not None
    assert restart.output["log_dir_state"] == LogDirState.ONLINE
    confirmations = AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_CONFIRMED)
    assert sorted(e.extra["step"] for e in confirmations) == [
        "confirm_disk_replaced",
        "restart_broker",
    ]
    assert {e.actor_id for e in confirmations} == {operator.pk}
    assert not AuditEvent.objects.filter(workflow=wf, action=DiskAction.RESTART).exists()
    verify = wf.steps.get(name="verify").output
    assert verify["lost"] == [] and verify["missing_on_recovered_replica"] == []
    assert verify_chain().ok
