"""Crash safety of ``recover_log_dir``: the worker is SIGKILLed at every step boundary (the
test-only ``STRATA_FAULT_KILL_AT`` switch, before and after each step) and the recovery still
completes, exactly once: one cordon, one uncordon, one broker restart (from the incarnation seen
before the first attempt), one produce / consume check, one completion per step, and an intact
audit chain."""

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

CLUSTER = "crash"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-crash")) as s:
        s.controller.create_topic("orders", 2, 3)
        wait_until(
            lambda: all(len(p.created) == 3 for p in s.controller.topic("orders").partitions),
            15,
            "orders created",
        )
        yield s


def test_worker_killed_at_every_step_boundary_recovers_exactly_once(
    sim, workflow_worker, api, operator, approver
):
    worker = workflow_worker(
        STRATA_FAULT_KILL_AT="recover_log_dir:*:before,recover_log_dir:*:after"
    )
    sim.register(CLUSTER)
    values = [f"v{i}" for i in range(100)]
    sim.produce("orders", [{"key": f"k{i % 20}", "value": v} for i, v in enumerate(values)])
    broker = sim.controller.topic("orders").partitions[0].leader  # a leader's dir fails
    name = sim.dir_of(broker, "orders", 0)
    sim.break_log_dir(broker, name)
    params = {"cluster": CLUSTER, "broker": broker, "log_dir": name, "mode": "replace"}
    actions = wait_plan_stable("recover_log_dir", params)
    created = request_planned(api, operator, {"kind": "recover_log_dir", **params})
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["plan"]["replicas"] == actions["replicas"]  # the worker planned the same
    wf_id = created["id"]
    api(approver).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})

    def state() -> str:
        return Workflow.objects.values_list("state", flat=True).get(pk=wf_id)

    def at_gate() -> bool:
        return Workflow.objects.filter(
            pk=wf_id,
            state=WorkflowState.WAITING,
            steps__name="confirm_disk_replaced",
            steps__state=StepState.WAITING,
        ).exists()

    wait_for(at_gate, 120, "the human gate despite the kills")
    sim.replace_disk(broker, name)
    assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
    wait_for(lambda: state() in WorkflowState.TERMINAL, 240, "the recovery to end")

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (
        wf.error_code,
        wf.error_message,
        worker.log_path.read_text()[-3000:],
    )
    steps = list(wf.steps.order_by("position"))
    assert [s.name for s in steps] == [
        "cordon_log_dir",
        "confirm_disk_replaced",
        "uncordon_log_dir",
        "restart_broker",
        "recreate_replicas",
        "verify",
    ]
    # every boundary was hit: one marker per step and side, written just before the SIGKILL
    markers = sorted(p.name for p in (worker.log_path.parent / "faults").iterdir())
    assert len(markers) == 2 * len(steps), markers
    assert all(s.state == StepState.SUCCEEDED and s.attempts >= 2 for s in steps)
    for step in steps:  # one completion per step
        assert (
            AuditEvent.objects.filter(
                action=AuditAction.STEP_SUCCEEDED, workflow=wf, extra__position=step.position
            ).count()
            == 1
        )
    # each effect on the cluster exactly once
    for action in (
        DiskAction.CORDON,
        DiskAction.UNCORDON,
        DiskAction.RESTART_SEEN,
        DiskAction.RESTART,
        DiskAction.VERIFY_PRODUCE,
    ):
        assert AuditEvent.objects.filter(workflow=wf, action=action).count() == 1, action
    # the broker was restarted once, from the incarnation seen before the first attempt: the
    # process running now is the one that restart started
    restart = AuditEvent.objects.get(workflow=wf, action=DiskAction.RESTART)
    seen = AuditEvent.objects.get(workflow=wf, action=DiskAction.RESTART_SEEN)
    assert restart.after["restarted"] and restart.before == seen.after
    with sim.agent(broker) as a:
        assert a.incarnation() == restart.after["incarnation"] != seen.after["incarnation"]
    verify = wf.steps.get(name="verify").output
    assert verify["lost"] == [] and verify["missing_on_recovered_replica"] == []
    assert AuditEvent.objects.filter(action=AuditAction.WORKFLOW_RESUMED, workflow=wf).exists()
    assert (
        AuditEvent.objects.filter(action=AuditAction.WORKFLOW_SUCCEEDED, workflow=wf).count() == 1
    )
    assert sim.dir_state(broker, name) == LogDirState.ONLINE
    with sim.agent(broker) as a:
        assert a.snapshot().offline_replica_count == 0
    read = sim.read_values("orders")
    assert set(values) <= set(read) and len(read) == len(set(read))
    # the produce / consume check wrote one batch per affected partition, not one per run
    checks = [v for v in read if v.startswith(f"wf{wf_id}:")]
    assert len(checks) == verify["partitions_checked"] * verify["records_per_partition"]
    assert verify_chain().ok
