"""Acceptance 3: KIP-950 tiering disablement and re-enablement on the simulated cluster."""

from __future__ import annotations

import pytest

from broker_agent.choices import ErrorCode, RemoteSegmentState, TaskState, TieredState
from broker_agent.client import AgentError

from .conftest import wait_until

pytestmark = pytest.mark.integration

SMALL = ["--segment-bytes", "4096", "--config", "local.retention.bytes=8192"]


def _setup(sim, topic="tiered", records=3000):
    sim.cli(
        "create-topic", topic, "--partitions", "1", "--replication-factor", "3", "--tiered", *SMALL
    )
    sim.cli("produce", "--topic", topic, "--records", str(records), "--keyed")
    leader = sim.partition(topic).leader
    sim.agent(leader).roll(topic, 0)
    wait_until(
        lambda: (
            (r := sim.replica(leader, topic)).remote_log_end_offset == r.log_end_offset - 1
            and r.local_log_start_offset > 0
        ),
        30,
        what="tiered and trimmed",
    )
    return leader


def _produce_and_roll(sim, topic, leader, n=500):
    sim.cli("produce", "--topic", topic, "--records", str(n), "--keyed")
    sim.agent(leader).roll(topic, 0)


def test_retain_stops_copier_keeps_remote_readable_and_reenable_continues_offsets(sim_factory):
    sim = sim_factory(3, 1)
    leader = _setup(sim)
    before = sim.replica(leader, "tiered")
    out = sim.cli("disable-tiering", "tiered", "--policy", "retain")
    assert '"tiered_state": "DISABLED"' in out.stdout
    t = sim.controller.topic("tiered")
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == (TieredState.DISABLED, 1, "retain")

    r = sim.replica(leader, "tiered")
    assert r.copier_state == TaskState.STOPPED
    assert r.expiration_state == TaskState.RUNNING  # retain: expiration keeps running
    # remote data still readable from offset 0
    fetched = sim.agent(leader).fetch("tiered", 0, 0, max_records=5)
    assert fetched.records[0].offset == 0 and fetched.remote_records == 5

    _produce_and_roll(sim, "tiered", leader)
    wait_until(
        lambda: sim.replica(leader, "tiered").log_end_offset == before.log_end_offset + 500, 10
    )
    assert sim.replica(leader, "tiered").remote_log_end_offset == before.remote_log_end_offset

    sim.cli("enable-tiering", "tiered")
    assert sim.controller.topic("tiered").tiered_state == TieredState.ENABLED
    wait_until(
        lambda: (x := sim.replica(leader, "tiered")).remote_log_end_offset == x.log_end_offset - 1,
        30,
        what="copier resumed after re-enable",
    )
    rows = sorted(sim.agent(leader).inventory("tiered"), key=lambda s: s.start_offset)
    old = [s for s in rows if s.tiered_epoch == 0]
    new = [s for s in rows if s.tiered_epoch == 1]
    assert old and new, "segments tiered after the re-enable carry the new epoch"
    assert new[0].start_offset == old[-1].end_offset + 1, "offsets continue without a gap"
    out = sim.cli("consume", "--topic", "tiered", "--verify")
    assert "lost: 0" in out.stdout and "duplicated: 0" in out.stdout


def test_delete_moves_log_start_fences_remote_segments_and_purges_them(sim_factory):
    sim = sim_factory(3, 1)
    leader = _setup(sim)
    before = sim.replica(leader, "tiered")
    sim.cli("disable-tiering", "tiered", "--policy", "delete")
    r = sim.replica(leader, "tiered")
    assert r.copier_state == TaskState.STOPPED and r.expiration_state == TaskState.STOPPED
    assert r.log_start_offset == r.local_log_start_offset == before.local_log_start_offset
    with pytest.raises(AgentError) as exc:
        sim.agent(leader).fetch("tiered", 0, 0)
    assert exc.value.error == ErrorCode.OFFSET_OUT_OF_RANGE  # unreadable at once
    states = sim.agent(leader).partition_states("tiered")
    assert states[0].purge_below_tiered_epoch == 1 and states[0].disable_policy == "delete"
    # internal expiration mode: the agent purges the fenced segments itself
    wait_until(
        lambda: all(
            s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED
            for s in sim.agent(leader).inventory("tiered")
        ),
        20,
        what="fenced segments purged",
    )
    sim.cli("enable-tiering", "tiered")
    _produce_and_roll(sim, "tiered", leader)
    wait_until(
        lambda: any(
            s.tiered_epoch == 1 and s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
            for s in sim.agent(leader).inventory("tiered")
        ),
        30,
        what="new segments at tiered epoch 1",
    )
    fetched = sim.agent(leader).fetch("tiered", 0, r.log_start_offset, max_records=3)
    assert fetched.records[0].offset == r.log_start_offset


def test_fencing_idempotence_and_kip_error_codes(sim_factory):
    sim = sim_factory(3, 1)
    sim.controller.create_topic("t", 1, 3, {"remote.storage.enable": "true"})
    t = sim.controller.topic("t")
    agent = sim.agent(t.partitions[0].leader)

    with pytest.raises(AgentError) as exc:
        sim.controller.start_disable("t", policy="shred")
    assert exc.value.error == ErrorCode.INVALID_REQUEST
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_configs("t", {"remote.log.disable.policy": "shred"})
    assert exc.value.error == ErrorCode.INVALID_REQUEST

    t = sim.controller.start_disable("t")  # policy defaults to retain
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("DISABLING", 1, "retain")
    with pytest.raises(AgentError) as exc:
        sim.controller.start_disable("t", policy="delete")
    assert exc.value.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_configs("t", {"remote.storage.enable": "false"})
    assert exc.value.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
    with pytest.raises(AgentError) as exc:
        sim.controller.complete_disable("t")
    assert exc.value.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_INCOMPLETE

    first = agent.disable_remote_topic("t", t.topic_id, 1, "retain", idempotency_key="k1")
    assert first.applied is True
    again = agent.disable_remote_topic("t", t.topic_id, 1, "retain", idempotency_key="k1")
    assert again.applied is False  # applied once
    with pytest.raises(AgentError) as exc:
        agent.disable_remote_topic("t", t.topic_id, 0, "retain", idempotency_key="old")
    assert exc.value.error == ErrorCode.STALE_TIERED_EPOCH
    with pytest.raises(AgentError) as exc:
        agent.enable_remote_topic("t", t.topic_id, 0, idempotency_key="old-enable")
    assert exc.value.error == ErrorCode.STALE_TIERED_EPOCH
    with pytest.raises(AgentError) as exc:
        sim.controller.complete_disable("t", expected_tiered_epoch=0)
    assert exc.value.error == ErrorCode.STALE_TIERED_EPOCH

    # re-enable takes no policy
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_configs(
            "t", {"remote.storage.enable": "true", "remote.log.disable.policy": "retain"}
        )
    assert exc.value.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS


def test_compacted_topic_cannot_be_tiered(sim_factory):
    sim = sim_factory(1, 1)
    with pytest.raises(AgentError) as exc:
        sim.controller.create_topic(
            "c", 1, 1, {"cleanup.policy": "compact", "remote.storage.enable": "true"}
        )
    assert exc.value.error == ErrorCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC
    sim.controller.create_topic("c", 1, 1, {"cleanup.policy": "compact"})
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_configs("c", {"remote.storage.enable": "true"})
    assert exc.value.error == ErrorCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC
