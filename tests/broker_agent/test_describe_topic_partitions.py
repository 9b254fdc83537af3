"""The simulated brokers answer DescribeTopicPartitions (KIP-966, api key 75) as Kafka 4.x's
handler does: the same leaders, ISR and offline replicas as Metadata, topics by name from the
cursor on, at most the limit asked (capped at 2000) with ``next_cursor`` at the first partition
left out, an unknown topic named UNKNOWN_TOPIC_OR_PARTITION, a cursor outside the topics named
INVALID_REQUEST; and ELR and last known ELR empty, which is all the simulated controller can
say (it keeps no ELR: see ``broker_agent.kafka_wire.topic_partitions``)."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from .conftest import wait_until
from .test_kafka_listener import FAST, _agents_view, ask, kafka_ports

pytestmark = pytest.mark.integration

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 0, 3, 42
T = DescribeTopicPartitionsRequest.TopicRequest
C = DescribeTopicPartitionsRequest.Cursor


def _describe(port: int, names=(), limit: int = 2000, cursor=None):
    request = DescribeTopicPartitionsRequest(
        topics=[T(name=n) for n in names], response_partition_limit=limit, cursor=cursor
    )
    return ask(port, request, 0, DescribeTopicPartitionsResponse)


def _view(resp) -> dict:
    return {
        t.name: {
            p.partition_index: (
                p.leader_id,
                p.leader_epoch,
                list(p.replica_nodes),
                list(p.isr_nodes),
                list(p.offline_replicas),
            )
            for p in t.partitions
        }
        for t in resp.topics
    }


def _pages(port: int, limit: int, names=()) -> list[list[tuple[str, int]]]:
    """Every page of the answer, following ``next_cursor``: each page's (topic, partition)s."""
    pages, cursor = [], None
    while True:
        resp = _describe(port, names, limit, cursor)
        pages.append([(t.name, p.partition_index) for t in resp.topics for p in t.partitions])
        if resp.next_cursor is None:
            return pages
        cursor = C(
            topic_name=resp.next_cursor.topic_name,
            partition_index=resp.next_cursor.partition_index,
        )


def test_describe_topic_partitions_pages_metadatas_view_by_cursor_with_empty_elr(sim_factory):
    sim = sim_factory(3, 1, *FAST)
    sim.controller.create_topic("orders", 5, 3, configs={"min.insync.replicas": "2"})
    sim.controller.create_topic("audit", 2, 2)
    sim.controller.create_topic("__consumer_offsets", 1, 3)
    ports = kafka_ports(sim)
    port = ports[1]
    wait_until(lambda: _view(_describe(port)) == _agents_view(sim), 20, what="the same view")

    whole = _describe(port)
    assert [t.name for t in whole.topics] == ["__consumer_offsets", "audit", "orders"]
    assert whole.next_cursor is None
    assert all(t.error_code == NONE for t in whole.topics)
    assert {t.name: t.is_internal for t in whole.topics}["__consumer_offsets"] is True
    md = ask(port, MetadataRequest(topics=None), 12, MetadataResponse)
    assert {t.name: t.topic_id for t in whole.topics} == {t.name: t.topic_id for t in md.topics}
    # the simulated controller keeps no ELR: empty, as Kafka 4.x with ELR not enabled
    for t in whole.topics:
        for p in t.partitions:
            assert (p.eligible_leader_replicas, p.last_known_elr) == ([], [])

    # three partitions a page: the cursor walks every partition once, in name order
    everything = [(t, p) for t, ps in sorted(_agents_view(sim).items()) for p in sorted(ps)]
    pages = _pages(port, 3)
    assert [len(p) for p in pages] == [3, 3, 2]
    assert [tp for page in pages for tp in page] == everything
    # a page ending exactly at a topic's end sends the cursor to the next topic's first one
    first = _describe(port, limit=3)
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("orders", 0)
    # topics named: only those, unknown ones with their error
    named = _describe(port, ["orders", "nope"], limit=4)
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("nope", UNKNOWN_TOPIC_OR_PARTITION),
        ("orders", NONE),
    ]
    assert (named.next_cursor.topic_name, named.next_cursor.partition_index) == ("orders", 4)
    assert _pages(port, 2, ["orders"]) == [
        [("orders", 0), ("orders", 1)],
        [("orders", 2), ("orders", 3)],
        [("orders", 4)],
    ]
    # a cursor on a topic the request does not name is an invalid request
    bad = _describe(port, ["audit"], cursor=C(topic_name="orders", partition_index=0))
    assert [(t.name, t.error_code) for t in bad.topics] == [("audit", INVALID_REQUEST)]

    # a killed broker: every broker answers the leaders Metadata answers, offline replicas too
    sim.cli("kill-broker", "3")
    wait_until(
        lambda: (
            _view(_describe(ports[1])) == _agents_view(sim)
            and all(p.leader_id != 3 for t in _describe(ports[1]).topics for p in t.partitions)
        ),
        20,
        what="leaders moved off broker 3",
    )
    assert _view(_describe(ports[2])) == _view(_describe(ports[1]))
