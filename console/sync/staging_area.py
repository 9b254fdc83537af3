"""The staging part of a sync: the tables its other parts fill and read within its transaction.

The controller's side (:mod:`console.sync.metadata`) stages its view of the log dirs and,
merging partitions, reads the agents' staged replicas (a new partition's offsets are its
leader's); the agents' side (:mod:`console.sync.snapshots`) stages their replicas, log dirs and
removed keys and merges them. Both record what they wrote in ``touched_topic`` /
``touched_partition``, which :mod:`console.sync.aggregates` recomputes from. Those two are
referred to by name in the parts' SQL; the three stage tables are handed to the parts here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import transaction

from console.sync.common import SyncCursor
from console.sync.rows import (
    LOGDIR_COLUMNS,
    REMOVED_COLUMNS,
    REPLICA_COLUMNS,
    REPLICA_NOT_NULL,
)
from console.sync.staging import StageTable

__all__ = ["StagingArea"]


class StagingArea:
    """Creates the shared temporary tables (dropped at commit) when the sync starts."""

    def __init__(self, db: SyncCursor):
        db.execute(
            "DROP TABLE IF EXISTS pg_temp.touched_topic, pg_temp.touched_partition; "
            "CREATE TEMP TABLE touched_topic (id bigint) ON COMMIT DROP; "
            "CREATE TEMP TABLE touched_partition (id bigint) ON COMMIT DROP"
        )
        self.logdirs = StageTable(
            db.cur, "stage_logdir", LOGDIR_COLUMNS, keys=("broker_id", "name")
        )
        self.replicas = StageTable(
            db.cur,
            "stage_replica",
            REPLICA_COLUMNS,
            not_null=REPLICA_NOT_NULL,
            keys=("broker_id", "topic", "partition", "log_dir"),
        )
        self.removed = StageTable(db.cur, "stage_removed", REMOVED_COLUMNS)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A savepoint for staging agents' answers: rolled back, the stage tables' row counts
        are put back too (they decide the ANALYZE, the removed-keys DELETE and whether a first
        sync looks for agents ahead of the controller)."""
        tables = (self.replicas, self.logdirs, self.removed)
        counts = [t.rows for t in tables]
        try:
            with transaction.atomic():
                yield
        except BaseException:
            for table, n in zip(tables, counts, strict=True):
                table.rows = n
            raise
