"""Consumer groups of the synthetic scale mode (#17): a fleet's 20,000 groups from one process.

Group ``g`` has one member and consumes topic ``(g * 7919) mod T`` (a prime stride spreads groups
over small and large topics alike), with a committed position on each partition the topic had
at start, a little behind the log end; :meth:`SyntheticGroups.commit` moves a share up on each
tick or churn. Served by ``GET /v1/groups?format=tsv[&since=V]`` exactly as the real coordinator
(:func:`broker_agent.contract.models.group_changes_tsv`); the JSON form lists every group.
"""

from __future__ import annotations

import json
import random
from array import array
from typing import TYPE_CHECKING

from broker_agent.contract.models import group_tsv_head

if TYPE_CHECKING:
    from broker_agent.simulator.synthetic import SyntheticCluster

__all__ = ["DEFAULT_FLEET_GROUPS", "SyntheticGroups"]

DEFAULT_FLEET_GROUPS = 20_000
"""Groups of the fleet layout unless ``--synthetic-groups`` says otherwise (issue #17)."""

_STRIDE = 7919
_BEHIND = 1000  # a group's position is up to this many records behind the log end


class SyntheticGroups:
    """``count`` groups over ``cluster``'s topics (see the module docstring). Called under the
    cluster's lock (``commit`` from its tick and churn; the answers through ``cluster.cached``)."""

    def __init__(self, cluster: SyntheticCluster, count: int, seed: int = 7):
        self.cluster = cluster
        self.count = count
        topics = len(cluster.topics)
        rnd = random.Random(seed)  # noqa: S311 (synthetic offsets, not crypto)
        self._rnd = rnd
        self.topic = array("i", ((g * _STRIDE) % topics for g in range(count)))
        self.first = array("q")  # the group's first partition index (its topic's partition 0)
        self.size = array("i")  # positions held: the topic's partitions at start
        for t in self.topic:
            self.first.append(cluster.topic_start[t])
            self.size.append(cluster.topic_start[t + 1] - cluster.topic_start[t])
        self.position = array(
            "q",
            (
                max(cluster.lso[i], cluster.leo[i] - rnd.randrange(_BEHIND))
                for g in range(count)
                for i in range(self.first[g], self.first[g] + self.size[g])
            ),
        )
        self.offset = array("q", [0])  # group g's positions: position[offset[g]:offset[g + 1]]
        for s in self.size:
            self.offset.append(self.offset[-1] + s)
        self.version = array("q", [cluster.start_version]) * count

    def name(self, g: int) -> str:
        return f"synthetic.group-{g:05d}"

    def commit(self, fraction: float, version: int, rnd: random.Random | None = None) -> int:
        """``fraction`` of the groups (at least one) commit: their positions move up to a little
        behind the current log end. Returns how many groups committed."""
        rnd = rnd or self._rnd
        cluster = self.cluster
        k = min(self.count, max(1, round(self.count * fraction)))
        for g in rnd.sample(range(self.count), k):
            base, first = self.offset[g], self.first[g]
            for j in range(self.size[g]):
                i = first + j
                self.position[base + j] = max(
                    cluster.lso[i], cluster.leo[i] - rnd.randrange(_BEHIND // 10)
                )
            self.version[g] = version
        return k

    def changes_body(self, since: int | None) -> bytes:
        """The groups changed after ``since`` in :func:`~broker_agent.contract.models.group_changes_tsv`'s form
        (all of them without one, or for a ``since`` outside this process's versions)."""
        cluster = self.cluster
        full = since is None or not cluster.start_version <= since <= cluster.version
        changed = [g for g in range(self.count) if full or self.version[g] > since]
        head = group_tsv_head(cluster.version, full, ((self.name(g), 1, 1) for g in changed))
        # rows written here (names need no escaping): the full answer is 500,000 of them
        topics, position = cluster.topics, self.position
        lines = [head, "\n"]
        for g in changed:
            prefix = f"{self.name(g)}\t{topics[self.topic[g]]}\t"
            base = self.offset[g]
            lines.extend(f"{prefix}{j}\t{position[base + j]}\t1\t1\n" for j in range(self.size[g]))
        return "".join(lines).encode()

    def list_body(self) -> bytes:
        """Every group as the coordinator's ``GET /v1/groups`` JSON list (``GroupView``)."""
        topics = self.cluster.topics
        views = []
        for g in range(self.count):
            topic, base, size = topics[self.topic[g]], self.offset[g], self.size[g]
            member = f"member-{g:05d}"
            views.append(
                {
                    "group_id": self.name(g),
                    "generation": 1,
                    "members": [
                        {
                            "member_id": member,
                            "topics": [topic],
                            "assignment": {topic: list(range(size))},
                        }
                    ],
                    "offsets": {topic: {j: self.position[base + j] for j in range(size)}},
                }
            )
        return json.dumps(views, separators=(",", ":")).encode()
