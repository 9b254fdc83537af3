"""``disable_tiering`` (retain, then delete) and ``enable_tiering`` (after each) end to end on
a ``kafka`` cluster (#36): the simulated cluster registered through its brokers' Kafka listeners (SASL/PLAIN,
as ``make run``'s ``local-kafka``), under a produce load, with a real Celery worker. Each
workflow is requested, planned from the synced inventory, approved and run; its one
IncrementalAlterConfigs is audited and the outcome read back over Kafka's protocol (configs,
ListOffsets -2 / -4 / -5), independently of the steps' own reads."""

from __future__ import annotations

import pytest

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from audit.trail import verify_chain
from console.models import Cluster, Topic
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import WorkflowState
from workflows.kinds.tiering_kafka import ALTER_CONFIGS
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_until
from .tiering_kafka_sim import (
    PARTITIONS,
    TOPIC,
    configs,
    offsets,
    tiered,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-tier-kafka"), brokers=3, log_dirs=1) as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    # latest-tiered must stand still this long (the simulated copier runs every 0.5 s)
    return workflow_worker(STRATA_TIER_COPY_QUIET_SECONDS="3")


def _run(api, operator, approvers, cluster: Cluster, kind: str, **params) -> Workflow:
    """Request, plan, approve (as many as the plan needs) and wait for the end."""
    created = request_planned(
        api, operator, {"kind": kind, "cluster": cluster.name, "topic": TOPIC, **params}
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["plan"]["backend"] == "kafka"
    for approver in approvers[: created["approvals_required"]]:
        approved = api(approver).post(
            f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
        )
        assert approved.status_code == 200, approved.json()
    wait_for(
        lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
        120,
        f"the {kind} workflow",
    )
    wf = Workflow.objects.get(pk=created["id"])
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    return wf


def _sent(wf: Workflow) -> AuditEvent:
    [event] = AuditEvent.objects.filter(workflow=wf, action=ALTER_CONFIGS)
    assert event.outcome == AuditOutcome.SUCCESS
    assert event.target_id == f"local-kafka/{TOPIC}" and event.before["backend"] == "kafka"
    return event


def test_disable_retain_re_enable_and_disable_delete_on_kafka_under_load(
    sim, worker, api, operator, approver, second_approver
):
    tiered(sim)
    cluster = sim.register_kafka()
    approvers = [approver, second_approver]
    with Load(sim, TOPIC) as load:
        load.wait_acked(400)
        wait_until(
            lambda: all(o >= 0 for o in offsets(cluster, -5).values()),
            60,
            "every partition tiering",
        )
        run = do_sync_cluster(cluster).run
        assert run.errors == {}, run.errors

        # retain: copying stops, local retention goes to -2 as Kafka requires
        wf = _run(api, operator, approvers, cluster, "disable_tiering", policy="retain")
        assert [c["config"] for c in wf.plan["changes"]] == [
            "local.retention.bytes",
            "remote.log.copy.disable",
        ]
        assert _sent(wf).after == {
            "configs": {"local.retention.bytes": "-2", "remote.log.copy.disable": "true"}
        }
        read = configs(cluster)
        assert read["remote.log.copy.disable"] == "true"
        assert read["local.retention.bytes"] == "-2"
        stopped = offsets(cluster, -5)
        assert wf.steps.get(name="verify_copy_stopped").output["latest_tiered"] == {
            str(p): o for p, o in stopped.items()
        }
        load.wait_acked(400)  # more segments close; none is copied
        assert offsets(cluster, -5) == stopped

        # re-enable: copy disable dropped
        wf = _run(api, operator, approvers, cluster, "enable_tiering")
        assert _sent(wf).after == {"configs": {"remote.log.copy.disable": None}}
        assert configs(cluster)["remote.log.copy.disable"] == "false"
        wait_until(
            lambda: all(o > stopped[p] for p, o in offsets(cluster, -5).items()),
            60,
            "copying resumed on every partition",
        )
        assert Topic.objects.get(cluster=cluster, name=TOPIC).tiered_state == "ENABLED"  # synced

        # delete: two approvals; the log start reaches the local log start
        wf = _run(api, operator, approvers, cluster, "disable_tiering", policy="delete")
        assert wf.approvals_required == 2
        assert _sent(wf).after == {
            "configs": {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
        }
        output = wf.steps.get(name="verify_log_start").output
        assert all(
            output["log_start"][p] >= output["earliest_local"][p] for p in output["log_start"]
        )
        start, local = offsets(cluster, -2), offsets(cluster, -4)
        assert all(start[p] >= local[p] for p in range(PARTITIONS)), (start, local)

        # re-enable after delete: remote storage on again, the delete flag dropped
        wf = _run(api, operator, approvers, cluster, "enable_tiering")
        assert _sent(wf).after == {
            "configs": {"remote.storage.enable": "true", "remote.log.delete.on.disable": None}
        }
        read = configs(cluster)
        assert (read["remote.storage.enable"], read["remote.log.delete.on.disable"]) == (
            "true",
            "false",
        )
        load.wait_acked(100)
    assert not load.errors, load.errors
    assert verify_chain().ok
