"""KIP-253 in-order delivery, the consumer half: which partitions hold back which (seed 002,
"Changes in how consumer consumes partition", steps 4 and 5).

A key only moves between a partition and its split parent, so both gates walk one chain
(:func:`first_ancestor_within`). Creation gate: a new partition waits until the group reached
the split offset on :func:`creation_barrier`, the first ancestor that existed before the
expansion (not always the split parent: 2 -> 8 makes 6 wait on 0). Deletion gate: the partition
a marked one gives its keys to (:func:`deletion_target`) delivers past the
leaderEpochBeforeDeletion offset only once the marked one is drained. A group's position is its
committed offset (a gate opens at most one commit late, never early); a re-created partition has
no commits and is gated. ``enable.ordered.delivery=false`` lifts both. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_agent.contract.hashing import parent_partition

__all__ = [
    "Gate",
    "creation_barrier",
    "creation_gate_applies",
    "deletion_blockers",
    "deletion_target",
    "first_ancestor_within",
    "split_parent",
]


def split_parent(partition: int, initial_partition_count: int) -> int | None:
    """The partition ``partition`` was split from, or None below the initial count."""
    if partition < initial_partition_count:
        return None
    return parent_partition(partition, initial_partition_count)


def first_ancestor_within(partition: int, initial_partition_count: int, count: int) -> int:
    """``partition`` itself if below ``count``, else its first ancestor below ``count``: where
    ``partition``'s keys are placed under the partition count ``count`` (linear hashing folds a
    partition onto its split parent, level by level; partitions below N are roots)."""
    if count < initial_partition_count:
        raise ValueError("a partition count is never below initial_partition_count")
    p = partition
    while p >= count:
        p = parent_partition(p, initial_partition_count)
    return p


def deletion_target(partition: int, initial_partition_count: int, undeleted: int) -> int:
    """Where a marked partition's keys go under the count ``undeleted``: its first ancestor
    below it (step 5.1)."""
    return first_ancestor_within(partition, initial_partition_count, undeleted)


def creation_barrier(
    partition: int, initial_partition_count: int, leader_epoch_after_creation: Mapping[str, int]
) -> int | None:
    """KIP-253 step 4.2: the one partition ``P3`` that holds back a group's start of
    ``partition``, made by an expansion - the first of its ancestors that existed before that
    expansion (the keys of its ``leaderEpochAfterCreation``: partitions ``0..U_before-1``, so
    this is ``first_ancestor_within(partition, N, U_before)``).
    None for a partition below N or one without the map (not made by an expansion: a topic's
    first partitions, or a cluster that does not record it)."""
    if partition < initial_partition_count or not leader_epoch_after_creation:
        return None
    p = partition
    while str(p) not in leader_epoch_after_creation:
        if p < initial_partition_count:
            return None  # no ancestor in the map: not a map the controller writes
        p = parent_partition(p, initial_partition_count)
    return p


def deletion_blockers(
    partition: int, marked: list[int], initial_partition_count: int, undeleted: int
) -> list[int]:
    """The marked partitions whose keys move to ``partition`` (at most O(log n) of them)."""
    return sorted(
        m for m in marked if deletion_target(m, initial_partition_count, undeleted) == partition
    )


def creation_gate_applies(
    partition: int, initial_partition_count: int, position: int | None, log_start: int
) -> bool:
    """Step 4's condition: a partition made by expansion that the group has not started."""
    return partition >= initial_partition_count and (position is None or position <= log_start)


@dataclass
class Gate:
    """What the group may deliver of one partition now.

    ``open`` False: nothing (the creation gate holds). ``limit``: deliver offsets below it only
    (a deletion gate holds); None = no limit. ``waits_on`` names the partitions holding it back
    and ``reason`` says why, for the CLI and the console."""

    open: bool = True
    limit: int | None = None
    waits_on: tuple[int, ...] = ()
    reason: str = ""

    def allows(self, offset: int) -> bool:
        return self.open and (self.limit is None or offset < self.limit)
