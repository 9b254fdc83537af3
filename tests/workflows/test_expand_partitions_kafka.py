"""``expand_partitions`` on a ``kafka`` cluster (#36): the simulated cluster registered as
``local-kafka`` (its brokers' Kafka listeners, SASL/PLAIN), under a produce load, with a real
Celery worker.

Kafka never shipped KIP-253: the expansion is CreatePartitions, its plan warns that keys are
remapped (murmur2(key) mod count, no per-key order across the change) and shows the ordered
expansion unavailable; a shrink is refused with the reason (Kafka cannot remove partitions).
The agents' KIP-253 expansion is test_partition_kinds."""

from __future__ import annotations

import pytest

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from audit.trail import verify_chain
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.actions import preview_plan
from workflows.choices import WorkflowState
from workflows.errors import WorkflowError
from workflows.kinds.topology_kafka import CREATE_PARTITIONS, KEY_REMAPPING
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_outcome, request_planned, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-expand-kafka"), brokers=2, log_dirs=1) as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def cluster(sim: Sim) -> Cluster:
    """``local-kafka``, synced once (its capabilities come from the brokers' ApiVersions)."""
    c = sim.register_kafka()
    run = do_sync_cluster(c).run
    assert run.errors == {}, run.errors
    c.refresh_from_db()
    assert c.backend_features["api_versions"].get("37"), "CreatePartitions advertised"
    return c


def _create(sim: Sim, name: str, partitions: int) -> None:
    sim.controller.create_topic(name, partitions, 2)
    wait_until(
        lambda: all(p.leader in p.created for p in sim.controller.topic(name).partitions),
        30,
        "replicas created",
    )


def _count(sim: Sim, topic: str) -> int:
    return sim.controller.topic(topic).undeleted_partition_count


def _approve_and_run(api, approver, created: dict) -> Workflow:
    approved = api(approver).post(
        f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
    )
    assert approved.status_code == 200, approved.json()
    wait_for(
        lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
        90,
        "the expansion",
    )
    return Workflow.objects.get(pk=created["id"])


def test_expansion_adds_partitions_by_create_partitions_with_the_key_remapping_warning(
    sim, worker, cluster, api, operator, approver
):
    topic = "orders-kafka"
    _create(sim, topic, 2)
    with Load(sim, topic) as load:
        load.wait_acked(50)
        body = {"kind": "expand_partitions", "cluster": cluster.name, "topic": topic}
        created = request_planned(api, operator, {**body, "partitions": 4})
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        plan = created["plan"]
        assert (plan["backend"], plan["partition_count"], plan["new_partition_count"]) == (
            "kafka",
            2,
            4,
        )
        assert plan["new_partitions"] == [2, 3] and plan["replication_factor"] == 2
        assert plan["steps"] == ["create_partitions", "verify_partitions"]
        assert plan["key_remapping"] == KEY_REMAPPING
        assert "murmur2(key) mod count" in KEY_REMAPPING
        assert plan["ordered_expansion"].startswith("unavailable: Kafka never shipped KIP-253")
        assert "default placement" in plan["placement"]
        rows = {r["what"]: r for r in created["plan_summary"]}
        remap = rows[f"Keys remapped: {KEY_REMAPPING}"]
        assert remap["destructive"] and (remap["before"], remap["after"]) == (
            "murmur2(key) mod 2",
            "murmur2(key) mod 4",
        )
        assert rows["Ordered expansion (KIP-253)"]["after"] == plan["ordered_expansion"]
        assert _count(sim, topic) == 2  # planning changed nothing

        wf = _approve_and_run(api, approver, created)
        load.wait_acked(50)  # the load goes on over the grown topic
    assert not load.errors, load.errors

    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    assert _count(sim, topic) == 4
    led = wf.steps.get(name="verify_partitions").output["partitions_led"]
    assert sorted(led) == ["2", "3"] and all(b >= 0 for b in led.values())
    [event] = AuditEvent.objects.filter(workflow=wf, action=CREATE_PARTITIONS)
    assert event.outcome == AuditOutcome.SUCCESS
    assert event.target_id == f"{cluster.name}/{topic}"
    assert event.before == {"backend": "kafka", "partition_count": 2}
    assert event.after == {"partition_count": 4}
    assert verify_chain().ok


def test_kafka_cannot_remove_partitions_so_shrink_and_a_lower_count_are_refused(
    sim, worker, cluster, api, operator
):
    topic = "kept-kafka"
    _create(sim, topic, 3)
    body = {"cluster": cluster.name, "topic": topic, "partitions": 2}
    with pytest.raises(WorkflowError, match=r"Kafka never shipped KIP-253.*cannot be removed"):
        preview_plan("shrink_partitions", body)
    assert request_outcome(api, operator, {**body, "kind": "shrink_partitions"}) == (
        400,
        "INVALID_REQUEST",
    )
    assert request_outcome(api, operator, {**body, "kind": "expand_partitions"}) == (
        "refused",
        "INVALID_PARTITIONS",
    )
    refused = Workflow.objects.get(kind="expand_partitions", state=WorkflowState.REFUSED)
    assert "Kafka cannot remove partitions" in refused.error_message
    unknown = {"kind": "expand_partitions", "cluster": cluster.name, "topic": "nope"}
    assert request_outcome(api, operator, {**unknown, "partitions": 4}) == (
        "refused",
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    assert _count(sim, topic) == 3
