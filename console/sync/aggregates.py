"""Derived values of a sync, recomputed with set-based ``UPDATE ... FROM`` over what the sync
touched: partition offsets from the leader's replica, then topic, broker and cluster aggregates
(the numbers the pages show without scanning partitions). An incremental sync adds to a topic's
aggregates what its changed partitions contribute now and subtracts what they contributed
before (:meth:`AggregateSync.capture`); other syncs sum the changed topics' partitions.

A part of the sync (:mod:`console.sync.core` composes it): it needs only to know whether the sync
is a first or a full one, and reads what the other parts staged and touched from the tables
(``stage_replica``, ``stage_partition``, ``touched_topic``, ``touched_partition``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker_agent.contract.models import split_partition_key
from console.choices import BrokerState, LogDirState
from console.models.clusters import TOPIC_STATE_SUMS
from console.sync.common import SyncCursor
from console.sync.rows import TIER_METRICS

if TYPE_CHECKING:
    from broker_agent.contract.models import ClusterMetadata

__all__ = ["AggregateSync"]

_SET_METRICS = ", ".join(f"{c} = r.{c}" for c in TIER_METRICS)
_P_METRICS = ", ".join(f"p.{c}" for c in TIER_METRICS)
_R_METRICS = ", ".join(f"r.{c}" for c in TIER_METRICS)

#: What one partition adds to each of its topic's aggregates (console.models.Topic). The remote
#: offsets are summed over the partitions that have remote data (counted apart); a topic with
#: none shows -1.
_CONTRIBUTION = {
    "partition_count": "1",
    "log_start_offset": "p.log_start_offset",
    "local_log_start_offset": "p.local_log_start_offset",
    "log_end_offset": "p.log_end_offset",
    "remote_partition_count": "(p.remote_log_end_offset >= 0)::int",
    "remote_log_start_offset": (
        "CASE WHEN p.remote_log_end_offset >= 0 THEN p.remote_log_start_offset ELSE 0 END"
    ),
    "remote_log_end_offset": (
        "CASE WHEN p.remote_log_end_offset >= 0 THEN p.remote_log_end_offset ELSE 0 END"
    ),
    "remote_bytes": "p.remote_bytes",
    "local_bytes": "p.local_bytes",
    "remote_segments": "p.remote_segments",
    "offline_partition_count": "p.offline::int",
    "under_replicated_partition_count": "p.under_replicated::int",
    "under_min_isr_partition_count": "p.under_min_isr::int",
    "offline_replica_count": "coalesce(cardinality(p.offline_replicas), 0)",
    "marked_for_deletion_count": "p.marked_for_deletion::int",
    **{c: f"p.{c}" for c in TIER_METRICS},
}
_REMOTE_OFFSETS = ("remote_log_start_offset", "remote_log_end_offset")
_SUMS = ", ".join(f"sum({e})::bigint AS {c}" for c, e in _CONTRIBUTION.items())
_NEGATED_SUMS = ", ".join(f"-sum({e})::bigint AS {c}" for c, e in _CONTRIBUTION.items())
_DELTA_SUMS = ", ".join(f"sum({c})::bigint AS {c}" for c in _CONTRIBUTION)
#: A topic's aggregates from the sums over all its partitions (``a``) ...
_SET_FROM_SUMS = ", ".join(
    f"{c} = CASE WHEN a.remote_partition_count > 0 THEN a.{c} ELSE -1 END"
    if c in _REMOTE_OFFSETS
    else f"{c} = a.{c}"
    for c in _CONTRIBUTION
)
#: ... or from its current ones plus the changed partitions' new values less their old (``d``).
_SET_PLUS_DELTA = ", ".join(
    f"{c} = CASE WHEN t.remote_partition_count + d.remote_partition_count > 0 THEN "
    f"(CASE WHEN t.remote_partition_count > 0 THEN t.{c} ELSE 0 END) + d.{c} ELSE -1 END"
    if c in _REMOTE_OFFSETS
    else f"{c} = t.{c} + d.{c}"
    for c in _CONTRIBUTION
)
#: Per tiered state, the sums of Cluster.topic_states (as columns of ``g``, then as JSON).
_STATE_SUMS = ", ".join(f"sum({f})::bigint AS {f}" for f in TOPIC_STATE_SUMS)
_STATE_JSON = ", ".join(f"'{f}', g.{f}" for f in TOPIC_STATE_SUMS)
#: The partitions of a key table ``k (topic, partition)`` in this cluster.
_KEYED_PARTITIONS = """
    FROM agg_key k JOIN console_partition p ON p.cluster_id = %(cluster)s
        AND p.topic_name = k.topic AND p.partition = k.partition
