"""``elect_leaders`` end to end on both backends (#36): the simulated cluster registered as
``agents`` (its controller's API) and as ``kafka`` (its brokers' Kafka listeners, SASL/PLAIN,
as ``make run``'s ``local-kafka``), under a produce load, with a real Celery worker.

A broker restart leaves its partitions led by the others (nothing moves them back by itself);
the workflow is requested, planned from the synced inventory, approved and run, and the leaders
are back on the preferred replicas, each ElectLeaders it sent audited."""

from __future__ import annotations

import pytest

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from audit.trail import verify_chain
from console.choices import ClusterBackend
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import WorkflowState
from workflows.kinds.leaders import LeaderAction
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RESTARTED = 1


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-elect"), brokers=3, log_dirs=1) as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


def _register(sim: Sim, backend: str) -> Cluster:
    if backend == ClusterBackend.AGENTS:
        return sim.register("local")
    return sim.register_kafka()


def _partitions(sim: Sim, topic: str) -> dict:
    return {p.partition: p for p in sim.controller.topic(topic).partitions}


def _off_preferred(sim: Sim, topic: str) -> list[int]:
    return sorted(p for p, x in _partitions(sim, topic).items() if x.leader != x.replicas[0])


@pytest.mark.parametrize("backend", [ClusterBackend.AGENTS, ClusterBackend.KAFKA])
def test_leaders_move_back_to_the_preferred_replicas_after_a_broker_restart(
    sim, worker, api, operator, approver, backend
):
    topic = f"orders-{backend}"
    sim.controller.create_topic(topic, 3, 3)
    wait_until(
        lambda: all(len(p.created) == 3 for p in _partitions(sim, topic).values()),
        30,
        "replicas created",
    )
    led_by_restarted = [p for p, x in _partitions(sim, topic).items() if x.replicas[0] == RESTARTED]
    assert led_by_restarted and _off_preferred(sim, topic) == []
    cluster = _register(sim, backend)

    with Load(sim, topic) as load:
        load.wait_acked(100)
        sim.cli("restart-broker", str(RESTARTED))
        # its partitions are led by the others, and it is back in their ISR as a follower
        wait_until(
            lambda: (
                _off_preferred(sim, topic) == led_by_restarted
                and all(RESTARTED in x.isr for x in _partitions(sim, topic).values())
            ),
            60,
            "the restarted broker a follower in every ISR",
        )
        load.wait_acked(100)
        run = do_sync_cluster(cluster).run
        assert run.errors == {}, run.errors
        cluster.refresh_from_db()
        if backend == ClusterBackend.KAFKA:
            assert cluster.backend_features["api_versions"].get("43"), "ElectLeaders advertised"

        created = request_planned(
            api, operator, {"kind": "elect_leaders", "cluster": cluster.name, "topic": topic}
        )
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        elections = created["plan"]["elections"]
        assert [e["partition"] for e in elections] == led_by_restarted
        assert all(e["preferred"] == RESTARTED and e["leader"] != RESTARTED for e in elections)
        assert created["plan"]["backend"] == backend
        assert [r["after"] for r in created["plan_summary"]] == [f"broker {RESTARTED}"] * len(
            elections
        )

        approved = api(approver).post(
            f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
        )
        assert approved.status_code == 200, approved.json()
        wait_for(
            lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
            90,
            "the election",
        )
        load.wait_acked(100)  # the load still goes on, to the new leaders
    assert not load.errors, load.errors

    wf = Workflow.objects.get(pk=created["id"])
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    assert _off_preferred(sim, topic) == []
    assert wf.steps.get(name="verify_leaders").output["leaders"] == {
        str(p): RESTARTED for p in led_by_restarted
    }
    [event] = AuditEvent.objects.filter(workflow=wf, action=LeaderAction.ELECT_PREFERRED)
    assert event.outcome == AuditOutcome.SUCCESS
    assert event.target_id == f"{cluster.name}/{topic}"
    assert event.before["backend"] == backend
    assert all(int(leader) != RESTARTED for leader in event.before["leaders"].values())
    assert event.after == {str(p): None for p in led_by_restarted}  # elected, no error
    assert verify_chain().ok


@pytest.mark.parametrize("backend", [ClusterBackend.AGENTS, ClusterBackend.KAFKA])
def test_a_preferred_replica_out_of_the_isr_makes_the_election_wait_not_fail(
    sim, worker, api, operator, approver, backend
):
    """Its broker down, the preferred replica cannot lead (PREFERRED_LEADER_NOT_AVAILABLE, each
    such answer audited): the workflow waits, and elects once the broker is back."""
    topic = f"held-{backend}"
    sim.controller.create_topic(topic, 3, 3)
    wait_until(
        lambda: all(len(p.created) == 3 for p in _partitions(sim, topic).values()),
        30,
        "replicas created",
    )
    led_by_it = [p for p, x in _partitions(sim, topic).items() if x.replicas[0] == RESTARTED]
    cluster = _register(sim, backend)
    sim.cli("kill-broker", str(RESTARTED))
    try:
        wait_until(
            lambda: (
                _off_preferred(sim, topic) == led_by_it
                and all(RESTARTED not in x.isr for x in _partitions(sim, topic).values())
            ),
            60,
            "the killed broker out of every ISR",
        )
        do_sync_cluster(cluster)
        created = request_planned(
            api, operator, {"kind": "elect_leaders", "cluster": cluster.name, "topic": topic}
        )
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        assert [e["partition"] for e in created["plan"]["elections"]] == led_by_it
        api(approver).post(
            f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
        )
        wait_for(
            lambda: Workflow.objects.get(pk=created["id"]).state == WorkflowState.WAITING,
            60,
            "the election to wait",
        )
        wf = Workflow.objects.get(pk=created["id"])
        assert wf.steps.get(name="elect").state != "succeeded"
    finally:
        sim.cli("start-broker", str(RESTARTED))
    wait_for(
        lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
        90,
        "the election once the broker is back",
    )
    wf = Workflow.objects.get(pk=created["id"])
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    assert _off_preferred(sim, topic) == []
    sent = list(
        AuditEvent.objects.filter(workflow=wf, action=LeaderAction.ELECT_PREFERRED).order_by("seq")
    )
    assert sent[-1].after == {str(p): None for p in led_by_it}
    refused = [e.after for e in sent[:-1]]
    assert {"PREFERRED_LEADER_NOT_AVAILABLE"} in [set(a.values()) for a in refused], refused
    # every send is its own event: one per run of the step that reached the cluster
    keys = [e.extra["idempotency_key"] for e in sent]
    assert len(keys) == len(set(keys))
