"""Acceptance 1: 100k keyed records to a tiered topic; segments roll, closed segments are tiered
with the topic's tiered epoch, local retention deletes only tiered segments, and a fetch from
offset 0 returns every record (part from remote), none lost or duplicated."""

from __future__ import annotations

import itertools

import pytest

from broker_agent.contract.choices import RemoteSegmentState

from .conftest import wait_until

pytestmark = pytest.mark.integration


def test_100k_keyed_records_tier_and_read_back_from_offset_zero(sim_factory):
    sim = sim_factory(3, 2)
    sim.cli(
        "create-topic",
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        "--tiered",
        "--segment-bytes",
        "65536",
        "--config",
        "local.retention.bytes=131072",
    )
    out = sim.cli(
        "produce", "--topic", "orders", "--records", "100000", "--keyed", "--batch-size", "2000"
    )
    assert '"acked": 100000' in out.stdout
    topic = sim.controller.topic("orders")
    for p in topic.partitions:
        sim.agent(p.leader).roll("orders", p.partition)

    def tiered_and_trimmed():
        # every replica: a follower learns of its leader's copies from the remote-log metadata
        # in the store (``broker_agent.simulator.remote``: re-listed every few seconds), as a Kafka
        # follower does from the __remote_log_metadata topic, and only then trims its log
        ok = True
        for p in sim.controller.topic("orders").partitions:
            end = sim.replica(p.leader, "orders", p.partition).log_end_offset
            for b in p.replicas:
                r = sim.replica(b, "orders", p.partition)
                ok &= r.remote_log_end_offset == end - 1 and r.local_log_start_offset > 0
        return ok

    wait_until(tiered_and_trimmed, 90, what="every closed segment tiered and local retention run")

    for p in topic.partitions:
        leader = sim.agent(p.leader)
        rows = list(leader.inventory(topic="orders"))
        mine = sorted((r for r in rows if r.partition == p.partition), key=lambda r: r.start_offset)
        assert len(mine) > 5, "segments rolled by size and were copied"
        assert all(r.state == RemoteSegmentState.COPY_SEGMENT_FINISHED for r in mine)
        assert all(r.tiered_epoch == topic.tiered_epoch == 0 for r in mine)
        # contiguous remote log from offset 0
        assert mine[0].start_offset == 0
        for a, b in itertools.pairwise(mine):
            assert b.start_offset == a.end_offset + 1
        # local retention deleted only segments already tiered
        for b in p.replicas:
            r = sim.replica(b, "orders", p.partition)
            assert 0 < r.local_log_start_offset <= r.remote_log_end_offset + 1
            assert r.log_start_offset == 0
        first = leader.fetch("orders", p.partition, 0, max_records=10)
        assert first.records[0].offset == 0 and first.remote_records == len(first.records)

    out = sim.cli("consume", "--topic", "orders", "--verify")
    assert "lost: 0" in out.stdout and "duplicated: 0" in out.stdout
    assert "consumed: 100000" in out.stdout


def test_a_restarted_broker_keeps_the_topics_segment_bytes(sim_factory):
    """segment.bytes is the topic's, for a log loaded from disk at start too (it used to roll
    at the broker's 1 MiB default after a restart, so nothing tiered for a long while)."""
    sim = sim_factory(1, 1)
    sim.cli(
        "create-topic", "small", "--partitions", "1", "--replication-factor", "1", "--tiered",
        "--segment-bytes", "4096",
    )  # fmt: skip
    sim.cli("produce", "--topic", "small", "--records", "50", "--keyed")
    sim.cli("kill-broker", "1")
    sim.cli("start-broker", "1")
    wait_until(lambda: sim.partition("small").leader == 1, 30, what="broker 1 leads again")
    sim.cli("produce", "--topic", "small", "--records", "2000", "--keyed", "--batch-size", "20")
    wait_until(
        lambda: (r := sim.replica(1, "small")) is not None and r.remote_log_end_offset > 0,
        30,
        what="closed 4 KiB segments copied after the restart",
    )
    logs = list(sim.data.glob("broker-1/logdir-*/small-0/*.log"))
    assert len(logs) > 5  # 100 batches of ~1 KiB roll many 4 KiB segments, not one 1 MiB one
