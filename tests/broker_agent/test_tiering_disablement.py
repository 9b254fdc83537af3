"""Acceptance 3: KIP-950 tiering disablement and re-enablement on the simulated cluster."""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import ErrorCode, RemoteSegmentState, TaskState, TieredState
from broker_agent.contract.client import AgentError

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
    agent_id = t.partitions[0].leader
    agent = sim.agent(agent_id)

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

    # the controller's disablement applies retain: a broker refuses to apply another policy
    with pytest.raises(AgentError) as exc:
        agent.disable_remote_topic("t", t.topic_id, 1, "delete", idempotency_key="k-delete")
    assert (exc.value.status, exc.value.error) == (400, ErrorCode.INVALID_REQUEST)
    assert exc.value.body["policy"] == "retain"
    assert sim.replica(agent_id, "t").tiered_state != TieredState.DISABLED  # nothing applied

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


def _code(call, *args, **kw) -> str:
    with pytest.raises(AgentError) as exc:
        call(*args, **kw)
    return exc.value.error


def test_agents_apply_tiering_commands_only_at_the_controllers_current_epoch(sim_factory):
    """KIP-950 two-sided fencing (#14 gap 3): a broker applies DisableRemoteTopic /
    EnableRemoteTopic only at the controller's current tiered epoch of a DISABLING /
    re-enabled topic. A future epoch is refused (UNKNOWN_TIERED_EPOCH) like a stale one, and
    so is a command for a state the controller is not in; nothing is applied by a refusal."""
    sim = sim_factory(1, 1)
    sim.controller.create_topic("f", 1, 1, {"remote.storage.enable": "true"})
    t = sim.controller.topic("f")
    agent = sim.agent(1)
    # ENABLED at epoch 0: no disablement was started, so epoch 1 is from the future
    assert _code(agent.disable_remote_topic, "f", t.topic_id, 1, "retain") == (
        ErrorCode.UNKNOWN_TIERED_EPOCH
    )
    assert _code(agent.disable_remote_topic, "f", t.topic_id, 0, "retain") == (
        ErrorCode.STALE_TIERED_EPOCH
    )

    t = sim.controller.start_disable("f", "retain")  # DISABLING at epoch 1
    assert _code(agent.disable_remote_topic, "f", t.topic_id, 2, "retain") == (
        ErrorCode.UNKNOWN_TIERED_EPOCH
    )
    assert _code(agent.enable_remote_topic, "f", t.topic_id, 1) == (
        ErrorCode.INVALID_STATE_TRANSITION  # the controller is disabling, not re-enabling
    )
    # at once after the controller moved (the broker asks it when its metadata is behind)
    done = agent.disable_remote_topic("f", t.topic_id, 1, "retain", idempotency_key="d1")
    assert done.applied is True  # the refusals before applied nothing
    assert agent.disable_remote_topic("f", t.topic_id, 1, "retain").applied is False  # re-send
    t = sim.controller.complete_disable("f", expected_tiered_epoch=1)
    assert t.tiered_state == TieredState.DISABLED

    assert _code(agent.enable_remote_topic, "f", t.topic_id, 1) == (
        ErrorCode.INVALID_STATE_TRANSITION  # not re-enabled at the controller yet
    )
    t = sim.controller.enable("f", expected_tiered_epoch=1)
    assert _code(agent.enable_remote_topic, "f", t.topic_id, 2) == ErrorCode.UNKNOWN_TIERED_EPOCH
    assert agent.enable_remote_topic("f", t.topic_id, 1, idempotency_key="e1").applied is True
    # a repeat of an applied key is answered as before, whatever the controller did since
    sim.controller.start_disable("f", "delete")
    assert agent.enable_remote_topic("f", t.topic_id, 1, idempotency_key="e1").applied is False


def test_the_policy_applied_is_the_policy_shown(sim_factory):
    """KIP-950 fidelity (#14 gap 4): a remote.log.disable.policy in the configs is the one the
    next disablement applies when it names none, and it is cleared on re-enable; a policy-only
    change is taken by an ENABLED topic only."""
    sim = sim_factory(1, 1)
    ctl = sim.controller
    ctl.create_topic("p", 1, 1, {"remote.storage.enable": "true"})
    policy = "remote.log.disable.policy"
    # set on the ENABLED topic, for its next disablement
    assert ctl.alter_configs("p", {policy: "delete"}).configs[policy] == "delete"
    t = ctl.start_disable("p")  # names no policy: the one shown is applied
    assert (t.tiered_state, t.disable_policy, t.configs[policy]) == (
        "DISABLING",
        "delete",
        "delete",
    )
    assert _code(ctl.alter_configs, "p", {policy: "retain"}) == (
        ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
    )
    sim.agent(1).disable_remote_topic("p", t.topic_id, 1, "delete")
    t = ctl.complete_disable("p", expected_tiered_epoch=1)
    assert (t.tiered_state, t.disable_policy) == ("DISABLED", "delete")
    # DISABLED: the configs keep showing the policy that was applied
    for change in (
        {policy: "retain"},
        {policy: None},
        {"remote.storage.enable": "false", policy: "retain"},
    ):
        assert _code(ctl.alter_configs, "p", change) == ErrorCode.INVALID_CONFIG, change
    assert ctl.topic("p").configs[policy] == "delete"
    # re-enable clears the spent policy: nothing shown that the next disablement would not apply
    t = ctl.enable("p", expected_tiered_epoch=1)
    assert t.tiered_state == "ENABLED" and policy not in t.configs and t.disable_policy is None
    # AlterConfigs remote.storage.enable=false without a policy: the configs' one, else retain
    ctl.alter_configs("p", {policy: "retain"})
    t = ctl.alter_configs("p", {"remote.storage.enable": "false"})
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("DISABLING", 2, "retain")
    assert t.configs[policy] == "retain"
