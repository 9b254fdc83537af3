"""KIP-253 in-order delivery, the consumer half: which partitions hold back which (seed 002,
"Changes in how consumer consumes partition", steps 4 and 5).

Producers use linear hashing with the undeleted partition count U, so a key moves only between
a partition and its split parent. Two gates follow, both decided from the group's positions:

- **Creation gate** (step 4). A partition ``P1 >= N`` made by an expansion holds keys that were,
  before it, in ``P3`` = :func:`creation_barrier`: the first of ``P1``'s ancestors (split parent,
  its parent, ...) that existed before the expansion, i.e. the first that is a key of ``P1``'s
  ``leaderEpochAfterCreation`` (step 4.2). That is the split parent for an expansion by at most
  one doubling; a larger one (2 -> 8: partition 6 splits 2, itself new) waits on an older
  ancestor (0), since the new parent held none of those keys before. The group may start ``P1``
  only once its position on ``P3`` has reached the *split offset*: the end offset in ``P3`` of
  the leader epoch that ``leaderEpochAfterCreation`` records for ``P3`` (OffsetsForLeaderEpoch)
  - every record before it was produced with the old count. The gate applies only while the
  group has not consumed anything of ``P1`` (no position, or the position is ``P1``'s log
  start).
- **Deletion gate** (step 5). A partition ``P3`` marked for deletion by a shrink sends its keys
  back to its first ancestor below the new count (:func:`deletion_target`); that partition
  ``P1`` is "blocked by" ``P3``. The group may deliver offset ``T`` of ``P1`` if ``T`` is below
  the end offset in ``P1`` of the epoch ``leaderEpochBeforeDeletion`` records for ``P1``, or
  once the group has consumed ``P3`` to its log end offset (nothing is appended to a marked
  partition, so that end is final).

With ``enable.ordered.delivery=false`` neither gate applies (the seed's last note).

Both gates walk the same chain: the partition a key lived in under a smaller partition count is
the first of its current partition's ancestors below that count (:func:`first_ancestor_within`;
linear hashing only ever moves a key between a partition and its split parent).

Decided (a partition removed after a shrink, then made again by an expansion): the group
coordinator drops a group's committed offsets on a partition when the controller removes it
(Kafka's coordinator drops the offsets of deleted partitions) and refuses commits on partitions
the topic does not have, so a re-created partition starts fresh at offset 0 with no position:
the creation gate applies to it, and a stale commit from its earlier life can neither skip the
gate nor point a fetch past its end.

Decided (the seed's ConsumerGroupPosition carries members' live positions): a group's position
on a partition is its committed offset. Strata's group consumer commits after every delivered
batch, so a gate opens at most one commit late and never early.

Standard library only; :mod:`broker_agent.group_consumer` does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_agent.hashing import parent_partition

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
