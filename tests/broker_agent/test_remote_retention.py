"""The agent's own remote expiration (internal mode) applies Kafka's RLMExpirationTask rules as
the Spark planner does: the leader-epoch lineage check, ``maxTimestampMs <= now - retention.ms``,
the size breach; and Kafka's LogConfig refuses local.retention.* above retention.*."""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.remote_retention import plan_expiration, validate_local_retention
from spark_tasks.schema import PlanReason
from tests.spark_tasks.kafka_cases import CASES

NOW = 1_700_000_000_000
HOUR = 3_600_000
FINISHED = RemoteSegmentState.COPY_SEGMENT_FINISHED


def _seg(sid, start, end, epochs, ts=NOW, size=10, state=FINISHED, tiered_epoch=0):
    return {
        "segment_id": sid,
        "start_offset": start,
        "end_offset": end,
        "max_timestamp_ms": ts,
        "size_bytes": size,
        "segment_leader_epochs": [{"epoch": e, "start_offset": o} for e, o in epochs],
        "state": state,
        "tiered_epoch": tiered_epoch,
    }


def _plan(segments, leader_epochs, *, lso=0, leo=1000, ms=-1, size=-1, local=0, fence=0):
    doomed = plan_expiration(
        segments,
        log_start_offset=lso,
        log_end_offset=leo,
        leader_epochs=leader_epochs,
        retention_ms=ms,
        retention_bytes=size,
        local_untiered_bytes=local,
        now_ms=NOW,
        purge_below_tiered_epoch=fence,
    )
    return [s["segment_id"] for s in doomed]


def test_agent_expiration_skips_a_segment_outside_the_leader_epoch_lineage_and_goes_on():
    """``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs`` in ``cleanupExpiredRemoteLogSegments``:
    a segment of an epoch the leader's cache does not hold (an unclean election's divergent
    data) is neither expired nor counted, and the scan goes on past it. The agent used to expire
    every readable segment in offset order."""
    lineage = ((0, 0), (1, 100), (2, 200))
    old = NOW - 2 * HOUR
    segs = [
        _seg("in0", 0, 99, [(0, 0)], ts=old),
        _seg("out", 50, 120, [(0, 50), (5, 60)], ts=old),  # epoch 5: not in the lineage
        _seg("in1", 100, 199, [(1, 100)], ts=old),
        _seg("in2", 200, 299, [(2, 200)]),
    ]
    assert _plan(segs, lineage, leo=300, ms=HOUR) == ["in0", "in1"]
    # by size too: the divergent segment's bytes do not count toward the breach
    assert _plan(segs, lineage, leo=300, size=20) == ["in0"]
    # an empty leader-epoch cache plans nothing, as Kafka's loop does not run
    assert _plan(segs, (), leo=300, ms=HOUR) == []


@pytest.mark.parametrize(("age", "expires"), [(HOUR, True), (HOUR + 1, True), (HOUR - 1, False)])
def test_agent_expiration_expires_a_segment_exactly_retention_ms_old(age, expires):
    """``RemoteLogRetentionHandler.isSegmentBreachedByRetentionTime``: ``maxTimestampMs <=
    now - retention.ms`` (the same function as the Spark planners)."""
    segs = [_seg("a", 0, 99, [(0, 0)], ts=NOW - age), _seg("b", 100, 199, [(0, 0)])]
    assert _plan(segs, ((0, 0),), ms=HOUR) == (["a"] if expires else [])


def test_agent_expiration_leaves_fenced_segments_to_the_purge_and_stops_at_a_copy():
    old = NOW - 2 * HOUR
    segs = [
        _seg("fenced", 0, 99, [(0, 0)], ts=old, tiered_epoch=0),
        _seg("a", 100, 199, [(0, 0)], ts=old, tiered_epoch=1),
        _seg(
            "copying",
            200,
            299,
            [(0, 0)],
            ts=old,
            state=RemoteSegmentState.COPY_SEGMENT_STARTED,
            tiered_epoch=1,
        ),
        _seg("b", 300, 399, [(0, 0)], ts=old, tiered_epoch=1),
    ]
    assert _plan(segs, ((0, 0),), ms=HOUR, fence=1) == ["a"]


AGENT_REASONS = {PlanReason.RETENTION_TIME, PlanReason.RETENTION_SIZE, PlanReason.LOG_START_OFFSET}
#: What the agent leaves to other steps: the unreferenced sweep (Spark only) and an old
#: COPY_SEGMENT_STARTED, which the agent deletes as a dangling copy instead of judging it.
NOT_THE_AGENTS = {"unreferenced_sweep", "stale_copy_started_judged"}


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name not in NOT_THE_AGENTS], ids=lambda c: c.name
)
def test_agent_expiration_agrees_with_the_kafka_cases(case):
    """The Spark planner's Kafka cases (``tests/spark_tasks/kafka_cases.py``, each naming the
    RemoteLogManagerTest it mirrors) give the same time / size / log-start-offset deletions when
    the agent plans them (DELETE_SEGMENT_STARTED retries are its separate clean-up)."""
    p = case.partition
    segs = [
        _seg(
            s.segment_id,
            s.start_offset,
            s.end_offset,
            s.leader_epochs,
            s.max_timestamp_ms,
            s.size_bytes,
            s.state,
            s.tiered_epoch,
        )
        for s in case.segments
    ]
    doomed = plan_expiration(
        segs,
        log_start_offset=p.log_start_offset,
        log_end_offset=p.log_end_offset,
        leader_epochs=p.leader_epochs,
        retention_ms=p.retention_ms,
        retention_bytes=p.retention_bytes,
        local_untiered_bytes=p.local_untiered_bytes,
        now_ms=case.now_ms,
    )
    expected = sorted(sid for sid, reason in case.expected.items() if reason in AGENT_REASONS)
    assert sorted(s["segment_id"] for s in doomed) == expected, case.mirrors
    new_lso = max([p.log_start_offset] + [s["end_offset"] + 1 for s in doomed])
    assert new_lso == case.expected_lso, case.mirrors


