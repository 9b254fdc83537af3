"""The simulated brokers answer Kafka's write calls (issue #35): CreatePartitions and
ElectLeaders forwarded to the controller, AlterReplicaLogDirs moving a replica between a
broker's own dirs, through kafka-python's KafkaAdminClient (and single requests to a chosen
broker through :func:`ask`), with Kafka 3.9's answers."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from .conftest import Load, wait_until
from .test_kafka_listener import FAST, admin, ask, kafka_ports

pytestmark = pytest.mark.integration

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REQUEST = 0, 3, 37, 42
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 80, 83, 84
PREFERRED, UNCLEAN = 0, 1


def _created(response) -> dict:
    return {r.name: (r.error_code, r.error_message) for r in response.results}


def test_create_partitions_grows_a_topic_through_the_controller_under_produce_load(sim_factory):
    sim = sim_factory(2, 1)
    sim.controller.create_topic("orders", 2, 2)
    with Load(sim, "orders") as load, admin(sim) as a:
        load.wait_acked(40)
        checked = a.create_partitions({"orders": 3}, validate_only=True)
        assert _created(checked) == {"orders": (NONE, None)}
        assert sim.controller.topic("orders").undeleted_partition_count == 2  # nothing changed
        assert _created(a.create_partitions({"orders": 4})) == {"orders": (NONE, None)}
        topic = sim.controller.topic("orders")
        assert topic.undeleted_partition_count == 4
        # KIP-253 (the sim's expansion, not shipped Kafka's): the old partitions' leader epochs
        # were recorded and bumped, so keys that move keep their order
        assert topic.partitions[3].leader_epoch_after_creation == {"0": 0, "1": 0}
        wait_until(
            lambda: len(a.describe_topics(["orders"])[0]["partitions"]) == 4,
            20,
            what="the brokers' metadata caches",
        )
        refused = _created(a.create_partitions({"orders": 4, "nope": 5}, raise_errors=False))
        manual = {"orders": {"count": 5, "assignments": [[1, 2]]}}
        [(code, message)] = _created(a.create_partitions(manual, raise_errors=False)).values()
        load.wait_acked(40)
    assert refused == {
        "orders": (INVALID_PARTITIONS, "Topic already has 4 partition(s)."),
        "nope": (UNKNOWN_TOPIC_OR_PARTITION, None),
    }
    assert code == INVALID_REQUEST and "manual assignments" in message
    with admin(sim) as a:
        shrink = _created(a.create_partitions({"orders": 3}, raise_errors=False))
    assert shrink == {
        "orders": (
            INVALID_PARTITIONS,
            "The topic orders currently has 4 partition(s); 3 would not be an increase.",
        )
    }
    assert sim.controller.topic("orders").undeleted_partition_count == 4  # never shrunk
    load.verify_exactly_once()


def _elect(port: int, election_type: int, topic: str, partition: int = 0) -> int:
    """One ElectLeaders to the broker on ``port``; the partition's error code."""
    T = ElectLeadersRequest.TopicPartitions
    req = ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=[T(topic=topic, partitions=[partition])],
        timeout_ms=10_000,
    )
    resp = ask(port, req, 2, ElectLeadersResponse)
    assert resp.error_code == NONE
    [result] = resp.replica_election_results
    [p] = result.partition_result
    return p.error_code


def test_elect_leaders_preferred_and_unclean_as_kafka_decides_them(sim_factory):
    sim = sim_factory(3, 1, *FAST)
    sim.controller.create_topic("orders", 1, 2)
    preferred, other = sim.partition("orders").replicas
    port = kafka_ports(sim)[next(b for b in (1, 2, 3) if b not in (preferred, other))]
    with admin(sim) as a:
        resp = a.elect_leaders(PREFERRED, {"orders": [0], "nope": [0]}, raise_errors=False)
        codes = {
            (r.topic, p.partition_id): p.error_code
            for r in resp.replica_election_results
            for p in r.partition_result
        }
        assert codes == {
            ("orders", 0): ELECTION_NOT_NEEDED,
            ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
        }
    # null asks for every partition: those not needing an election are left out, as Kafka
    # (kafka-python lists the partitions itself: asked on the wire)
    everything = ask(
        port,
        ElectLeadersRequest(election_type=PREFERRED, topic_partitions=None, timeout_ms=10_000),
        2,
        ElectLeadersResponse,
    )
    assert [(r.topic, r.partition_result) for r in everything.replica_election_results] == [
        ("orders", [])
    ]

    sim.cli("kill-broker", str(preferred))
    wait_until(lambda: sim.partition("orders").leader == other, 20, what="failover")
    assert _elect(port, PREFERRED, "orders") == PREFERRED_LEADER_NOT_AVAILABLE
    assert _elect(port, UNCLEAN, "orders") == ELECTION_NOT_NEEDED  # it has a leader
    sim.cli("start-broker", str(preferred))
    wait_until(
        lambda: preferred in sim.partition("orders").isr, 30, what="the preferred replica in ISR"
    )
    epoch = sim.partition("orders").leader_epoch
    with admin(sim) as a:
        resp = a.elect_leaders(PREFERRED, {"orders": [0]})
    assert resp.replica_election_results[0].partition_result[0].error_code == NONE
    part = sim.partition("orders")
    assert (part.leader, part.leader_epoch) == (preferred, epoch + 1)

    # the ISR shrinks to the preferred replica, which then dies: no clean leader is left
    sim.cli("kill-broker", str(other))
    wait_until(lambda: sim.partition("orders").isr == [preferred], 20, what="ISR shrunk")
    sim.cli("kill-broker", str(preferred))
    wait_until(lambda: sim.partition("orders").leader == -1, 20, what="leaderless")
    assert _elect(port, UNCLEAN, "orders") == ELIGIBLE_LEADERS_NOT_AVAILABLE  # none online
    sim.cli("start-broker", str(other))
    wait_until(
        lambda: other not in sim.controller.metadata().topics[0].partitions[0].offline_replicas,
        20,
        what="the out-of-sync replica back online",
    )
    assert sim.partition("orders").leader == -1  # never elected by itself (no unclean default)
    assert _elect(port, UNCLEAN, "orders") == NONE
    part = sim.partition("orders")
    assert (part.leader, part.isr) == (other, [other])
