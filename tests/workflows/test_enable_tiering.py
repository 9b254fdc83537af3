"""``enable_tiering`` end to end (KIP-950 re-enablement): refused for compacted topics and with a
policy; ENABLED at the controller with the tiered epoch kept, EnableRemoteTopic on every hosting
broker, then new segments tier with the current epoch and offsets continue without a gap."""

from __future__ import annotations

import pytest

from broker_agent.choices import TieredState
from workflows.audit import verify_chain
from workflows.choices import WorkflowState
from workflows.kinds.tiering import TieringAction
from workflows.models import Workflow

from .conftest import wait_for
from .tiering_sim import (
    CLUSTER,
    acks_per_broker,
    register,
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


def _request(api, user, **body):
    return api(user).post("/workflows", {"kind": "enable_tiering", "cluster": CLUSTER, **body})


def test_compacted_topics_and_a_policy_are_refused_and_nothing_changes(lab, api, operator):
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
    compacted = _request(api, operator, topic="changelog")
    assert compacted.status_code == 400
    assert compacted.json()["error"] == "REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC"
    with_policy = _request(api, operator, topic="events", policy="retain")
    assert with_policy.json()["error"] == "INVALID_REQUEST"  # re-enablement takes no policy
    assert not Workflow.objects.exists()
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
    created = _request(api, operator, topic="payments").json()
    plan = created["plan"]
    assert (plan["tiered_state"], plan["tiered_epoch"], plan["brokers"]) == (
        TieredState.DISABLED,
        1,
        [1, 2, 3],
    )
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
    assert verify_chain().ok
