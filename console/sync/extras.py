"""What a sync learns beside partitions and replicas, each a handful of rows: KIP-966's eligible
leader replicas of a ``kafka`` cluster's partitions (DescribeTopicPartitions), and the replicas
being moved between two dirs of their broker (KIP-113's future replicas), of every broker whose
answer the sync applied. Rows are written only where there is an ELR or a move, and cleared
only where there was one (``partition_elr_idx``): a sync of a cluster with neither writes
nothing, whatever its size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from broker_agent.contract.models import ReplicaDirMove
from console.sync.common import SyncCursor

__all__ = ["apply_dir_moves", "apply_elr"]


def apply_elr(db: SyncCursor, elr: Mapping[tuple[str, int], tuple[list[int], list[int]]]) -> int:
    """Store ``elr`` ((topic, partition) -> (ELR, last known ELR), the partitions with either)
    on the cluster's partitions, and clear it on every other; answers the rows set."""
    db.sql(
        """
        UPDATE console_partition SET eligible_leader_replicas = '{}', last_known_elr = '{}'
        WHERE cluster_id = %(cluster)s
          AND (NOT eligible_leader_replicas = '{}' OR NOT last_known_elr = '{}')
        """
    )
    if not elr:
        return 0
    rows = [[t, p, list(e), list(k)] for (t, p), (e, k) in sorted(elr.items())]
    return db.sql(
        """
        UPDATE console_partition p SET
            eligible_leader_replicas = ARRAY(
                SELECT x::int FROM jsonb_array_elements_text(v -> 2) x),
            last_known_elr = ARRAY(SELECT x::int FROM jsonb_array_elements_text(v -> 3) x)
        FROM jsonb_array_elements(%(rows)s::jsonb) v
        WHERE p.cluster_id = %(cluster)s AND p.topic_name = v ->> 0
          AND p.partition = (v ->> 1)::int
        """,
        {"rows": json.dumps(rows)},
    )


def apply_dir_moves(db: SyncCursor, moves: Mapping[int, list[ReplicaDirMove]]) -> int:
    """Replace the dir moves of the brokers in ``moves`` (broker id -> every move it reported
    now) with those; the other brokers' stay as last reported. Answers the moves written."""
    if not moves:
        return 0
    db.sql(
        "DELETE FROM console_replicamove WHERE cluster_id = %(cluster)s "
        "AND broker_id = ANY(%(brokers)s)",
        {"brokers": sorted(moves)},
    )
    rows = [
        (
            bid,
            m.topic,
            m.partition,
            m.log_dir or "",
            m.future_log_dir,
            m.future_size_bytes,
            m.future_offset_lag,
        )
        for bid, ms in sorted(moves.items())
        for m in ms
    ]
    if not rows:
        return 0
    return db.sql(
        """
        INSERT INTO console_replicamove (cluster_id, broker_id, topic_name, partition, log_dir,
            future_log_dir, future_size_bytes, future_offset_lag, synced_at)
        SELECT %(cluster)s, (v ->> 0)::int, v ->> 1, (v ->> 2)::int, v ->> 3, v ->> 4,
            (v ->> 5)::bigint, (v ->> 6)::bigint, %(now)s
        FROM jsonb_array_elements(%(rows)s::jsonb) v
        ON CONFLICT (cluster_id, topic_name, partition, broker_id) DO NOTHING
        """,
        {"rows": json.dumps(rows)},
    )
