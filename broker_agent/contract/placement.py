"""Where a broker puts a replica among its log dirs (KIP-112): one rule for the broker and for
``recover_log_dir``'s pre-flight, so the plan an approver reads is the placement the broker makes.

Kafka's rule, least-loaded good dir: a new replica (:func:`next_log_dir`) goes to the good,
uncordoned dir with the fewest online replicas (ties to the first name). A removed dir's
replicas (:func:`place_replicas`) must fit, so load is bytes: largest first, onto the dir with
most usable bytes left; one that fits nowhere still counts against the roomiest dir, which then
shows needed > usable. A replica to re-create weighs its leader's local size
(:func:`leader_sizes`). Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from broker_agent.contract.models import partition_key

__all__ = ["Placement", "TopicPartition", "leader_sizes", "next_log_dir", "place_replicas"]

#: Kafka's ``TopicPartition``: (topic, partition).
TopicPartition = tuple[str, int]


class SizedReplica(Protocol):
    """What :func:`leader_sizes` reads of a replica (``broker_agent.contract.models.ReplicaInfo``)."""

    topic: str
    partition: int
    is_leader: bool
    size_bytes: int


def next_log_dir(replica_counts: Mapping[str, int]) -> str:
    """The dir for a new replica: of the good dirs (``replica_counts``: each good, uncordoned
    dir with its count of online replicas), the one holding the fewest, ties to the first name."""
    return min(replica_counts, key=lambda name: (replica_counts[name], name))


@dataclasses.dataclass(frozen=True)
class Placement:
    """The dir of each replica (None: it fits nowhere) and the bytes placed on each dir (the
    unplaceable included)."""

    targets: dict[TopicPartition, str | None]
    needed_bytes: dict[str, int]

    @property
    def unplaced(self) -> list[TopicPartition]:
        return [tp for tp, target in self.targets.items() if target is None]


def place_replicas(sizes: Mapping[TopicPartition, int], room: Mapping[str, int]) -> Placement:
    """Place replicas of ``sizes`` bytes on the dirs of ``room`` (usable bytes of each good
    dir): largest first onto the dir with the most room left (see the module docstring)."""
    left = dict(room)
    needed = dict.fromkeys(left, 0)
    targets: dict[TopicPartition, str | None] = {}
    for tp, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        best = max(left, key=lambda name: (left[name], name), default=None)
        targets[tp] = best if best is not None and left[best] >= size else None
        if best is not None:
            left[best] -= size
            needed[best] += size
    return Placement(targets, needed)


def leader_sizes(replicas: Iterable[SizedReplica], wanted: Collection[str]) -> dict[str, int]:
    """Local size of each ``wanted`` partition (``topic:partition``) that ``replicas`` (one
    broker's snapshot) lead."""
    sizes: dict[str, int] = {}
    for r in replicas:
        key = partition_key(r.topic, r.partition)
        if key in wanted and r.is_leader:
            sizes[key] = r.size_bytes
    return sizes
