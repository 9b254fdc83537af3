"""Crash safety of ``recover_log_dir`` with ``move_replicas`` on a ``kafka`` cluster (#36): a
real worker SIGKILLed at every step boundary (test-only STRATA_FAULT_KILL_AT) under a produce
load. The recovery still completes exactly once: one AlterPartitionReassignments, the throttle
set and removed once per topic and broker, one cordon and uncordon, one completion per step, an
intact audit chain; a step run again finds its configs listed and its reassignment under way or
done."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import LogDirState
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds.disks_kafka import KafkaRecoverAction
from workflows.kinds.disks_kafka_moves import MoveAction
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import (
    Sim,
    request_planned,
    sim_cluster,
    stop_group,
    wait_plan_stable,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOPIC = "orders-moves-kill"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-moves-kill"), brokers=4, log_dirs=2) as s:
        s.controller.create_topic(TOPIC, 2, 2)
        wait_until(
            lambda: all(len(p.created) == 2 for p in s.controller.topic(TOPIC).partitions),
            30,
            "replicas created",
        )
        yield s


def _body(params: dict) -> dict:
    """The API request: the flat fields, and the kafka path's own in ``params``."""
    own = ("move_replicas", "throttle_bytes_per_s")
    return {
        "kind": "recover_log_dir",
        **{k: v for k, v in params.items() if k not in own},
        "params": {k: v for k, v in params.items() if k in own},
    }


def _at(wf_id: int, step: str) -> bool:
    return Workflow.objects.filter(
        pk=wf_id, state=WorkflowState.WAITING, steps__name=step, steps__state=StepState.WAITING
    ).exists()


def test_sigkill_at_every_step_boundary_still_moves_and_recovers_once(
    sim, api, operator, approver, workflow_worker
):
    worker = workflow_worker(
        STRATA_FAULT_KILL_AT="recover_log_dir:*:before,recover_log_dir:*:after"
    )
    try:
        cluster = sim.register_kafka()
        do_sync_cluster(cluster)
        with Load(sim, TOPIC) as load:
            load.wait_acked(50)
            broker = sim.controller.topic(TOPIC).partitions[0].leader
            name = sim.dir_of(broker, TOPIC, 0)
            assert name is not None
            sim.break_log_dir(broker, name)
            params = {
                "cluster": cluster.name,
                "broker": broker,
                "log_dir": name,
                "mode": "replace",
                "move_replicas": True,
            }
            wait_plan_stable("recover_log_dir", params)
            created = request_planned(api, operator, _body(params))
            assert created["state"] == WorkflowState.PENDING_APPROVAL, created
            plan = created["plan"]
            assert plan["moves"] and "reassign_replicas" in plan["steps"]
            wf_id = created["id"]
            api(approver).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})

            wait_for(lambda: _at(wf_id, "confirm_disk_replaced"), 240, "the disk gate")
            sim.replace_disk(broker, name)
            assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
            wait_for(lambda: _at(wf_id, "restart_broker"), 240, "the restart gate")
            sim.cli("restart-broker", str(broker))
            assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
            wait_for(
                lambda: Workflow.objects.get(pk=wf_id).state in WorkflowState.TERMINAL,
                240,
                "the recovery to end",
            )
            load.wait_acked(50)
        assert not load.errors, load.errors

        wf = Workflow.objects.get(pk=wf_id)
        assert wf.state == WorkflowState.SUCCEEDED, (
            wf.error_code,
            wf.error_message,
            worker.log_path.read_text()[-3000:],
        )
        steps = list(wf.steps.order_by("position"))
        assert [s.name for s in steps] == plan["steps"]
        markers = sorted(p.name for p in (worker.log_path.parent / "faults").iterdir())
        assert len(markers) == 2 * len(steps), markers  # every boundary was hit
        for step in steps:  # one completion per step
            assert (
                AuditEvent.objects.filter(
                    workflow=wf, action=AuditAction.STEP_SUCCEEDED, extra__position=step.position
                ).count()
                == 1
            )
        throttle = plan["throttle"]  # one command per topic and per broker
        resources = len(throttle["leader_replicas"]) + len(throttle["brokers"])
        for action, count in (
            (KafkaRecoverAction.CORDON, 1),
            (KafkaRecoverAction.UNCORDON, 1),
            (MoveAction.THROTTLE_SET, resources),
            (MoveAction.REASSIGN, 1),
            (MoveAction.THROTTLE_REMOVE, resources),
        ):
            assert AuditEvent.objects.filter(workflow=wf, action=action).count() == count, action
        assert AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_RESUMED).exists()
        for m in plan["moves"]:  # the moves took place, and only those
            part = next(
                p
                for p in sim.controller.topic(m["topic"]).partitions
                if p.partition == m["partition"]
            )
            assert part.replicas == m["replicas_after"]
        assert sim.dir_state(broker, name) == LogDirState.ONLINE
        assert verify_chain().ok
    finally:
        stop_group(worker)