@pytest.mark.parametrize(
    ("configs", "says"),
    [
        (
            {"retention.bytes": "1000", "local.retention.bytes": "1001"},
            "Invalid value 1001 for configuration local.retention.bytes: Value must not be more "
            "than retention.bytes property value: 1000",
        ),
        (
            {"retention.bytes": "1000", "local.retention.bytes": "-1"},
            "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as "
            "retention.bytes value is set as 1000.",
        ),
        (
            {"retention.ms": "60000", "local.retention.ms": "60001"},
            "Invalid value 60001 for configuration local.retention.ms: Value must not be more "
            "than retention.ms property value: 60000",
        ),
        (  # retention.ms defaults to 7 days
            {"local.retention.ms": "604800001"},
            "Value must not be more than retention.ms property value: 604800000",
        ),
        ({"local.retention.ms": "-1"}, "Value must not be -1 as retention.ms value is set"),
    ],
)
def test_local_retention_above_retention_is_refused_on_a_tiered_topic(configs, says):
    """``LogConfig.validateRemoteStorageRetentionSize`` / ``validateRemoteStorageRetentionTime``
    (run by ``validateTopicLogConfigValues`` when remote.storage.enable is true)."""
    with pytest.raises(ValueError, match=says):
        validate_local_retention({"remote.storage.enable": "true", **configs})
    validate_local_retention(configs)  # not tiered: Kafka does not check


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.bytes": "1000", "local.retention.bytes": "1000"},
        {"retention.bytes": "1000", "local.retention.bytes": "-2"},
        {"retention.bytes": "-1", "local.retention.bytes": "5000"},
        {"retention.bytes": "-1", "local.retention.bytes": "-1"},
        {"retention.ms": "-1", "local.retention.ms": "999999999999"},
        {"retention.ms": "60000", "local.retention.ms": "0"},
    ],
)
def test_local_retention_within_retention_or_unlimited_retention_is_accepted(configs):
    validate_local_retention({"remote.storage.enable": "true", **configs})


def test_the_controller_refuses_local_retention_above_retention_on_create_and_alter(tmp_path):
    """The simulated controller applies ``LogConfig.validateRemoteStorageRetention*`` to the
    topic's configs after the change: INVALID_CONFIG on CreateTopics and on AlterConfigs."""
    from broker_agent.contract.errors import ApiError
    from broker_agent.contract.models import (
        AlterConfigsRequest,
        BrokerHeartbeat,
        CreateTopicRequest,
    )
    from broker_agent.simulator.controller import Controller

    c = Controller(str(tmp_path / "controller"), "retention-test")
    c.heartbeat(BrokerHeartbeat(broker_id=1, url="http://127.0.0.1:1"))

    def create(name, **configs):
        return c.create_topic(
            CreateTopicRequest(name=name, partitions=1, replication_factor=1, configs=configs)
        )

    tiered = {"remote.storage.enable": "true"}
    with pytest.raises(ApiError) as refused:
        create("t", **tiered, **{"retention.bytes": "4096", "local.retention.bytes": "8192"})
    assert (refused.value.status, refused.value.error) == (400, "INVALID_CONFIG")
    assert "must not be more than retention.bytes property value: 4096" in refused.value.message
    assert "t" not in c.topics

    create("t", **tiered, **{"retention.bytes": "8192", "local.retention.bytes": "8192"})
    with pytest.raises(ApiError) as refused:  # lowering retention.bytes below the local one
        c.alter_configs("t", AlterConfigsRequest(configs={"retention.bytes": "4096"}))
    assert refused.value.error == "INVALID_CONFIG"
    assert c.topics["t"]["configs"]["retention.bytes"] == "8192"
    c.alter_configs("t", AlterConfigsRequest(configs={"local.retention.bytes": None}))  # -> -2
    c.alter_configs("t", AlterConfigsRequest(configs={"retention.bytes": "4096"}))

    # a topic that is not tiered is not checked, as in Kafka
    create("plain", **{"retention.bytes": "4096", "local.retention.bytes": "8192"})


def test_a_broker_applies_the_controllers_disable_policy_and_refuses_another():
    """KIP-950's DisableRemoteTopic carries no policy (a broker reads the controller's): a command
    naming a policy other than the controller's disablement's is INVALID_REQUEST; none applies
    the controller's."""
    from broker_agent.contract import kip950
    from broker_agent.contract.errors import ApiError

    st = {"tiered_epoch": 3, "tiered_state": "DISABLING", "disable_policy": "delete", "configs": {}}
    assert kip950.broker_disable_policy("t", st, "delete") == "delete"
    assert kip950.broker_disable_policy("t", st, None) == "delete"
    with pytest.raises(ApiError) as refused:
        kip950.broker_disable_policy("t", st, "retain")
    assert (refused.value.status, refused.value.error) == (400, "INVALID_REQUEST")
    assert refused.value.extra == {"tiered_epoch": 3, "policy": "delete"}
    assert kip950.broker_disable_policy("t", dict(st, disable_policy=None), None) == "retain"
