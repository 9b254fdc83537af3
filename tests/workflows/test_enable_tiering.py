"""``enable_tiering`` end to end (KIP-950 re-enablement): refused for compacted topics (by the
worker's planning) and with a policy (at once); ENABLED at the controller with the tiered epoch kept, EnableRemoteTopic on every hosting
broker, then new segments tier with the current epoch and offsets continue without a gap."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import TieredState
from broker_agent.contract.hashing import partition_for_key
from console.models import Partition
from workflows.choices import WorkflowState
from workflows.kinds.tiering import TieringAction
from workflows.models import Workflow, WorkflowStep

from .conftest import wait_for
from .tiering_sim import (
    CLUSTER,
    acks_per_broker,
    register,
    request_outcome,
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


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def lab(sim):
    register(sim)
    return sim


def _body(**fields):
    return {"kind": "enable_tiering", "cluster": CLUSTER, **fields}


def test_compacted_topics_and_a_policy_are_refused_and_nothing_changes(lab, api, operator, worker):
    sim = lab
    sim.cli(
        "create-topic",
        "changelog",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "cleanup.policy=compact",
    )
    tiered_topic(sim, "events", partitions=1, records=40)
    sim.cli("disable-tiering", "events", "--policy", "retain")
    sync()
    compacted = request_outcome(api, operator, _body(topic="changelog"))
    assert compacted == ("refused", "REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC")
    with_policy = request_outcome(api, operator, _body(topic="events", policy="retain"))
    assert with_policy == (400, "INVALID_REQUEST")  # re-enablement takes no policy
    assert list(Workflow.objects.values_list("target", "state")) == [
        ("topic:changelog", WorkflowState.REFUSED)
    ]
    assert not WorkflowStep.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="tiering.").exists()
    assert sim.controller.topic("changelog").tiered_state == TieredState.NONE
    assert sim.controller.topic("events").tiered_state == TieredState.DISABLED


def test_reenable_tiers_new_segments_at_the_current_epoch_without_an_offset_gap(
    lab, api, operator, approver, worker
):
    sim = lab
    tiered_topic(sim, "payments", partitions=2, records=200)
    sim.cli("disable-tiering", "payments", "--policy", "retain")
    sim.cli("produce", "--topic", "payments", "--records", "60", "--keyed", "--batch-size", "20")
    sync()
    created = request_planned(api, operator, _body(topic="payments"))
    plan, info = created["plan"], created["plan_information"]
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert (plan["tiered_state"], plan["tiered_epoch"], plan["brokers"]) == (
        TieredState.DISABLED,
        1,
        [1, 2, 3],
    )
    # retained remote data (information: exact, as of the last sync)
    inventory = Partition.objects.filter(topic__cluster__name=CLUSTER, topic__name="payments")
    assert info["remote_bytes"] == sum(p.remote_bytes for p in inventory) > 0
    assert info["remote_segments"] == sum(p.remote_segments for p in inventory) > 0
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: state_of(created["id"]) in WorkflowState.TERMINAL, 120, "the workflow to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    assert [s["name"] for s in body["steps"]] == [
        "enable_at_controller",
        *["enable_remote_topic"] * 3,
        "verify_tiering",
    ]
    topic = sim.controller.topic("payments")
    assert (topic.tiered_state, topic.tiered_epoch) == (TieredState.ENABLED, 1)  # epoch kept
    assert acks_per_broker(created["id"], TieringAction.ENABLE_REMOTE_TOPIC) == {1: 1, 2: 1, 3: 1}
    verify = Workflow.objects.get(pk=created["id"]).steps.get(name="verify_tiering").output
    assert verify["segment_tiered_epoch"] == 1
    first, last = verify["checked_offsets"]
    assert verify["segment_offsets"][0] <= last <= verify["segment_offsets"][1]
    assert first < verify["segment_offsets"][0]  # the check crossed into the new segment
    # the markers went where KIP-253 linear hashing puts their key, as the plan said
    assert (
        verify["partition"]
        == info["verify_on_partition"]
        == partition_for_key(
            verify["key"].encode(), topic.initial_partition_count, topic.undeleted_partition_count
        )
    )
    assert verify_chain().ok
