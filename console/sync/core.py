"""Sync one cluster: controller metadata and every agent's snapshot into PostgreSQL.

Design (console issue, "Sync"):

1. **Incremental by version.** The controller is asked for metadata ``since`` the version last
   applied (it answers ``changed=False`` when nothing moved); each agent for its snapshot
   ``since`` the snapshot version last applied (it answers only replicas changed since, plus the
   keys ``removed``). When the controller did change, only topics whose metadata digest changed
   are rewritten. ``full=True`` asks everything again (``manage.py sync_cluster --full``).
2. **Bulk.** Every kind of row is ``COPY``-ed into a temporary table and merged with one
   statement (:mod:`console.sync.staging`); unchanged rows are not rewritten. Derived values
   (partition offsets from the leader's replica, topic / broker / cluster aggregates) are then
   recomputed with set-based ``UPDATE ... FROM`` over the partitions this sync touched. Agents
   answer as COPY rows (``format=tsv``), so their replicas are never parsed as JSON. A
   cluster's first sync has nothing to merge with: it inserts plainly and skips the
   comparisons and deletes (``fresh``).
3. **One transaction, one sync at a time.** All writes of a sync commit together, so a page
   never sees half a sync; a transaction-level advisory lock per cluster makes a concurrent
   sync (beat and webhook at once) return :class:`SyncBusy` instead of waiting.
4. **Per-source staleness.** A controller or agent that fails is recorded on its row (error,
   time) and keeps its last good data and ``last_good_at``; everything else keeps syncing. A
   failed agent is asked from its last applied version again next time, so nothing is missed.
   Replicas an agent reports for partitions the console does not know yet (agent ahead of the
   controller) leave that agent's version where it was, so they are fetched again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta

import psycopg
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from broker_agent.models import BrokerSnapshot, ClusterMetadata, split_snapshot_tsv
from console.choices import BrokerState, LogDirState, SyncTrigger, TopicConfig
from console.models import Broker, Cluster, SyncRun
from console.sync.rows import (
    BROKER_COLUMNS,
    LOGDIR_COLUMNS,
    MIN_ISR_DEFAULT,
    PARTITION_COLUMNS,
    REMOVED_COLUMNS,
    REPLICA_COLUMNS,
    REPLICA_DATA,
    REPLICA_NOT_NULL,
    STAGE_PARTITIONS_SQL,
    STAGE_SNAPSHOT_SQL,
    STAGE_TOPICS_SQL,
    TOPIC_COLUMNS,
    logdir_rows,
    removed_rows,
)
from console.sync.sources import ClusterSource, HttpClusterSource, metadata_json, snapshot_rows
from console.sync.staging import StageTable

__all__ = ["SyncBusy", "SyncResult", "do_sync_cluster", "source_for"]

log = logging.getLogger("console.sync")

SYNC_RUN_RETENTION = timedelta(days=1)
MAX_PARALLEL_AGENTS = 8
#: A sync that wrote at least this many partitions and replicas analyses their tables.
ANALYZE_AFTER_ROWS = 50_000
#: A sync that staged at least this many topics analyses console_topic before joining on it.
ANALYZE_TOPICS_AFTER = 100


class SyncBusy(Exception):
    """Another sync of this cluster holds its lock; try again shortly."""


@dataclasses.dataclass
class SyncResult:
    run: SyncRun
    unknown_replicas: int = 0


def source_for(cluster: Cluster) -> HttpClusterSource:
    """The HTTP source of a registered cluster, signed with the secret its reference names."""
    return HttpClusterSource(cluster.controller_url, cluster.read_secret())


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def _raw_json(body: bytes) -> Jsonb:
    """A JSON answer as a ``jsonb`` parameter, sent as the bytes it came as (never re-encoded)."""
    return Jsonb(body, dumps=bytes)


def _loads(value: object) -> dict:
    """A small ``jsonb`` result (Django's connection hands ``jsonb`` back as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


class MalformedAnswer(ValueError):
    """A controller or agent answer that lacks required fields."""


class _Backwards(Exception):
    """An agent answered from a version older than the one asked from (it restarted)."""


def _lock_key(cluster_pk: int) -> int:
    return zlib.crc32(f"strata-sync:{cluster_pk}".encode())


class _Sync:
    """The state of one sync run; see the module docstring for the steps."""

    def __init__(self, cluster: Cluster, source: ClusterSource, *, full: bool, trigger: str):
        self.cluster = cluster
        self.source = source
        self.full = full
        self.trigger = trigger
        self.now = timezone.now()
        self.errors: dict[str, str] = {}
        self.cur = None
        self.run_stats = {
            "metadata_changed": False,
            "topics_changed": 0,
            "partitions_upserted": 0,
            "replicas_upserted": 0,
            "replicas_deleted": 0,
            "brokers_synced": 0,
            "brokers_failed": 0,
            "controller_ok": True,
        }
        self.metadata_version = cluster.metadata_version
        self.unknown_replicas = 0
        self.fresh = False  # set under the lock by run()

    # -- SQL helpers -------------------------------------------------------------------------

    def sql(self, statement: str, params: dict | None = None) -> int:
        self.cur.execute(statement, {"cluster": self.cluster.pk, "now": self.now, **(params or {})})
        return self.cur.rowcount

    # -- controller --------------------------------------------------------------------------

    def fetch_metadata(self) -> ClusterMetadata | None:
        since = (
            None
            if self.full or self.cluster.metadata_version < 0
            else (self.cluster.metadata_version)
        )
        try:
            body = metadata_json(self.source, since)
            with transaction.atomic():  # a savepoint: a malformed answer fails the controller only
                md = self.stage_metadata(body)
        except Exception as exc:  # any failure of the controller marks it stale, nothing else
            log.warning("cluster %s: controller failed: %s", self.cluster.name, exc)
            self.errors["controller"] = _error_text(exc)
            self.run_stats["controller_ok"] = False
            return None
        return md

    def raw(self, statement: str, params: dict | None = None):
        """Execute on the psycopg cursor itself: its parameters are whole JSON answers (tens of
        MB), which Django's debug wrapper would format into its query log."""
        raw = self.cur.cursor
        raw.execute(statement, {"cluster": self.cluster.pk, "now": self.now, **(params or {})})
        return raw

    def stage_metadata(self, body: bytes) -> ClusterMetadata:
        """Hand the controller's answer to PostgreSQL: its topics (those that changed) into
        ``stage_topic`` and their partitions into ``stage_partition``. Answers the metadata
        without its topics (validated by pydantic); :meth:`apply_metadata` merges."""
        # STORAGE EXTERNAL: the topics' JSON is read once, compressing it would be wasted.
        self.cur.execute(
            "DROP TABLE IF EXISTS pg_temp.raw_topic; "
            "CREATE TEMP TABLE raw_topic (name text, digest text, j jsonb) ON COMMIT DROP; "
            "ALTER TABLE raw_topic ALTER COLUMN j SET STORAGE EXTERNAL"
        )
        envelope = self.raw(
            """
            WITH raw AS (SELECT %(body)s::jsonb AS j),
            ins AS (INSERT INTO raw_topic (name, digest, j)
                    SELECT t ->> 'name', md5(t::text), t
                    FROM raw, jsonb_array_elements(raw.j -> 'topics') t)
            SELECT raw.j - 'topics' FROM raw
            """,
            {"body": _raw_json(body)},
        ).fetchone()[0]
        md = ClusterMetadata.model_validate({**_loads(envelope), "topics": []})
        if not md.changed:
            return md
        delta = not md.full
        self.gone_topics: list[str] = sorted(md.removed_topics) if delta else []
        if not delta:
            self.cur.execute(
                "SELECT name FROM console_topic WHERE cluster_id = %s AND name NOT IN "
                "(SELECT name FROM raw_topic WHERE name IS NOT NULL) ORDER BY name",
                [self.cluster.pk],
            )
            self.gone_topics = [row[0] for row in self.cur.fetchall()]
            if not self.full:  # only topics whose metadata digest changed are rewritten
                self.sql(
                    """
                    DELETE FROM raw_topic r USING console_topic t
                    WHERE t.cluster_id = %(cluster)s AND t.name = r.name
                      AND t.metadata_digest = r.digest
                    """
                )
        self.topics = StageTable(self.cur, "stage_topic", TOPIC_COLUMNS)
        self.parts = StageTable(self.cur, "stage_partition", PARTITION_COLUMNS)
        # A delta's topic is partial: its digest is blanked so a later full answer rewrites it.
        bad = self.raw(
            STAGE_TOPICS_SQL,
            {
                "delta": delta,
                "min_isr_key": TopicConfig.MIN_INSYNC_REPLICAS,
                "min_isr_default": MIN_ISR_DEFAULT,
            },
        ).fetchall()
        self.topics.rows = len(bad)
        if any(b for (b,) in bad):
            raise MalformedAnswer("controller metadata: a topic lacks a required field")
        bad = self.raw(STAGE_PARTITIONS_SQL).fetchall()
        self.parts.rows = len(bad)
        if any(b for (b,) in bad):
            raise MalformedAnswer("controller metadata: a partition lacks a required field")
        return md

    def apply_metadata(self, md: ClusterMetadata) -> None:
        self.metadata_version = md.version
        if not md.changed:
            return
        self.run_stats["metadata_changed"] = True
        brokers = StageTable(self.cur, "stage_broker", BROKER_COLUMNS)
        brokers.copy((b.broker_id, b.url, b.alive, b.last_heartbeat_ms) for b in md.brokers)
        self.sql(
            """
            INSERT INTO console_broker (cluster_id, broker_id, url, alive, state, agent_state,
                expiration_mode, offline_log_directory_count, offline_replica_count,
                last_heartbeat_ms, snapshot_version, error, updated_at)
            SELECT %(cluster)s, s.broker_id, s.url, s.alive, %(unknown)s, '', '', 0, 0,
                s.last_heartbeat_ms, -1, '', %(now)s
            FROM stage_broker s
            ON CONFLICT (cluster_id, broker_id) DO UPDATE SET
                url = EXCLUDED.url, alive = EXCLUDED.alive,
                last_heartbeat_ms = EXCLUDED.last_heartbeat_ms, updated_at = EXCLUDED.updated_at
            WHERE (console_broker.url, console_broker.alive, console_broker.last_heartbeat_ms)
                IS DISTINCT FROM (EXCLUDED.url, EXCLUDED.alive, EXCLUDED.last_heartbeat_ms)
            """,
            {"unknown": BrokerState.UNKNOWN},
        )
        # The controller's view of log dirs (from heartbeats); an agent's own snapshot, staged
        # afterwards, wins for the brokers whose agent answered.
        self.logdirs.copy(row for b in md.brokers for row in logdir_rows(b.broker_id, b.log_dirs))

        # A partition-level delta lists every changed topic, with only its changed partitions;
        # deletions come as explicit lists. A full answer was cut to the changed topics when
        # it was staged (stage_metadata).
        delta = not md.full
        gone = self.gone_topics
        self.run_stats["topics_changed"] = self.topics.rows + len(gone)
        if gone:
            self._delete_topics(gone)
        if delta and md.removed_partitions:
            self._delete_partitions(md.removed_partitions)
        if not self.topics.rows:
            return
        self.sql(
            """
            INSERT INTO console_topic (cluster_id, name, topic_id, configs, tiered_state,
                tiered_epoch, disable_policy, tiering_acks, initial_partition_count,
                undeleted_partition_count, min_insync_replicas, metadata_digest, updated_at,
                partition_count, log_start_offset, local_log_start_offset, log_end_offset,
                remote_log_start_offset, remote_log_end_offset, remote_bytes, local_bytes,
                remote_segments, offline_partition_count, under_replicated_partition_count,
                under_min_isr_partition_count, offline_replica_count, marked_for_deletion_count)
            SELECT %(cluster)s, s.name, s.topic_id, s.configs, s.tiered_state, s.tiered_epoch,
                s.disable_policy, s.tiering_acks, s.initial_partition_count,
                s.undeleted_partition_count, s.min_insync_replicas, s.metadata_digest, %(now)s,
                0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0
            FROM stage_topic s
            ON CONFLICT (cluster_id, name) DO UPDATE SET
                topic_id = EXCLUDED.topic_id, configs = EXCLUDED.configs,
                tiered_state = EXCLUDED.tiered_state, tiered_epoch = EXCLUDED.tiered_epoch,
                disable_policy = EXCLUDED.disable_policy, tiering_acks = EXCLUDED.tiering_acks,
                initial_partition_count = EXCLUDED.initial_partition_count,
                previous_undeleted_partition_count = CASE
                    WHEN console_topic.undeleted_partition_count
                         <> EXCLUDED.undeleted_partition_count
                    THEN console_topic.undeleted_partition_count
                    ELSE console_topic.previous_undeleted_partition_count END,
                partition_count_changed_at = CASE
                    WHEN console_topic.undeleted_partition_count
                         <> EXCLUDED.undeleted_partition_count
                    THEN EXCLUDED.updated_at
                    ELSE console_topic.partition_count_changed_at END,
                undeleted_partition_count = EXCLUDED.undeleted_partition_count,
                min_insync_replicas = EXCLUDED.min_insync_replicas,
                metadata_digest = EXCLUDED.metadata_digest, updated_at = EXCLUDED.updated_at
            """
        )
        if self.topics.rows >= ANALYZE_TOPICS_AFTER:
            # Stale statistics (e.g. of another cluster) estimate this cluster's topics at one
            # row, and the joins on topic name below then loop over every topic per row: 18 s
            # instead of 2 s for a new 200,000-partition cluster. A few ms at 2,000 topics.
            self.sql("ANALYZE console_topic")
        self.parts.analyze()
        self.replicas.analyze()
        # New partitions take their offsets from their leader's replica staged in this sync
        # (KIP-950: a partition's offsets are its leader's), so a full sync writes each
        # partition once; existing ones are brought up to date by derive().
        if not delta:  # before the merge: only rows that existed before are looked at
            self._delete_unlisted_partitions()
        insert = """
            INSERT INTO console_partition (cluster_id, topic_id, topic_name, partition, leader,
                leader_epoch, partition_epoch, replicas, isr, offline_replicas, created,
                leader_epoch_after_creation, leader_epoch_before_deletion, marked_for_deletion,
                under_replicated, under_min_isr, offline, has_offline_replicas,
                log_start_offset, local_log_start_offset, log_end_offset, high_watermark,
                remote_log_start_offset, remote_log_end_offset, remote_bytes, local_bytes,
                remote_segments)
            SELECT %(cluster)s, t.id, s.topic_name, s.partition, s.leader, s.leader_epoch,
                s.partition_epoch, s.replicas, s.isr, s.offline_replicas, s.created,
                s.leader_epoch_after_creation, s.leader_epoch_before_deletion,
                s.marked_for_deletion, s.under_replicated, s.under_min_isr, s.offline,
                s.has_offline_replicas, coalesce(r.log_start_offset, 0),
                coalesce(r.local_log_start_offset, 0), coalesce(r.log_end_offset, 0),
                coalesce(r.high_watermark, 0), coalesce(r.remote_log_start_offset, -1),
                coalesce(r.remote_log_end_offset, -1), coalesce(r.remote_bytes, 0),
                coalesce(r.size_bytes, 0), coalesce(r.remote_segments, 0)
            FROM stage_partition s
            JOIN console_topic t ON t.cluster_id = %(cluster)s AND t.name = s.topic_name
            LEFT JOIN stage_replica r ON r.topic = s.topic_name AND r.partition = s.partition
                AND r.broker_id = s.leader
            """
        upsert = """
            ON CONFLICT (topic_id, partition) DO UPDATE SET
                previous_leader = CASE WHEN console_partition.leader <> EXCLUDED.leader
                    THEN console_partition.leader ELSE console_partition.previous_leader END,
                leader_changed_at = CASE WHEN console_partition.leader <> EXCLUDED.leader
                    THEN %(now)s ELSE console_partition.leader_changed_at END,
                marked_log_start_offset = CASE
                    WHEN NOT EXCLUDED.marked_for_deletion THEN NULL
                    WHEN console_partition.marked_log_start_offset IS NULL
                    THEN console_partition.log_start_offset
                    ELSE console_partition.marked_log_start_offset END,
                leader = EXCLUDED.leader, leader_epoch = EXCLUDED.leader_epoch,
                partition_epoch = EXCLUDED.partition_epoch, replicas = EXCLUDED.replicas,
                isr = EXCLUDED.isr, offline_replicas = EXCLUDED.offline_replicas,
                created = EXCLUDED.created,
                leader_epoch_after_creation = EXCLUDED.leader_epoch_after_creation,
                leader_epoch_before_deletion = EXCLUDED.leader_epoch_before_deletion,
                marked_for_deletion = EXCLUDED.marked_for_deletion,
                under_replicated = EXCLUDED.under_replicated,
                under_min_isr = EXCLUDED.under_min_isr, offline = EXCLUDED.offline,
                has_offline_replicas = EXCLUDED.has_offline_replicas
            WHERE (console_partition.leader, console_partition.leader_epoch,
                   console_partition.partition_epoch, console_partition.replicas,
                   console_partition.isr, console_partition.offline_replicas,
                   console_partition.created, console_partition.leader_epoch_after_creation,
                   console_partition.leader_epoch_before_deletion,
                   console_partition.marked_for_deletion, console_partition.under_min_isr)
               IS DISTINCT FROM
                  (EXCLUDED.leader, EXCLUDED.leader_epoch, EXCLUDED.partition_epoch,
                   EXCLUDED.replicas, EXCLUDED.isr, EXCLUDED.offline_replicas, EXCLUDED.created,
                   EXCLUDED.leader_epoch_after_creation, EXCLUDED.leader_epoch_before_deletion,
                   EXCLUDED.marked_for_deletion, EXCLUDED.under_min_isr)
            """
        # A cluster's first sync writes into no rows of its own: a plain INSERT skips the
        # conflict check per row (the unique index still refuses a duplicate).
        self.run_stats["partitions_upserted"] = self.sql(insert if self.fresh else insert + upsert)
        self.sql(
            """
            INSERT INTO touched_topic (id)
            SELECT t.id FROM console_topic t JOIN stage_topic s ON s.name = t.name
            WHERE t.cluster_id = %(cluster)s
            """
        )
        # Only the partitions listed (a delta lists only changed ones) need their offsets
        # looked at again; their topics' aggregates are recomputed in derive().
        self.sql(
            """
            INSERT INTO touched_partition (id)
            SELECT p.id FROM stage_partition s
            JOIN console_partition p ON p.cluster_id = %(cluster)s
                AND p.topic_name = s.topic_name AND p.partition = s.partition
            """
        )

    def _delete_unlisted_partitions(self) -> None:
        """Partitions a full answer no longer lists (KIP-253: a drained partition marked for
        deletion is removed) go, with their replicas."""
        gone_partitions = """
            SELECT p.id FROM console_partition p
            JOIN console_topic t ON t.id = p.topic_id
            JOIN stage_topic st ON st.name = t.name
            WHERE t.cluster_id = %(cluster)s AND NOT EXISTS (
                SELECT 1 FROM stage_partition s
                WHERE s.topic_name = p.topic_name AND s.partition = p.partition)
        """
        self.sql(f"DELETE FROM console_replica WHERE partition_id IN ({gone_partitions})")  # noqa: S608
        self.sql(f"DELETE FROM console_partition WHERE id IN ({gone_partitions})")  # noqa: S608

    def _delete_partitions(self, keys: list[str]) -> None:
        """Delete ``topic:partition`` keys (a delta's ``removed_partitions``) and their replicas."""
        topics, parts = [], []
        for key in keys:
            topic, _, part = key.rpartition(":")
            topics.append(topic)
            parts.append(int(part))
        ids = """
            SELECT p.id FROM console_partition p
            JOIN unnest(%(topics)s::text[], %(parts)s::int[]) AS k(topic, partition)
              ON p.topic_name = k.topic AND p.partition = k.partition
            WHERE p.cluster_id = %(cluster)s
        """
        params = {"topics": topics, "parts": parts}
        self.sql(f"DELETE FROM console_replica WHERE partition_id IN ({ids})", params)  # noqa: S608
        self.sql(f"DELETE FROM console_partition WHERE id IN ({ids})", params)  # noqa: S608

    def _delete_topics(self, names: list[str]) -> None:
        params = {"names": names}
        topic_ids = (
            "SELECT id FROM console_topic WHERE cluster_id = %(cluster)s AND name = ANY(%(names)s)"
        )
        self.sql(
            "DELETE FROM console_replica WHERE partition_id IN "  # noqa: S608
            f"(SELECT id FROM console_partition WHERE topic_id IN ({topic_ids}))",
            params,
        )
        self.sql(f"DELETE FROM console_partition WHERE topic_id IN ({topic_ids})", params)  # noqa: S608
        self.sql(
            "DELETE FROM console_topic WHERE cluster_id = %(cluster)s AND name = ANY(%(names)s)",
            params,
        )

    # -- agents ------------------------------------------------------------------------------

    def brokers_to_poll(self, md: ClusterMetadata | None) -> list[tuple[int, str, int | None]]:
        """(broker id, agent URL, since) for every broker the controller or the DB knows."""
        known = {
            b["broker_id"]: b
            for b in Broker.objects.filter(cluster=self.cluster).values(
                "broker_id", "url", "snapshot_version"
            )
        }
        urls = {bid: b["url"] for bid, b in known.items()}
        if md is not None and md.changed:
            urls.update({b.broker_id: b.url for b in md.brokers})
        out = []
        for bid, url in sorted(urls.items()):
            version = known.get(bid, {}).get("snapshot_version", -1)
            since = None if self.full or version < 0 else version
            out.append((bid, url, since))
        return out

    def stage_snapshot(self, broker_id: int, body: bytes, since: int | None) -> BrokerSnapshot:
        """Hand one agent's answer to PostgreSQL (its replicas into ``stage_replica``), in a
        savepoint so that a malformed answer fails that agent only.

        The answer is ``format=tsv``: its rows go in with ``COPY`` as they came (no Python
        object per replica, no JSON for PostgreSQL to parse: 10,000 replicas in ~17 ms instead of
        ~200 ms as ``jsonb``, which was half of a 200,000-partition full sync). The stage
        table's NOT NULL columns refuse a row that lacks a required field. A JSON answer (an
        agent that predates the format) is expanded with ``jsonb_to_recordset`` instead."""
        with transaction.atomic():
            try:
                split = split_snapshot_tsv(body)
            except ValueError as exc:  # incl. pydantic's ValidationError
                raise MalformedAnswer(f"agent snapshot: {exc}") from exc
            if split is None:  # an agent that predates format=tsv answered JSON
                envelope, bad = self.raw(STAGE_SNAPSHOT_SQL, {"body": _raw_json(body)}).fetchone()
                if bad:
                    raise MalformedAnswer(f"agent snapshot: {bad} replicas lack a required field")
                snap = BrokerSnapshot.model_validate({**_loads(envelope), "replicas": []})
            else:
                snap, rows = split
                if snap.broker_id != broker_id:
                    raise MalformedAnswer(
                        f"agent snapshot: broker {snap.broker_id} answered for broker {broker_id}"
                    )
                try:
                    self.replicas.copy_text(rows)
                except (psycopg.DataError, psycopg.IntegrityError) as exc:
                    # a row with a missing field, a wrong type or the wrong number of columns
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    raise MalformedAnswer(f"agent snapshot: bad replica row: {first}") from exc
            if since is not None and not snap.full and snap.version < since:
                raise _Backwards  # rolls the savepoint back
            self.logdirs.copy(logdir_rows(snap.broker_id, snap.log_dirs))
            if snap.removed and not snap.full:
                self.removed.copy(removed_rows(snap))
        if snap.full:
            self.full_brokers.append(snap.broker_id)
        self.good_brokers.append(
            (
                snap.broker_id,
                snap.version,
                snap.state,
                snap.expiration_mode,
            )
        )
        return snap

    def apply_snapshots(self) -> None:
        self.logdirs.analyze()
        # Log dirs: the last staged row per (broker, name) wins (agent over controller).
        self.sql(
            """
            INSERT INTO console_logdir (cluster_id, broker_id, name, path, state,
                state_changed_at, total_bytes, usable_bytes, probe_latency_ms, error,
                replica_count, offline_replica_count, updated_at)
            SELECT DISTINCT ON (b.id, s.name) %(cluster)s, b.id, s.name, s.path, s.state,
                %(now)s, s.total_bytes, s.usable_bytes, s.probe_latency_ms, s.error,
                s.replica_count, s.offline_replica_count, %(now)s
            FROM (SELECT *, row_number() OVER () AS seq FROM stage_logdir) s
            JOIN console_broker b ON b.cluster_id = %(cluster)s AND b.broker_id = s.broker_id
            ORDER BY b.id, s.name, s.seq DESC
            ON CONFLICT (broker_id, name) DO UPDATE SET
                state_changed_at = CASE WHEN console_logdir.state <> EXCLUDED.state
                    THEN EXCLUDED.state_changed_at ELSE console_logdir.state_changed_at END,
                path = EXCLUDED.path, state = EXCLUDED.state,
                total_bytes = EXCLUDED.total_bytes, usable_bytes = EXCLUDED.usable_bytes,
                probe_latency_ms = EXCLUDED.probe_latency_ms, error = EXCLUDED.error,
                replica_count = EXCLUDED.replica_count,
                offline_replica_count = EXCLUDED.offline_replica_count,
                updated_at = EXCLUDED.updated_at
            WHERE (console_logdir.path, console_logdir.state, console_logdir.total_bytes,
                   console_logdir.usable_bytes, console_logdir.probe_latency_ms,
                   console_logdir.error, console_logdir.replica_count,
                   console_logdir.offline_replica_count)
               IS DISTINCT FROM
                  (EXCLUDED.path, EXCLUDED.state, EXCLUDED.total_bytes, EXCLUDED.usable_bytes,
                   EXCLUDED.probe_latency_ms, EXCLUDED.error, EXCLUDED.replica_count,
                   EXCLUDED.offline_replica_count)
            """
        )
        good_ids = [g[0] for g in self.good_brokers]
        if good_ids:
            # A dir an agent no longer reports was removed from its config (KIP-112 recovery).
            gone_dirs = """
                SELECT d.id FROM console_logdir d JOIN console_broker b ON b.id = d.broker_id
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = ANY(%(good)s)
                  AND NOT EXISTS (SELECT 1 FROM stage_logdir s
                                  WHERE s.broker_id = b.broker_id AND s.name = d.name)
            """
            self.sql(
                f"UPDATE console_replica SET log_dir_id = NULL WHERE log_dir_id IN ({gone_dirs})",  # noqa: S608
                {"good": good_ids},
            )
            self.sql(f"DELETE FROM console_logdir WHERE id IN ({gone_dirs})", {"good": good_ids})  # noqa: S608

        # Replicas: resolve names to ids once, then merge and delete against that. A first
        # sync reads the resolution once only (its insert; nothing to delete or compare), so
        # it inserts from the join itself rather than from a 600,000-row table written,
        # analysed and read back (~1 s of a 200,000-partition first sync).
        resolve = """
            SELECT p.id AS partition_id, b.id AS broker_pk, d.id AS log_dir_id, s.*
            FROM stage_replica s
            JOIN console_broker b ON b.cluster_id = %(cluster)s AND b.broker_id = s.broker_id
            LEFT JOIN console_topic t ON t.cluster_id = %(cluster)s AND t.name = s.topic
            LEFT JOIN console_partition p ON p.topic_id = t.id AND p.partition = s.partition
            LEFT JOIN console_logdir d ON d.broker_id = b.id AND d.name = s.log_dir
        """
        self.sql("DROP TABLE IF EXISTS pg_temp.resolved_replica")
        if self.fresh:
            resolved = f"({resolve}) r WHERE r.partition_id IS NOT NULL"
            self.cur.execute(
                "SELECT s.broker_id, count(*) FROM stage_replica s WHERE NOT EXISTS ("
                " SELECT 1 FROM console_topic t JOIN console_partition p ON p.topic_id = t.id"
                " WHERE t.cluster_id = %s AND t.name = s.topic AND p.partition = s.partition)"
                " GROUP BY s.broker_id",
                [self.cluster.pk],
            )
            self.behind = dict(self.cur.fetchall())
        else:
            self.sql(f"CREATE TEMP TABLE resolved_replica ON COMMIT DROP AS {resolve}")
            resolved = "resolved_replica"
            self.cur.execute(
                "SELECT broker_id, count(*) FROM resolved_replica WHERE partition_id IS NULL "
                "GROUP BY broker_id"
            )
            self.behind = dict(self.cur.fetchall())
            self.sql("DELETE FROM resolved_replica WHERE partition_id IS NULL")
            self.sql("ANALYZE resolved_replica")
        self.unknown_replicas = sum(self.behind.values())
        cols = ", ".join(REPLICA_DATA)
        excluded = ", ".join(f"EXCLUDED.{c}" for c in REPLICA_DATA)
        current = ", ".join(f"console_replica.{c}" for c in REPLICA_DATA if c != "version")
        excluded_cmp = ", ".join(f"EXCLUDED.{c}" for c in REPLICA_DATA if c != "version")
        # Replicas of agents that answered in full and no longer report them go first, so
        # that only rows from before this sync are looked at.
        deleted = 0
        if self.full_brokers and not self.fresh:
            deleted += self.sql(
                """
                DELETE FROM console_replica r USING console_broker b
                WHERE r.broker_id = b.id AND b.cluster_id = %(cluster)s
                  AND b.broker_id = ANY(%(full)s)
                  AND NOT EXISTS (SELECT 1 FROM resolved_replica s
                                  WHERE s.partition_id = r.partition_id
                                    AND s.broker_pk = r.broker_id)
                """,
                {"full": self.full_brokers},
            )
        insert = f"""
            INSERT INTO console_replica (cluster_id, partition_id, broker_id, log_dir_id, {cols})
            SELECT %(cluster)s, partition_id, broker_pk, log_dir_id, {cols}
            FROM {resolved}
            """  # noqa: S608
        upsert = f"""
            ON CONFLICT (partition_id, broker_id) DO UPDATE SET
                log_dir_id = EXCLUDED.log_dir_id, ({cols}) = ROW({excluded})
            WHERE (console_replica.log_dir_id, {current})
                IS DISTINCT FROM (EXCLUDED.log_dir_id, {excluded_cmp})
            """
        self.run_stats["replicas_upserted"] = self.sql(insert if self.fresh else insert + upsert)
        if self.removed.rows:
            deleted += self.sql(
                """
                DELETE FROM console_replica r
                USING stage_removed s, console_broker b, console_topic t, console_partition p
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = s.broker_id
                  AND t.cluster_id = %(cluster)s AND t.name = s.topic
                  AND p.topic_id = t.id AND p.partition = s.partition
                  AND r.partition_id = p.id AND r.broker_id = b.id
                """
            )
        self.run_stats["replicas_deleted"] = deleted

        # Agents that answered: their state, version and last good time.
        if self.good_brokers:
            rows = [
                g if g[0] not in self.behind else (g[0], None, *g[2:]) for g in self.good_brokers
            ]
            self.sql(
                """
                UPDATE console_broker b SET
                    snapshot_version = COALESCE(v.version, b.snapshot_version),
                    agent_state = v.state, expiration_mode = v.mode,
                    last_good_at = %(now)s, error = '', error_at = NULL, updated_at = %(now)s
                FROM unnest(%(ids)s::int[], %(versions)s::bigint[], %(states)s::text[],
                            %(modes)s::text[])
                     AS v(broker_id, version, state, mode)
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = v.broker_id
                """,
                {
                    "ids": [r[0] for r in rows],
                    "versions": [r[1] for r in rows],
                    "states": [r[2] for r in rows],
                    "modes": [r[3] for r in rows],
                },
            )
        if self.failed_brokers:
            self.sql(
                """
                UPDATE console_broker b SET error = v.error, error_at = %(now)s
                FROM unnest(%(ids)s::int[], %(errors)s::text[]) AS v(broker_id, error)
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = v.broker_id
                """,
                {
                    "ids": list(self.failed_brokers),
                    "errors": list(self.failed_brokers.values()),
                },
            )
        if not self.fresh:  # on a first sync every partition is new, hence touched already
            self.sql(
                """
                INSERT INTO touched_partition (id)
                SELECT DISTINCT partition_id FROM resolved_replica
                """
            )

    # -- derived values ----------------------------------------------------------------------

    def derive(self) -> None:
        """Offsets from the leader's replica, then topic, broker and cluster aggregates."""
        self.sql("ANALYZE touched_partition")
        # KIP-950's offsets of a partition are its leader's: remote Rx..Ry, local Lx..end. A
        # first sync wrote every partition with its leader's offsets already (apply_metadata).
        if not self.fresh:
            self.sql(
                """
                UPDATE console_partition p SET
                    log_start_offset = r.log_start_offset,
                    local_log_start_offset = r.local_log_start_offset,
                    log_end_offset = r.log_end_offset, high_watermark = r.high_watermark,
                    remote_log_start_offset = r.remote_log_start_offset,
                    remote_log_end_offset = r.remote_log_end_offset,
                    remote_bytes = r.remote_bytes, local_bytes = r.size_bytes,
                    remote_segments = r.remote_segments
                FROM (SELECT DISTINCT id FROM touched_partition) tp, console_replica r,
                     console_broker b
                WHERE p.id = tp.id AND r.partition_id = p.id AND b.id = r.broker_id
                  AND b.broker_id = p.leader
                  AND (p.log_start_offset, p.local_log_start_offset, p.log_end_offset,
                       p.high_watermark, p.remote_log_start_offset, p.remote_log_end_offset,
                       p.remote_bytes, p.local_bytes, p.remote_segments)
                      IS DISTINCT FROM
                      (r.log_start_offset, r.local_log_start_offset, r.log_end_offset,
                       r.high_watermark, r.remote_log_start_offset, r.remote_log_end_offset,
                       r.remote_bytes, r.size_bytes, r.remote_segments)
                """
            )
        self.sql(
            """
            UPDATE console_topic t SET
                partition_count = a.n, log_start_offset = a.lso,
                local_log_start_offset = a.llso, log_end_offset = a.leo,
                remote_log_start_offset = a.rlso, remote_log_end_offset = a.rleo,
                remote_bytes = a.rb, local_bytes = a.lb, remote_segments = a.rs,
                offline_partition_count = a.offline, under_replicated_partition_count = a.urp,
                under_min_isr_partition_count = a.umi, offline_replica_count = a.orc,
                marked_for_deletion_count = a.marked
            FROM (
                SELECT p.topic_id, count(*) AS n, sum(p.log_start_offset) AS lso,
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
            """
        )
        # KIP-112 OfflineReplicaCount per broker: partitions listing it as an offline replica
        # (replicas on dead brokers and on offline log dirs), and OfflineLogDirectoryCount.
        self.sql(
            """
            UPDATE console_broker b SET
                offline_replica_count = coalesce(o.n, 0),
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

    def fetch_snapshot(self, broker_id: int, url: str, since: int | None) -> bytes:
        return snapshot_rows(self.source, broker_id, url, since)

    def run(self) -> SyncResult:
        started = time.monotonic()
        self.good_brokers: list[tuple] = []
        self.failed_brokers: dict[int, str] = {}
        self.full_brokers: list[int] = []
        self.behind: dict[int, int] = {}
        with transaction.atomic(), connection.cursor() as cur:
            self.cur = cur
            self.sql(
                "SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": _lock_key(self.cluster.pk)}
            )
            if not cur.fetchone()[0]:
                raise SyncBusy(f"a sync of {self.cluster.name} is running")
            # Read under the lock: a sync that ran meanwhile moved the versions on.
            self.cluster.refresh_from_db()
            # A cluster with no partition yet (its first sync) has no row to merge with: its
            # partitions and replicas are INSERTed without the per-row conflict check and
            # nothing is looked for to delete (~1.5 s of a 200,000-partition first sync).
            cur.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM console_partition WHERE cluster_id = %s)",
                [self.cluster.pk],
            )
            self.fresh = cur.fetchone()[0]
            cur.execute(
                "DROP TABLE IF EXISTS pg_temp.touched_topic, pg_temp.touched_partition; "
                "CREATE TEMP TABLE touched_topic (id bigint) ON COMMIT DROP; "
                "CREATE TEMP TABLE touched_partition (id bigint) ON COMMIT DROP"
            )
            self.logdirs = StageTable(cur, "stage_logdir", LOGDIR_COLUMNS)
            self.replicas = StageTable(
                cur, "stage_replica", REPLICA_COLUMNS, not_null=REPLICA_NOT_NULL
            )
            self.removed = StageTable(cur, "stage_removed", REMOVED_COLUMNS)
            md = self.fetch_metadata()
            polls = self.brokers_to_poll(md)
            workers = max(1, min(MAX_PARALLEL_AGENTS, len(polls)))
            # Agents are read in parallel and each answer is staged as it arrives; at most
            # ``workers`` answers are in flight. Metadata is merged once the replicas are
            # staged, so new partitions are written with their offsets in one go.
            with ThreadPoolExecutor(workers, thread_name_prefix="strata-sync") as pool:
                pending = iter(polls)
                window: list[tuple[int, str, int | None, Future]] = []

                def submit_next() -> None:
                    for bid, url, since in pending:
                        window.append(
                            (bid, url, since, pool.submit(self.fetch_snapshot, bid, url, since))
                        )
                        return

                for _ in range(2 * workers):
                    submit_next()
                while window:
                    bid, url, since, future = window.pop(0)
                    submit_next()
                    try:
                        try:
                            self.stage_snapshot(bid, future.result(), since)
                        except _Backwards:
                            # The agent's versions went backwards (it restarted): start over
                            # from a full one.
                            self.stage_snapshot(bid, self.fetch_snapshot(bid, url, None), None)
                    except Exception as exc:  # one agent failing never stops the others
                        log.warning("cluster %s: agent %s failed: %s", self.cluster.name, bid, exc)
                        self.failed_brokers[bid] = _error_text(exc)
                        self.errors[f"broker {bid}"] = _error_text(exc)
                    del future  # the answer's bytes go once staged
            if md is not None:
                self.apply_metadata(md)
            self.replicas.analyze()
            self.apply_snapshots()
            self.derive()
            self.run_stats["brokers_synced"] = len(self.good_brokers)
            self.run_stats["brokers_failed"] = len(self.failed_brokers)
            result = self.finish(started)
        self.analyze_if_bulk()
        return result

    def analyze_if_bulk(self) -> None:
        """Refresh the planner's statistics after a bulk write (a first or full sync).

        Right after 600,000 replicas are written autovacuum has not analysed the tables yet
        (it waits up to a minute), and the pages' plans go wrong meanwhile: the topic page's
        per-broker task query hash-joins every replica (120 ms instead of 3 ms). ``ANALYZE``
        samples a fixed number of rows (~0.5 s at this size); a sync that wrote less than
        ``ANALYZE_AFTER_ROWS`` rows (an incremental one) leaves it to autovacuum.
        """
        written = (
            self.run_stats["partitions_upserted"]
            + self.run_stats["replicas_upserted"]
            + self.run_stats["replicas_deleted"]
        )
        if written >= ANALYZE_AFTER_ROWS:
            with connection.cursor() as cur:
                cur.execute("ANALYZE console_topic, console_partition, console_replica")

    def finish(self, started: float) -> SyncResult:
        finished = timezone.now()
        duration_ms = int((time.monotonic() - started) * 1000)
        run = SyncRun.objects.create(
            cluster=self.cluster,
            trigger=self.trigger,
            started_at=self.now,
            finished_at=finished,
            duration_ms=duration_ms,
            full=self.full,
            metadata_version=self.metadata_version,
            errors=self.errors,
            **self.run_stats,
        )
        updates = {
            "metadata_version": self.metadata_version,
            "synced_at": finished,
            "sync_duration_ms": duration_ms,
        }
        if self.run_stats["controller_ok"]:
            updates.update(controller_last_good_at=finished, controller_error="")
            updates["controller_error_at"] = None
        else:
            updates.update(controller_error=self.errors["controller"], controller_error_at=finished)
        Cluster.objects.filter(pk=self.cluster.pk).update(**updates)
        SyncRun.objects.filter(
            cluster=self.cluster, started_at__lt=self.now - SYNC_RUN_RETENTION
        ).delete()
        for key, value in updates.items():
            setattr(self.cluster, key, value)
        return SyncResult(run=run, unknown_replicas=self.unknown_replicas)


def do_sync_cluster(
    cluster: Cluster,
    *,
    acting_user=None,
    source: ClusterSource | None = None,
    full: bool = False,
    trigger: str = SyncTrigger.MANUAL,
    source_factory: Callable[[Cluster], ClusterSource] = source_for,
) -> SyncResult:
    """Sync ``cluster`` from its controller and agents (see the module docstring).

    ``acting_user`` is whoever asked (None for beat and webhooks); a sync changes only Strata's
    copy of the inventory, never the cluster, so it writes a :class:`SyncRun`, not an audit
    event. Raises :class:`SyncBusy` only if the lock cannot be had (it waits for it otherwise).
    """
    own = source is None
    started = timezone.now()
    try:
        src = source_factory(cluster) if own else source
    except Exception as exc:  # e.g. the secret file is missing: recorded like any failure
        _record_failure(cluster, trigger, started, full, {"secret": _error_text(exc)})
        raise
    try:
        return _Sync(cluster, src, full=full, trigger=trigger).run()
    except SyncBusy:
        raise
    except Exception as exc:
        log.exception("cluster %s: sync failed", cluster.name)
        _record_failure(cluster, trigger, started, full, {"sync": _error_text(exc)})
        raise
    finally:
        if own:
            src.close()


def _record_failure(cluster: Cluster, trigger: str, started, full: bool, errors: dict) -> None:
    """A sync that failed as a whole still leaves a record (outside its rolled-back work)."""
    finished = timezone.now()
    SyncRun.objects.create(
        cluster=cluster,
        trigger=trigger,
        started_at=started,
        finished_at=finished,
        duration_ms=int((finished - started).total_seconds() * 1000),
        full=full,
        metadata_version=cluster.metadata_version,
        controller_ok="controller" not in errors,
        errors=errors,
    )
