"""KIP-253 in-order delivery, the consumer half: which partitions hold back which (seed 002,
"Changes in how consumer consumes partition", steps 4 and 5).

Producers use linear hashing with the undeleted partition count U, so a key moves only between
a partition and its split parent. Two gates follow, both decided from the group's positions:

- **Creation gate** (step 4). A partition ``P1 >= N`` made by an expansion holds keys that were
  in its split parent ``P3`` before. The group may start ``P1`` only once its position on ``P3``
  has reached the *split offset*: the end offset in ``P3`` of the leader epoch that
  ``leaderEpochAfterCreation`` records for ``P3`` (OffsetsForLeaderEpoch) - every record before
  it was produced with the old count. The gate applies only while the group has not consumed
  anything of ``P1`` (no position, or the position is ``P1``'s log start).
- **Deletion gate** (step 5). A partition ``P3`` marked for deletion by a shrink sends its keys
  back to its first ancestor below the new count (:func:`deletion_target`); that partition
  ``P1`` is "blocked by" ``P3``. The group may deliver offset ``T`` of ``P1`` if ``T`` is below
  the end offset in ``P1`` of the epoch ``leaderEpochBeforeDeletion`` records for ``P1``, or
  once the group has consumed ``P3`` to its log end offset (nothing is appended to a marked
  partition, so that end is final).

With ``enable.ordered.delivery=false`` neither gate applies (the seed's last note).

Decided (the seed's ConsumerGroupPosition carries members' live positions): a group's position
on a partition is its committed offset. Strata's group consumer commits after every delivered
batch, so a gate opens at most one commit late and never early.

Standard library only; :mod:`broker_agent.group_consumer` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_agent.hashing import parent_partition

__all__ = [
    "Gate",
    "creation_gate_applies",
    "deletion_blockers",
    "deletion_target",
    "split_parent",
]


def split_parent(partition: int, initial_partition_count: int) -> int | None:
    """The partition ``partition`` was split from, or None below the initial count."""
    if partition < initial_partition_count:
        return None
    return parent_partition(partition, initial_partition_count)


def deletion_target(partition: int, initial_partition_count: int, undeleted: int) -> int:
    """Where a marked partition's keys go under the count ``undeleted``: its first ancestor
    below it (linear hashing folds a partition onto its split parent, level by level)."""
    p = partition
    while p >= undeleted:
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
