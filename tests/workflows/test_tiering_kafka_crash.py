"""Crash safety of ``disable_tiering`` on a ``kafka`` cluster (#36), with a real worker SIGKILLed
at every step boundary (test-only STRATA_FAULT_KILL_AT) under a produce load: the workflow still
completes, its one IncrementalAlterConfigs audited once, every step completed once, an intact
audit chain. (A kill between the command and its audit: test_tiering_kafka_plan.)"""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import AuditAction, WorkflowState
from workflows.kinds.tiering_kafka import ALTER_CONFIGS
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, stop_group, wait_until
from .tiering_kafka_sim import TOPIC, configs, offsets, tiered

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-tier-kafka-kill"), brokers=3, log_dirs=1) as s:
        yield s


def test_sigkill_at_every_step_boundary_still_disables_once(
    sim, api, operator, approver, workflow_worker
):
    worker = workflow_worker(
        STRATA_FAULT_KILL_AT="disable_tiering:*:before,disable_tiering:*:after",
        STRATA_TIER_COPY_QUIET_SECONDS="3",
    )
    try:
        tiered(sim)
        cluster = sim.register_kafka()
        with Load(sim, TOPIC) as load:
            load.wait_acked(300)
            wait_until(lambda: all(o >= 0 for o in offsets(cluster, -5).values()), 60, "tiering")
            do_sync_cluster(cluster)
            created = request_planned(
                api, operator, {"kind": "disable_tiering", "cluster": cluster.name, "topic": TOPIC}
            )
            assert created["state"] == WorkflowState.PENDING_APPROVAL, created
            api(approver).post(
                f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
            )
            wait_for(
                lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
                240,
                "the workflow to end",
            )
        assert not load.errors, load.errors
        wf = Workflow.objects.get(pk=created["id"])
        assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
        assert configs(cluster)["remote.log.copy.disable"] == "true"
        assert AuditEvent.objects.filter(workflow=wf, action=ALTER_CONFIGS).count() == 1
        for step in wf.steps.all():  # one completion per step
            assert (
                AuditEvent.objects.filter(
                    workflow=wf, action=AuditAction.STEP_SUCCEEDED, extra__position=step.position
                ).count()
                == 1
            )
        markers = sorted(p.name for p in (worker.log_path.parent / "faults").iterdir())
        assert len(markers) == 2 * wf.steps.count(), markers  # every boundary was hit
        assert AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_RESUMED).exists()
        assert verify_chain().ok
    finally:
        stop_group(worker)
