"""The simulated brokers answer Kafka's write calls (issue #35): CreatePartitions and
ElectLeaders forwarded to the controller, AlterReplicaLogDirs moving a replica between a
broker's own dirs, through kafka-python's KafkaAdminClient (and single requests to a chosen
broker through :func:`ask`), with Kafka 3.9's answers."""

from __future__ import annotations

import os

import pytest
from kafka import TopicPartition, TopicPartitionReplica
from kafka.errors import (
    InvalidReplicationAssignmentError,
    KafkaStorageError,
    LogDirNotFoundError,
    NoError,
    NoReassignmentInProgressError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from broker_agent.contract.choices import LogDirState

from .conftest import Load, wait_until
from .test_kafka_listener import FAST, _alter, admin, ask, kafka_ports
from .test_log_dir_failure import _break_dir

pytestmark = pytest.mark.integration

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REQUEST = 0, 3, 37, 42
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 80, 83, 84
PREFERRED, UNCLEAN = 0, 1
SET, DELETE, BROKER = 0, 1, 4
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


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

    # the ISR shrinks to the preferred replica, which then dies: no clean leader is left
    sim.cli("kill-broker", str(other))
    wait_until(lambda: sim.partition("orders").isr == [preferred], 20, what="ISR shrunk")
    sim.cli("kill-broker", str(preferred))
    wait_until(lambda: sim.partition("orders").leader == -1, 20, what="leaderless")
    assert _elect(port, UNCLEAN, "orders") == ELIGIBLE_LEADERS_NOT_AVAILABLE  # none online
    sim.cli("start-broker", str(other))
    wait_until(
        lambda: other not in sim.partition("orders").offline_replicas,
        20,
        what="the out-of-sync replica back online",
    )
    assert sim.partition("orders").leader == -1  # never elected by itself (no unclean default)
    assert _elect(port, UNCLEAN, "orders") == NONE
    part = sim.partition("orders")
    assert (part.leader, part.isr) == (other, [other])
    assert _elect(port, UNCLEAN, "orders") == ELECTION_NOT_NEEDED  # it has a leader now
    assert _elect(port, PREFERRED, "orders") == PREFERRED_LEADER_NOT_AVAILABLE  # still down

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


def _hosted(a, broker_id: int, topic: str) -> dict[str, list[tuple[bool, int]]]:
    """DescribeLogDirs of one broker: dir path -> ``(is_future, offset_lag)`` of ``topic``-0."""
    [answer] = a.describe_log_dirs(brokers=[broker_id])
    return {
        d["log_dir"]: [
            (p["is_future_key"], p["offset_lag"])
            for t in d["topics"]
            if t["name"] == topic
            for p in t["partitions"]
            if p["partition_index"] == 0
        ]
        for d in answer["log_dirs"]
    }


def test_alter_replica_log_dirs_moves_a_replica_through_a_future_replica_under_produce_load(
    sim_factory,
):
    sim = sim_factory(2, 2, *FAST)
    sim.controller.create_topic("orders", 1, 2)
    sim.controller.create_topic("solo", 1, 1)
    wait_until(
        lambda: all(len(sim.partition(t).created) == n for t, n in (("orders", 2), ("solo", 1))),
        20,
        what="replicas created",
    )
    leader = sim.partition("orders").leader
    port = kafka_ports(sim)[leader]
    paths = {d.name: d.path for d in sim.agent(leader).snapshot().log_dirs}
    source = sim.replica(leader, "orders").log_dir
    [target] = [name for name in paths if name != source]
    here = TopicPartitionReplica("orders", 0, leader)
    with Load(sim, "orders") as load, admin(sim) as a:
        load.wait_acked(400)
        # Kafka's quota on the copy, so the move is seen under way: the load writes faster
        assert _alter(port, str(leader), [(THROTTLE, SET, "1000")], resource_type=BROKER) == (
            NONE,
            None,
        )
        assert a.alter_replica_log_dirs({here: paths[target]}) == {here: NoError}
        wait_until(
            lambda: (
                (hosted := _hosted(a, leader, "orders"))[paths[source]] == [(False, 0)]
                and len(hosted[paths[target]]) == 1
                and hosted[paths[target]][0][0]  # is_future
                and hosted[paths[target]][0][1] > 0  # its copy is behind the current log
            ),
            20,
            what="the future replica on the target dir",
        )
        assert sim.replica(leader, "orders").log_dir == source  # still served from there
        load.wait_acked(100)
        assert _alter(port, str(leader), [(THROTTLE, DELETE, None)], resource_type=BROKER)[0] == 0
        wait_until(lambda: sim.replica(leader, "orders").log_dir == target, 30, what="the swap")
        assert _hosted(a, leader, "orders") == {paths[source]: [], paths[target]: [(False, 0)]}
        load.wait_acked(100)
    load.verify_exactly_once()  # nothing lost or doubled across the swap
    assert not os.path.exists(os.path.join(paths[source], "orders-0"))
    assert os.listdir(paths[target]).count("orders-0") == 1
    assert not [n for n in os.listdir(paths[target]) if n.endswith("-future")]

    solo_host = sim.partition("solo").leader
    other = next(b for b in (1, 2) if b != solo_host)
    other_dirs = {d.name: d.path for d in sim.agent(other).snapshot().log_dirs}
    busy = sim.replica(other, "orders").log_dir  # where placement would not put a new replica
    other_dir = other_dirs[busy]
    with admin(sim) as a:
        answers = a.alter_replica_log_dirs(
            {
                TopicPartitionReplica("orders", 0, leader): "/no/such/dir",
                TopicPartitionReplica("solo", 0, other): other_dir,  # hosted elsewhere
                TopicPartitionReplica("nope", 0, other): other_dir,
            }
        )
    assert answers == {
        TopicPartitionReplica("orders", 0, leader): LogDirNotFoundError,
        TopicPartitionReplica("solo", 0, other): ReplicaNotAvailableError,
        TopicPartitionReplica("nope", 0, other): UnknownTopicOrPartitionError,
    }
    # REPLICA_NOT_AVAILABLE remembered the dir: a reassignment adding the replica puts it there
    solo = TopicPartition("solo", 0)
    with admin(sim) as a:
        assert a.alter_partition_reassignments({solo: [solo_host, other]}) == {solo: None}
        wait_until(lambda: a.list_partition_reassignments() == {}, 30, what="solo reassigned")
    assert sim.replica(other, "solo").log_dir == busy

    _break_dir(paths[source])  # KIP-112's failure: the folder replaced by a file
    wait_until(
        lambda: (
            {d.name: d.state for d in sim.agent(leader).snapshot().log_dirs}[source]
            == LogDirState.OFFLINE
        ),
        20,
        what="the source dir failed",
    )
    with admin(sim) as a:
        assert a.alter_replica_log_dirs({here: paths[source]}) == {here: KafkaStorageError}


def _kill(sim, broker_id: int) -> None:
    """SIGKILL a broker and wait until the controller fenced it: Metadata then leaves it out,
    so a client does not pick it (only its bootstrap address still names it)."""
    sim.cli("kill-broker", str(broker_id))
    wait_until(
        lambda: (
            not next(b for b in sim.controller.metadata().brokers if b.broker_id == broker_id).alive
        ),
        20,
        what=f"broker {broker_id} fenced",
    )


def test_partition_reassignment_adds_catches_up_and_drops_replicas_under_produce_load(sim_factory):
    sim = sim_factory(3, 1, *FAST)
    sim.controller.create_topic("orders", 1, 2)
    sim.controller.create_topic("other", 1, 1)
    old_leader, kept = sim.partition("orders").replicas
    [added] = [b for b in (1, 2, 3) if b not in (old_leader, kept)]
    tp = TopicPartition("orders", 0)
    with Load(sim, "orders") as load:
        load.wait_acked(100)
        # the broker being added is down: the reassignment waits for it, as in Kafka
        _kill(sim, added)
        with admin(sim) as a:
            assert a.alter_partition_reassignments({tp: [added, kept]}) == {tp: None}
            ongoing = a.list_partition_reassignments()
            refused = a.alter_partition_reassignments(
                {
                    TopicPartition("other", 0): None,  # none under way
                    TopicPartition("other", 1): [kept],
                    TopicPartition("nope", 0): [kept],
                }
            )
            twice = a.alter_partition_reassignments({TopicPartition("other", 0): [kept, kept]})
            unknown = a.alter_partition_reassignments({TopicPartition("other", 0): [99]})
        assert ongoing == {
            tp: {
                "replicas": [added, kept, old_leader],
                "adding_replicas": [added],
                "removing_replicas": [old_leader],
            }
        }
        assert refused == {
            TopicPartition("other", 0): NoReassignmentInProgressError,
            TopicPartition("other", 1): UnknownTopicOrPartitionError,
            TopicPartition("nope", 0): UnknownTopicOrPartitionError,
        }
        assert twice == unknown == {TopicPartition("other", 0): InvalidReplicationAssignmentError}
        part = sim.partition("orders")
        assert (part.leader, part.replicas) == (old_leader, [added, kept, old_leader])
        load.wait_acked(100)  # the partition keeps serving meanwhile
        with admin(sim) as a:
            # cancelled: the replica being added is taken out, the others stay (Kafka's
            # revert keeps the widened order: target first)
            assert a.alter_partition_reassignments({tp: None}) == {tp: None}
            assert a.list_partition_reassignments() == {}
            assert sim.partition("orders").replicas == [kept, old_leader]
            assert a.alter_partition_reassignments({tp: [added, kept]}) == {tp: None}
            assert a.list_partition_reassignments([tp])[tp]["adding_replicas"] == [added]

        sim.cli("start-broker", str(added))  # its replica is created and catches up
        with admin(sim) as a:
            wait_until(lambda: a.list_partition_reassignments() == {}, 30, what="completed")
        part = sim.partition("orders")
        assert (part.replicas, part.adding_replicas, part.removing_replicas) == (
            [added, kept],
            [],
            [],
        )
        assert sorted(part.isr) == sorted([added, kept])
        assert part.leader == added  # the removed leader's successor: the first target in sync
        wait_until(lambda: sim.replica(old_leader, "orders") is None, 20, what="replica dropped")
        load.wait_acked(100)
    load.verify_exactly_once()


def test_cordoned_log_dirs_is_a_dynamic_broker_config_as_kip_1066_makes_it(sim_factory):
    """IncrementalAlterConfigs on ``cordoned.log.dirs`` (the broker's dir paths): APPEND and
    SUBTRACT add and take away a path, SET replaces the list, DELETE lifts every cordon; a path
    that is not one of the broker's dirs is INVALID_CONFIG and changes nothing, and so does
    ``validate_only``."""
    APPEND, SUBTRACT, INVALID_CONFIG = 2, 3, 40
    sim = sim_factory(1, 2, *FAST)
    port = kafka_ports(sim)[1]
    paths = {d.name: d.path for d in sim.agent(1).snapshot().log_dirs}
    first, second = sorted(paths)
    key = "cordoned.log.dirs"

    def cordoned() -> set[str]:
        return {d.name for d in sim.agent(1).snapshot().log_dirs if d.cordoned}

    assert _alter(port, "1", [(key, APPEND, paths[first])], resource_type=BROKER) == (NONE, None)
    assert cordoned() == {first}
    assert _alter(port, "1", [(key, APPEND, paths[first])], resource_type=BROKER)[0] == NONE
    assert cordoned() == {first}  # appending a listed path again changes nothing
    both = f"{paths[first]},{paths[second]}"
    assert _alter(port, "1", [(key, SET, both)], validate_only=True, resource_type=BROKER)[0] == 0
    assert cordoned() == {first}
    assert _alter(port, "1", [(key, SET, both)], resource_type=BROKER)[0] == NONE
    assert cordoned() == {first, second}
    assert _alter(port, "1", [(key, SUBTRACT, paths[first])], resource_type=BROKER)[0] == NONE
    assert cordoned() == {second}
    code, message = _alter(port, "1", [(key, APPEND, "/no/such/dir")], resource_type=BROKER)
    assert code == INVALID_CONFIG and "not a log dir" in message
    assert cordoned() == {second}
    assert _alter(port, "1", [(key, DELETE, None)], resource_type=BROKER)[0] == NONE
    assert cordoned() == set()
