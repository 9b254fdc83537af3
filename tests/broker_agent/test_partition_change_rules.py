"""The controller's rules for an asked-for leader election (Kafka's ``electLeader``) and a
partition reassignment (KIP-455's ``PartitionReassignmentReplicas`` / ``Revert``), on
partition records as the simulated controller keeps them: the cases the process tests of the
Kafka listener do not reach."""

from __future__ import annotations

from broker_agent.contract.choices import ErrorCode
from broker_agent.simulator.elections import elect_leader
from broker_agent.simulator.reassignment import AlterReassignmentsRequest, _alter, maybe_complete


def _part(replicas, isr, leader, **kw) -> dict:
    return dict(
        partition=0,
        replicas=list(replicas),
        isr=list(isr),
        leader=leader,
        leader_epoch=5,
        partition_epoch=9,
        created=list(replicas),
        **kw,
    )


def test_preferred_election_needs_the_first_replica_in_sync_and_online():
    assert elect_leader(_part([1, 2], [1, 2], 1), "PREFERRED", []) == (
        ErrorCode.ELECTION_NOT_NEEDED
    )
    out_of_sync = _part([1, 2], [2], 2)
    assert elect_leader(out_of_sync, "PREFERRED", []) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    offline = _part([1, 2], [1, 2], 2)
    assert elect_leader(offline, "PREFERRED", [1]) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert offline["leader"] == 2 and offline["leader_epoch"] == 5  # unchanged
    ok = _part([1, 2], [1, 2], 2)
    assert elect_leader(ok, "PREFERRED", []) is None
    assert (ok["leader"], ok["leader_epoch"], ok["partition_epoch"]) == (1, 6, 10)


def test_unclean_election_prefers_an_online_isr_replica_then_any_online_one():
    assert elect_leader(_part([1, 2, 3], [1], 1), "UNCLEAN", []) == ErrorCode.ELECTION_NOT_NEEDED
    clean = _part([1, 2, 3], [1, 3], -1)
    assert elect_leader(clean, "UNCLEAN", [1]) is None
    assert (clean["leader"], clean["isr"]) == (3, [1, 3])  # an ISR replica: the ISR stays
    dirty = _part([1, 2, 3], [1], -1)
    assert elect_leader(dirty, "UNCLEAN", [1]) is None
    assert (dirty["leader"], dirty["isr"]) == (2, [2])  # out of sync: a new ISR of itself
    gone = _part([1, 2], [1], -1)
    assert elect_leader(gone, "UNCLEAN", [1, 2]) == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def _reassign(topics, *changes, registered=(1, 2, 3, 4)):
    req = AlterReassignmentsRequest(
        partitions=[{"topic": "t", "partition": 0, "replicas": r} for r in changes]
    )
    results, _changed = _alter(topics, set(registered), req)
    return [r["error"] for r in results]


def test_a_reassignment_widens_then_completes_when_the_target_is_in_sync():
    part = _part([1, 2], [1, 2], 1)
    topics = {"t": {"partitions": {0: part}}}
    assert _reassign(topics, [3, 2]) == [None]
    assert (part["replicas"], part["adding_replicas"], part["removing_replicas"]) == (
        [3, 2, 1],
        [3],
        [1],
    )
    assert part["leader"] == 1  # the leader being removed leads until completion
    # a new reassignment replaces the one under way, from the widened replicas
    assert _reassign(topics, [4, 2]) == [None]
    assert (part["replicas"], part["adding_replicas"], part["removing_replicas"]) == (
        [4, 2, 3, 1],
        [4],
        [3, 1],
    )
    part["isr"] = [1, 2, 4]  # the added replica caught up
    assert maybe_complete(part)
    assert (part["replicas"], part["isr"], part["adding_replicas"], part["removing_replicas"]) == (
        [4, 2],
        [2, 4],
        [],
        [],
    )
    assert (part["leader"], part["leader_epoch"]) == (4, 6)  # first target replica in sync
    assert part["created"] == [2]  # the removed brokers will make their replica afresh


def test_a_reassignment_already_in_sync_completes_at_once_and_keeps_its_leader():
    part = _part([1, 2, 3], [1, 2, 3], 2)
    assert _reassign({"t": {"partitions": {0: part}}}, [1, 2]) == [None]
    assert (part["replicas"], part["isr"], part["leader"], part["leader_epoch"]) == (
        [1, 2],
        [1, 2],
        2,
        5,
    )


def test_cancel_reverts_and_refuses_what_kafka_refuses():
    part = _part([1, 2], [1, 2], 1)
    topics = {"t": {"partitions": {0: part}}}
    assert _reassign(topics, None) == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
    assert _reassign(topics, [], [2, 2], [9]) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT] * 3
    assert _reassign(topics, [3, 4]) == [None]
    assert _reassign(topics, None) == [None]
    assert (part["replicas"], part["isr"], part["leader"]) == ([1, 2], [1, 2], 1)
    # the ISR holds only replicas being added: reverting would need an unclean election
    assert _reassign(topics, [3]) == [None]
    part["isr"] = [3]
    assert _reassign(topics, None) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert _reassign({"t": {"partitions": {}}}, [1]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
