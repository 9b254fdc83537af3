"""Log-dir placement (KIP-112), the one rule the broker and the recover_log_dir pre-flight call:
a replica goes to the least-loaded good dir."""

from __future__ import annotations

from types import SimpleNamespace

from broker_agent.contract.placement import leader_sizes, next_log_dir, place_replicas


def test_a_new_replica_goes_to_the_dir_with_the_fewest_replicas_ties_to_the_first_name():
    assert next_log_dir({"logdir-0": 3, "logdir-1": 1, "logdir-2": 2}) == "logdir-1"
    assert next_log_dir({"logdir-1": 2, "logdir-0": 2}) == "logdir-0"


def test_moving_replicas_go_largest_first_onto_the_dir_with_the_most_room():
    placement = place_replicas(
        {("a", 0): 30, ("a", 1): 20, ("b", 0): 20}, {"logdir-0": 40, "logdir-1": 35}
    )
    # a-0 (30) -> logdir-0 (10 left); a-1 (20) -> logdir-1 (15 left); b-0 (20) fits nowhere
    assert placement.targets == {("a", 0): "logdir-0", ("a", 1): "logdir-1", ("b", 0): None}
    assert placement.unplaced == [("b", 0)]
    # the unplaceable replica still counts against the dir with the most room: needed > usable
    assert placement.needed_bytes == {"logdir-0": 30, "logdir-1": 40}


def test_ties_go_by_topic_then_partition_and_to_the_last_dir_name():
    placement = place_replicas({("a", 10): 5, ("a", 2): 5}, {"logdir-0": 10, "logdir-1": 10})
    assert placement.targets == {("a", 2): "logdir-1", ("a", 10): "logdir-0"}


def test_without_a_good_dir_nothing_is_placed():
    placement = place_replicas({("a", 0): 1}, {})
    assert placement.unplaced == [("a", 0)] and placement.needed_bytes == {}


def test_a_replica_is_sized_by_its_leader():
    def replica(topic: str, partition: int, is_leader: bool, size: int) -> SimpleNamespace:
        return SimpleNamespace(
            topic=topic, partition=partition, is_leader=is_leader, size_bytes=size
        )

    snapshot = [replica("a", 0, True, 7), replica("a", 1, False, 9), replica("b", 0, True, 3)]
    assert leader_sizes(snapshot, {"a:0", "a:1"}) == {"a:0": 7}