"""


class AggregateSync:
    """The derived values of one sync (see the module docstring): :meth:`capture` before
    anything is written, :meth:`derive` once all is."""

    def __init__(self, db: SyncCursor, *, fresh: bool, full: bool):
        self.db = db
        self.fresh = fresh
        self.full = full
        self.incremental = False  # add and subtract the changed partitions (set by capture)

    def capture(self, md: ClusterMetadata | None) -> None:
        """Before anything is written: the partitions this sync may change and their current
        contribution to their topics' aggregates, subtracted in :meth:`derive` where their new
        one is added (an incremental sync; #17).

        A partition's row changes only here, in a sync: when the controller lists it (staged
        partitions, and a delta's removed ones) or an agent reports one of its replicas (its
        offsets come from its leader's). A first sync, a full one, and a sync answered with
        the controller's full metadata (which deletes what it no longer lists) sum every
        partition of each changed topic instead — the full recompute that also sets right
        anything an interrupted upgrade left behind.
        """
        listed = md if md is not None and md.changed else None  # the controller's partitions
        self.incremental = not (self.fresh or self.full or (listed is not None and listed.full))
        if not self.incremental:
            return
        # One row per partition: stage_replica has a row per replica (RF of them). With the
        # controller's answer unchanged the key table was that SELECT alone (no UNION to
        # deduplicate it), so every partition counted RF times: a purge seen only by the
        # agents took RF times its fenced bytes off the topic, leaving it negative (#39).
        keys = ["SELECT DISTINCT topic, partition FROM stage_replica"]
        params: dict[str, Any] = {}
        if listed is not None:
            keys.append("SELECT topic_name, partition FROM stage_partition")
            if listed.removed_partitions:
                removed = [split_partition_key(k) for k in listed.removed_partitions]
                params = {"r_topics": [t for t, _ in removed], "r_parts": [p for _, p in removed]}
                keys.append("SELECT * FROM unnest(%(r_topics)s::text[], %(r_parts)s::int[])")
        self.db.sql("DROP TABLE IF EXISTS pg_temp.agg_key, pg_temp.topic_delta")
        self.db.sql("CREATE TEMP TABLE agg_key ON COMMIT DROP AS " + " UNION ".join(keys), params)
        self.db.sql("ANALYZE agg_key")
        self.db.sql(
            f"CREATE TEMP TABLE topic_delta ON COMMIT DROP AS "
            f"SELECT p.topic_id, {_NEGATED_SUMS} {_KEYED_PARTITIONS} GROUP BY p.topic_id"
        )

    def derive(self) -> None:
        """Offsets from the leader's replica, then topic, broker and cluster aggregates."""
        self.db.sql("ANALYZE touched_partition")
        # KIP-950's offsets of a partition are its leader's: remote Rx..Ry, local Lx..end. A
        # first sync wrote every partition with its leader's offsets already (MetadataSync.apply).
        if not self.fresh:
            self.db.sql(
                f"""
                UPDATE console_partition p SET
                    log_start_offset = r.log_start_offset,
                    local_log_start_offset = r.local_log_start_offset,
                    log_end_offset = r.log_end_offset, high_watermark = r.high_watermark,
                    remote_log_start_offset = r.remote_log_start_offset,
                    remote_log_end_offset = r.remote_log_end_offset,
                    remote_bytes = r.remote_bytes, local_bytes = r.size_bytes,
                    remote_segments = r.remote_segments, {_SET_METRICS}
                FROM (SELECT DISTINCT id FROM touched_partition) tp, console_replica r,
                     console_broker b
                WHERE p.id = tp.id AND r.partition_id = p.id AND b.id = r.broker_id
                  AND b.broker_id = p.leader
                  AND (p.log_start_offset, p.local_log_start_offset, p.log_end_offset,
                       p.high_watermark, p.remote_log_start_offset, p.remote_log_end_offset,
                       p.remote_bytes, p.local_bytes, p.remote_segments, {_P_METRICS})
                      IS DISTINCT FROM
                      (r.log_start_offset, r.local_log_start_offset, r.log_end_offset,
                       r.high_watermark, r.remote_log_start_offset, r.remote_log_end_offset,
                       r.remote_bytes, r.size_bytes, r.remote_segments, {_R_METRICS})
                """  # noqa: S608
            )
        if self.incremental:
            self.db.sql(
                f"INSERT INTO topic_delta SELECT p.topic_id, {_SUMS} "
                f"{_KEYED_PARTITIONS} GROUP BY p.topic_id"
            )
            self.db.sql(
                f"""
                UPDATE console_topic t SET {_SET_PLUS_DELTA}
                FROM (SELECT topic_id, {_DELTA_SUMS} FROM topic_delta GROUP BY topic_id) d
                WHERE t.id = d.topic_id AND t.cluster_id = %(cluster)s
                """  # noqa: S608
            )
        else:
            self.db.sql(
                f"""
                UPDATE console_topic t SET {_SET_FROM_SUMS}
                FROM (
                    SELECT p.topic_id, {_SUMS}
                    FROM console_partition p
                    WHERE p.topic_id IN (SELECT p2.topic_id FROM console_partition p2
                                         JOIN touched_partition tp ON tp.id = p2.id
                                         UNION SELECT id FROM touched_topic)
                    GROUP BY p.topic_id
                ) a
                WHERE t.id = a.topic_id
                """  # noqa: S608
            )
        # KIP-112 OfflineReplicaCount per broker, as a broker reports it: a live broker's
        # replicas on its offline log dirs (partitions listing it as an offline replica while it
        # is alive). A dead broker reports nothing: its replicas are counted apart, as down.
        # And OfflineLogDirectoryCount.
        self.db.sql(
            """
            UPDATE console_broker b SET
                offline_replica_count = CASE WHEN b.alive THEN coalesce(o.n, 0) ELSE 0 END,
                down_replica_count = CASE WHEN b.alive THEN 0 ELSE coalesce(o.n, 0) END,
                offline_log_directory_count = coalesce(d.offline, 0),
                state = CASE
                    WHEN NOT b.alive THEN %(offline)s
                    WHEN coalesce(d.n, 0) > 0 AND d.offline = d.n THEN %(offline)s
                    WHEN coalesce(d.offline, 0) > 0 OR coalesce(d.degraded, 0) > 0
                        THEN %(degraded)s
                    ELSE %(online)s END
            FROM console_broker b2
            LEFT JOIN (
                SELECT broker_id, count(*) AS n,
                    count(*) FILTER (WHERE state = %(dir_offline)s) AS offline,
                    count(*) FILTER (WHERE state = %(dir_degraded)s) AS degraded
                FROM console_logdir WHERE cluster_id = %(cluster)s GROUP BY broker_id
            ) d ON d.broker_id = b2.id
            LEFT JOIN (
                SELECT x.broker_id, count(*) AS n
                FROM console_partition p, unnest(p.offline_replicas) AS x(broker_id)
                WHERE p.cluster_id = %(cluster)s AND p.has_offline_replicas
                GROUP BY x.broker_id
            ) o ON o.broker_id = b2.broker_id
            WHERE b.id = b2.id AND b2.cluster_id = %(cluster)s
            """,
            {
                "offline": BrokerState.OFFLINE,
                "degraded": BrokerState.DEGRADED,
                "online": BrokerState.ONLINE,
                "dir_offline": LogDirState.OFFLINE,
                "dir_degraded": LogDirState.DEGRADED,
            },
        )
        # The cluster's figures, and per tiered state its topics and their sums (read by
        # /metrics instead of grouping 37,636 topics per scrape, #17).
        self.db.sql(
            f"""
            UPDATE console_cluster c SET
                topic_count = a.topics, partition_count = a.n,
                offline_partition_count = a.offline, under_replicated_partition_count = a.urp,
                under_min_isr_partition_count = a.umi, offline_replica_count = a.orc,
                marked_for_deletion_count = a.marked, topic_states = a.states,
                broker_count = (SELECT count(*) FROM console_broker
                                WHERE cluster_id = %(cluster)s)
            FROM (
                SELECT coalesce(sum(g.topics), 0) AS topics, coalesce(sum(g.n), 0) AS n,
                    coalesce(sum(g.offline), 0) AS offline, coalesce(sum(g.urp), 0) AS urp,
                    coalesce(sum(g.umi), 0) AS umi, coalesce(sum(g.orc), 0) AS orc,
                    coalesce(sum(g.marked), 0) AS marked,
                    coalesce(jsonb_object_agg(g.tiered_state, jsonb_build_object(
                        'topics', g.topics, {_STATE_JSON})), '{{}}') AS states
                FROM (
                    SELECT tiered_state, count(*) AS topics, sum(partition_count) AS n,
                        sum(offline_partition_count) AS offline,
                        sum(under_replicated_partition_count) AS urp,
                        sum(under_min_isr_partition_count) AS umi,
                        sum(offline_replica_count) AS orc,
                        sum(marked_for_deletion_count) AS marked, {_STATE_SUMS}
                    FROM console_topic WHERE cluster_id = %(cluster)s GROUP BY tiered_state
                ) g
            ) a
            WHERE c.id = %(cluster)s
            """  # noqa: S608 - column names from TOPIC_STATE_SUMS
        )
