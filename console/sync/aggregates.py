"""Derived values of a sync, recomputed with set-based ``UPDATE ... FROM`` over what the sync
touched: partition offsets from the leader's replica, then topic, broker and cluster aggregates
(the numbers the pages show without scanning partitions).

A mixin of :class:`console.sync.core._Sync`: it uses the sync's ``cluster``, ``fresh``,
``result`` and the ``sql`` helper.
"""

from __future__ import annotations

from console.choices import BrokerState, LogDirState
from console.sync.rows import TIER_METRICS

__all__ = ["AggregateSync"]

_SET_METRICS = ", ".join(f"{c} = r.{c}" for c in TIER_METRICS)
_P_METRICS = ", ".join(f"p.{c}" for c in TIER_METRICS)
_R_METRICS = ", ".join(f"r.{c}" for c in TIER_METRICS)
_SUM_METRICS = ", ".join(f"sum(p.{c}) AS {c}" for c in TIER_METRICS)
_SET_TOPIC_METRICS = ", ".join(f"{c} = a.{c}" for c in TIER_METRICS)


class AggregateSync:
    """Part of :class:`console.sync.core._Sync` (see the module docstring)."""

    def derive(self) -> None:
        """Offsets from the leader's replica, then topic, broker and cluster aggregates."""
        self.sql("ANALYZE touched_partition")
        # KIP-950's offsets of a partition are its leader's: remote Rx..Ry, local Lx..end. A
        # first sync wrote every partition with its leader's offsets already (apply_metadata).
        if not self.fresh:
            self.sql(
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
        self.sql(
            f"""
            UPDATE console_topic t SET
                partition_count = a.n, log_start_offset = a.lso,
                local_log_start_offset = a.llso, log_end_offset = a.leo,
                remote_log_start_offset = a.rlso, remote_log_end_offset = a.rleo,
                remote_bytes = a.rb, local_bytes = a.lb, remote_segments = a.rs,
                offline_partition_count = a.offline, under_replicated_partition_count = a.urp,
                under_min_isr_partition_count = a.umi, offline_replica_count = a.orc,
                marked_for_deletion_count = a.marked, {_SET_TOPIC_METRICS}
            FROM (
                SELECT p.topic_id, count(*) AS n, sum(p.log_start_offset) AS lso,
                    {_SUM_METRICS},
                    sum(p.local_log_start_offset) AS llso, sum(p.log_end_offset) AS leo,
                    coalesce(sum(p.remote_log_start_offset)
                             FILTER (WHERE p.remote_log_end_offset >= 0), -1) AS rlso,
                    coalesce(sum(p.remote_log_end_offset)
                             FILTER (WHERE p.remote_log_end_offset >= 0), -1) AS rleo,
                    sum(p.remote_bytes) AS rb, sum(p.local_bytes) AS lb,
                    sum(p.remote_segments) AS rs,
                    count(*) FILTER (WHERE p.offline) AS offline,
                    count(*) FILTER (WHERE p.under_replicated) AS urp,
                    count(*) FILTER (WHERE p.under_min_isr) AS umi,
                    sum(cardinality(p.offline_replicas)) AS orc,
                    count(*) FILTER (WHERE p.marked_for_deletion) AS marked
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
        self.sql(
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
        self.sql(
            """
            UPDATE console_cluster c SET
                topic_count = a.topics, partition_count = a.n,
                offline_partition_count = a.offline, under_replicated_partition_count = a.urp,
                under_min_isr_partition_count = a.umi, offline_replica_count = a.orc,
                marked_for_deletion_count = a.marked,
                broker_count = (SELECT count(*) FROM console_broker
                                WHERE cluster_id = %(cluster)s)
            FROM (
                SELECT count(*) AS topics, coalesce(sum(partition_count), 0) AS n,
                    coalesce(sum(offline_partition_count), 0) AS offline,
                    coalesce(sum(under_replicated_partition_count), 0) AS urp,
                    coalesce(sum(under_min_isr_partition_count), 0) AS umi,
                    coalesce(sum(offline_replica_count), 0) AS orc,
                    coalesce(sum(marked_for_deletion_count), 0) AS marked
                FROM console_topic WHERE cluster_id = %(cluster)s
            ) a
            WHERE c.id = %(cluster)s
            """
        )

    # -- the run -----------------------------------------------------------------------------
