"""The sync's step for consumer groups: the controller's group coordinator (committed offsets,
generation, members) into :class:`console.models.GroupOffset`.

Groups change without the metadata version moving (a commit is not metadata), so this runs on
every sync whose controller answered. The coordinator's answer is staged with ``COPY`` and
merged: positions that moved (or whose generation or member count did) are updated, new ones
inserted, those the coordinator no longer lists deleted — never a Python object per row nor a
rewrite of every row (a fleet's 20,000 groups hold hundreds of thousands of positions, #17).
A controller without a coordinator (the synthetic scale mode) answers 404 and the cluster
simply has no groups. A failure here is recorded as the ``groups`` error of the run and leaves
the previous rows in place.
"""

from __future__ import annotations

import logging

from django.db import transaction

from console.sync.common import error_text
from console.sync.staging import StageTable

__all__ = ["GROUP_COLUMNS", "GroupSync"]

log = logging.getLogger("console.sync")

GROUP_COLUMNS = [
    ("group_id", "text"),
    ("topic", "text"),
    ("partition", "int4"),
    ("committed_offset", "int8"),
    ("generation", "int4"),
    ("members", "int4"),
]


class GroupSync:
    """Part of :class:`console.sync.core._Sync` (see the module docstring)."""

    def sync_groups(self) -> None:
        reader = getattr(self.source, "groups", None)
        if reader is None or not self.run_stats["controller_ok"]:
            return
        try:
            views = reader()
        except Exception as exc:  # the groups fail alone; the rest of the sync stands
            log.warning("cluster %s: groups failed: %s", self.cluster.name, exc)
            self.errors["groups"] = error_text(exc)
            return
        if views is None:
            return
        with transaction.atomic():  # a savepoint: a failed merge leaves the previous rows
            staged = StageTable(self.cur, "stage_group_offset", GROUP_COLUMNS)
            staged.copy(
                (g.group_id, topic, p, offset, g.generation, len(g.members))
                for g in views
                for topic, parts in g.offsets.items()
                for p, offset in parts.items()
            )
            staged.analyze()
            self.sql(
                """
                DELETE FROM console_groupoffset g
                WHERE g.cluster_id = %(cluster)s AND NOT EXISTS (
                    SELECT 1 FROM stage_group_offset s
                    WHERE s.group_id = g.group_id AND s.topic = g.topic_name
                      AND s.partition = g.partition)
                """
            )
            # synced_at: the sync that last wrote the row (a position that did not move keeps it)
            self.sql(
                """
                INSERT INTO console_groupoffset (cluster_id, group_id, topic_name, partition,
                    committed_offset, generation, members, synced_at)
                SELECT %(cluster)s, s.group_id, s.topic, s.partition, s.committed_offset,
                    s.generation, s.members, %(now)s
                FROM stage_group_offset s
                ON CONFLICT (cluster_id, group_id, topic_name, partition) DO UPDATE SET
                    committed_offset = EXCLUDED.committed_offset,
                    generation = EXCLUDED.generation, members = EXCLUDED.members,
                    synced_at = EXCLUDED.synced_at
                WHERE (console_groupoffset.committed_offset, console_groupoffset.generation,
                       console_groupoffset.members)
                    IS DISTINCT FROM
                      (EXCLUDED.committed_offset, EXCLUDED.generation, EXCLUDED.members)
                """
            )
