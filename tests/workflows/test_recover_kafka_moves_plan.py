"""Where ``recover_log_dir``'s ``move_replicas`` sends a failed dir's replicas on a ``kafka``
cluster (#36), as pure rules: a target outside the replica set, another rack where racks are
known, the broker with the most usable bytes (KIP-827) where the leader's replica fits, a
refusal that names each broker's room when none fits; a partition with no leader or no broker
left stays. The throttle is kafka-reassign-partitions'. The review table shows the moves in red.
End to end under load: test_recover_log_dir_kafka_moves."""

from __future__ import annotations

import pytest

from workflows.errors import WorkflowError
from workflows.kinds import get_kind
from workflows.kinds.disks_kafka_moves import (
    NO_IN_BROKER_MOVES,
    Candidate,
    ToMove,
    moves_review,
    place_moves,
    replication_throttle,
)

GB = 2**30


def _brokers(**dirs: tuple[str | None, dict[str, int]]) -> dict[int, Candidate]:
    return {int(b[1:]): Candidate(int(b[1:]), rack, d) for b, (rack, d) in dirs.items()}


def test_the_target_is_outside_the_replica_set_and_has_the_most_usable_bytes():
    candidates = _brokers(
        b2=(None, {"/d2": 5 * GB}), b3=(None, {"/d3a": 1 * GB, "/d3b": 9 * GB}), b4=(None, {})
    )
    placed = place_moves(1, [ToMove("orders", 0, [1, 2], 2, 2 * GB)], candidates)
    assert placed.refused == [] and placed.stays == {}
    [move] = placed.moves
    # 3 over 4 (no good dir) and over 2 (already a replica); N's place in the list is kept
    assert move == {
        "topic": "orders",
        "partition": 0,
        "replicas_before": [1, 2],
        "replicas_after": [3, 2],
        "target": 3,
    }


def test_each_move_takes_its_room_so_the_next_goes_elsewhere():
    candidates = _brokers(b3=(None, {"/d3": 3 * GB}), b4=(None, {"/d4": 2 * GB}))
    parts = [ToMove("t", 0, [1, 2], 2, 2 * GB), ToMove("t", 1, [2, 1], 2, 2 * GB)]
    placed = place_moves(1, parts, candidates)
    assert sorted(m["target"] for m in placed.moves) == [3, 4]


def test_a_rack_none_of_the_other_replicas_is_on_is_preferred_where_racks_are_known():
    candidates = _brokers(
        b2=("a", {"/d": GB}),
        b3=("a", {"/d": 9 * GB}),  # more room, but the rack of the surviving replica
        b4=("b", {"/d": 2 * GB}),
    )
    [move] = place_moves(1, [ToMove("t", 0, [1, 2], 2, GB)], candidates).moves
    assert move["target"] == 4
    # where no other rack has room, the same rack rather than no protection
    tight = _brokers(b2=("a", {"/d": GB}), b3=("a", {"/d": 9 * GB}), b4=("b", {"/d": 1}))
    [move] = place_moves(1, [ToMove("t", 0, [1, 2], 2, GB)], tight).moves
    assert move["target"] == 3


def test_a_replica_that_fits_nowhere_is_refused_with_each_brokers_room():
    candidates = _brokers(b3=(None, {"/d3": 2 * GB}), b4=(None, {}))
    placed = place_moves(1, [ToMove("orders", 7, [1, 2], 2, 5 * GB)], candidates)
    assert placed.moves == []
    assert placed.refused == [
        "orders:7 (5.0 GB on its leader 2) fits on no broker: broker 3: its largest good dir "
        "has 2.0 GB usable, 5.0 GB needed; broker 4: no good, uncordoned log dir"
    ]


def test_a_leaderless_partition_or_one_on_every_broker_stays_on_the_broker():
    candidates = _brokers(b2=(None, {"/d": GB}), b3=(None, {"/d": GB}))
    placed = place_moves(
        1,
        [ToMove("t", 0, [1, 2, 3], 2, 10), ToMove("t", 1, [1, 2], -1, 10)],
        candidates,
    )
    assert placed.moves == [] and placed.refused == []
    assert placed.stays == {
        "t:0": "every live broker already holds a replica ([1, 2, 3])",
        "t:1": (
            "no leader (its only in-sync replica was on the failed dir): a new replica could "
            "not catch up"
        ),
    }


def test_the_throttle_is_kafka_reassign_partitions_leader_and_follower_lists():
    moves = place_moves(
        1,
        [ToMove("t", 0, [1, 2], 2, 10), ToMove("u", 3, [2, 1], 2, 10)],
        _brokers(b3=(None, {"/d": GB})),
    ).moves
    throttle = replication_throttle(moves, 10_000_000)
    assert throttle == {
        "rate_bytes_per_s": 10_000_000,
        "brokers": [1, 2, 3],
        "leader_replicas": {"t": ["0:1", "0:2"], "u": ["3:2", "3:1"]},
        "follower_replicas": {"t": ["0:3"], "u": ["3:3"]},
    }


def test_the_review_shows_each_move_and_the_throttle_in_red():
    moves = place_moves(1, [ToMove("t", 0, [1, 2], 2, 3000)], _brokers(b3=(None, {"/d": GB})))
    actions = {
        "broker": 1,
        "replica_count": 2,
        "replica_moves": "1 partition(s) reassigned",
        "moves": moves.moves,
        "throttle": replication_throttle(moves.moves, 50_000_000),
    }
    rows = moves_review(actions, {"move_bytes": {"t:0": 3000}, "not_moved": {"t:1": "why"}})
    throttle, move, in_broker, stays = rows
    assert throttle.destructive and throttle.after == "47.7 MB/s per broker"
    assert (move.target, move.before, move.after, move.size) == (
        "t:0",
        "[1, 2]",
        "[3, 2]",
        "2.9 KB",
    )
    assert move.destructive
    assert in_broker.size == NO_IN_BROKER_MOVES and not in_broker.destructive
    assert stays.target == "t:1: why"


def test_move_replicas_is_a_yes_no_field_off_by_default():
    kind = get_kind("recover_log_dir")
    [field] = [f for f in kind.fields if f.name == "move_replicas"]
    assert (field.type, field.default) == ("bool", False)
    params = {"cluster": "c", "broker": 1, "log_dir": "d"}
    assert kind.clean(params).move_replicas is False
    assert kind.clean({**params, "move_replicas": "true"}).move_replicas is True
    assert kind.clean({**params, "move_replicas": "True"}).move_replicas is True  # a preview
    with pytest.raises(WorkflowError, match="move_replicas must be true or false"):
        kind.clean({**params, "move_replicas": "maybe"})
    with pytest.raises(WorkflowError, match="throttle_bytes_per_s must be ≥ 1024"):
        kind.clean({**params, "throttle_bytes_per_s": "10"})
