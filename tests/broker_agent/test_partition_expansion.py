"""Acceptance 4: KIP-253 partition expansion and deletion on the simulated cluster."""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentError
from broker_agent.contract.hashing import murmur2, parent_partition, partition_for_key, to_positive

from .conftest import wait_until

pytestmark = pytest.mark.integration


def test_controller_lookup_equals_default_partitioner(sim_factory):
    sim = sim_factory(1, 1)
    sim.controller.create_topic("k", 6, 1)
    for key in ["21", "foobar", "abc", "a-little-bit-long-string"]:
        res = sim.controller.partition_for_key("k", key)
        assert res["partition"] == to_positive(murmur2(key.encode())) % 6


def test_expand_shrink_and_stale_producer(sim_factory):
    sim = sim_factory(2, 1)
    sim.controller.create_topic("lh", 2, 2)
    before = sim.controller.topic("lh")
    epochs_before = {p.partition: p.leader_epoch for p in before.partitions}

    t = sim.controller.alter_partition_count("lh", 3)
    assert (t.initial_partition_count, t.undeleted_partition_count) == (2, 3)
    new = next(p for p in t.partitions if p.partition == 2)
    # leaderEpochAfterCreation records the lower partitions' epochs before they were bumped
    assert new.leader_epoch_after_creation == {str(k): v for k, v in epochs_before.items()}
    assert all(
        p.leader_epoch == epochs_before[p.partition] + 1 for p in t.partitions if p.partition < 2
    )
    # the only keys that move are those of the parent the formula names
    assert parent_partition(2, 2) == 0
    for i in range(300):
        key = f"key-{i}".encode()
        old, now = partition_for_key(key, 2, 2), partition_for_key(key, 2, 3)
        assert now == old or (old == 0 and now == 2)
        assert sim.controller.partition_for_key("lh", key.decode())["partition"] == now

    # a producer holding the old count is refused, refreshes and retries
    wait_until(lambda: all(p.leader >= 0 for p in sim.controller.topic("lh").partitions), 15)
    md = sim.controller.topic("lh")
    p0 = next(p for p in md.partitions if p.partition == 0)
    wait_until(
        lambda: (
            sim.replica(p0.leader, "lh", 0) is not None
            and sim.agent(p0.leader).snapshot() is not None
        ),
        10,
    )

    def stale_refused():
        try:
            sim.agent(p0.leader).produce(
                "lh", 0, [{"key": "a", "value": "x"}], undeleted_partition_count=2
            )
        except AgentError as exc:
            return exc.error == ErrorCode.INVALID_PARTITION_METADATA
        return False

    wait_until(stale_refused, 10, what="INVALID_PARTITION_METADATA for a stale count")
    producer = sim.producer()
    producer.metadata = sim.controller.metadata()
    producer.metadata.topics = [
        x.model_copy(update={"undeleted_partition_count": 2}) if x.name == "lh" else x
        for x in producer.metadata.topics
    ]  # a producer whose metadata predates the expansion
    placed = producer.send("lh", [{"key": f"key-{i}", "value": f"v{i}"} for i in range(50)])
    assert all(
        p == partition_for_key(f"key-{i}".encode(), 2, 3) for i, (p, _o) in enumerate(placed)
    )

    # shrink never below the initial count
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_partition_count("lh", 1)
    assert exc.value.error == ErrorCode.INVALID_PARTITIONS

    # produce to partition 2 so it is not empty, then shrink: 2 is marked for deletion
    p2 = next(p for p in sim.controller.topic("lh").partitions if p.partition == 2)
    resp = sim.agent(p2.leader).produce(
        "lh", 2, [{"key": None, "value": "last"}], undeleted_partition_count=3
    )
    t = sim.controller.alter_partition_count("lh", 2)
    marked = next(p for p in t.partitions if p.partition == 2)
    assert marked.marked_for_deletion and marked.leader_epoch_before_deletion
    # expansion is refused while a partition is marked for deletion
    with pytest.raises(AgentError) as exc:
        sim.controller.alter_partition_count("lh", 4)
    assert exc.value.error == ErrorCode.PARTITIONS_MARKED_FOR_DELETION
    # not removed while it holds data ...
    assert any(p.partition == 2 for p in sim.controller.topic("lh").partitions)
    # ... removed once empty (log start offset == log end offset)
    sim.agent(p2.leader).publish_log_start_offset("lh", 2, resp.base_offset + 1)
    wait_until(
        lambda: all(p.partition != 2 for p in sim.controller.topic("lh").partitions),
        15,
        what="drained partition removed",
    )
    t = sim.controller.alter_partition_count("lh", 3)  # expansion allowed again
    assert t.undeleted_partition_count == 3
