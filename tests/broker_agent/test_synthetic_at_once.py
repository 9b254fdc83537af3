"""The synthetic fleet answers a topic's ListOffsets and a broker's DescribeLogDirs at once
(``SyntheticBroker.list_offsets`` and ``log_dir_rows``: 400,000 and 600,000 partitions a first
sync of the fleet): the same answers as the handlers' own path, partition by partition, for
every broker, spec, error case and filter."""

from __future__ import annotations

from types import SimpleNamespace

from broker_agent.kafka_wire.logdirs import _by_dir
from broker_agent.kafka_wire.offsets import _partition, _Topic
from broker_agent.kafka_wire.synthetic import SyntheticKafka
from broker_agent.simulator.synthetic import SyntheticCluster

SPECS = (-1, -2, -4, -5)


def _fleet() -> SyntheticKafka:
    c = SyntheticCluster("c", brokers=5, log_dirs=2, topics=4, partitions_per_topic=10)
    c.churn(0.5, seed=7)  # leaders, epochs and offsets off their first values
    c.alter_partition_count(c.topics[1], 14)  # an expanded topic: partitions past the layout
    return SyntheticKafka(c, b"secret", [("127.0.0.1", 0)] * 5)


def _requests(spec: int, epochs: dict[int, int]) -> list[SimpleNamespace]:
    """Every partition (and two unknown ones), each with the epoch the client last saw:
    the current one, none, an older (fenced) or a newer (unknown) one."""
    out = []
    for p in range(-1, 16):
        epoch = epochs.get(p, 0)
        current = (epoch, -1, epoch - 1, epoch + 1)[p % 4]
        out.append(SimpleNamespace(partition_index=p, timestamp=spec, current_leader_epoch=current))
    return out


def test_a_topics_offsets_at_once_are_the_handlers_answers_partition_by_partition():
    fleet = _fleet()
    c = fleet.cluster
    seen_errors = set()
    for broker in fleet.brokers.values():
        for name in c.topics:
            t = c._index[name]
            epochs = {p: c.leader_epoch[i] for p, i in enumerate(c.topic_range(t))}
            for spec in SPECS:
                requests = _requests(spec, epochs)
                topic = _Topic(broker, name)
                one_by_one = [_partition(broker, topic, r) for r in requests]
                assert broker.list_offsets(topic, requests) == one_by_one, (broker, name, spec)
                seen_errors.update(row[1] for row in one_by_one)
    assert seen_errors == {0, 3, 6, 74, 75}  # none, unknown, not leader, fenced, unknown epoch


def test_a_spec_it_does_not_answer_at_once_is_left_to_the_handler():
    fleet = _fleet()
    broker = fleet.brokers[1]
    name = fleet.cluster.topics[0]
    requests = [SimpleNamespace(partition_index=0, timestamp=-3, current_leader_epoch=-1)]
    assert broker.list_offsets(_Topic(broker, name), requests) is None


class _OneByOne:
    """A synthetic broker without its at-once answers: the handlers' generic path."""

    def __init__(self, broker):
        self._broker = broker

    def __getattr__(self, name):
        if name in ("log_dir_rows", "list_offsets"):
            raise AttributeError(name)
        return getattr(self._broker, name)


def test_a_brokers_log_dirs_at_once_are_the_handlers_answer_replica_by_replica():
    fleet = _fleet()
    c = fleet.cluster
    some = {(c.topics[1], p) for p in (0, 3, 12, 13)} | {(c.topics[2], 5), ("nope", 0)}
    for broker in fleet.brokers.values():
        for wanted in (None, some):
            for version in (1, 4):
                at_once = _by_dir(broker, wanted, version)
                assert at_once == _by_dir(_OneByOne(broker), wanted, version)
                assert at_once  # every broker hosts some of them
