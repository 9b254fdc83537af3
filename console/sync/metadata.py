"""The controller's side of a sync: fetch its metadata (incremental by version, as COPY rows),
stage it and merge topics and partitions, and delete what the controller no longer lists.

A part of the sync (:mod:`console.sync.core` composes it): it owns the staged topics and
partitions; from the staging part it takes the log dirs table (the controller's view goes in
first) and the staged replicas (a new partition's offsets are its leader's), and it leaves the
topics and partitions it wrote in ``touched_topic`` / ``touched_partition`` for
:mod:`console.sync.aggregates`. What the run records of it is its :class:`ControllerOutcome`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psycopg
from django.db import transaction

from broker_agent.contract.metadata_rows import split_metadata_tsv
from broker_agent.contract.models import ClusterMetadata, split_partition_key
from console.choices import BrokerState, TopicConfig
from console.models import Cluster
from console.sync.common import (
    MalformedAnswer,
    SyncCursor,
    error_text,
    loads_json,
    raw_json,
    split_topics,
)
from console.sync.rows import (
    BROKER_COLUMNS,
    MIN_ISR_DEFAULT,
    PARTITION_COLUMNS,
    PARTITION_NOT_NULL,
    STAGE_PARTITIONS_SQL,
    STAGE_TOPIC_ROWS_SQL,
    STAGE_TOPICS_SQL,
    TIER_METRICS,
    TOPIC_COLUMNS,
    TOPIC_ROW_COLUMNS,
    TOPIC_ROW_NOT_NULL,
    logdir_rows,
)
from console.sync.sources import ClusterSource, metadata_rows
from console.sync.staging import StageTable
from console.sync.staging_area import StagingArea

__all__ = ["ANALYZE_PARTITIONS_AFTER", "ANALYZE_TOPICS_AFTER", "ControllerOutcome", "MetadataSync"]

log = logging.getLogger("console.sync")

#: A sync that staged (or inserted) at least this many topics analyses the staged topics (or
#: console_topic) before joining on them.
ANALYZE_TOPICS_AFTER = 100

#: A sync that wrote at least this many partitions analyses console_partition before the replicas
#: are joined with it.
ANALYZE_PARTITIONS_AFTER = 100_000

#: The staged topics' and partitions' columns the merge joins on (the ones analysed).
TOPIC_KEYS = ("name",)
PARTITION_KEYS = ("topic_name", "partition", "leader")

#: The controller's answer is handed to PostgreSQL in pieces of whole topics of about this size
#: (:func:`console.sync.common.split_topics`).
METADATA_CHUNK_BYTES = 32 << 20


@dataclasses.dataclass
class ControllerOutcome:
    """What the controller's side did, for the sync's record and the cluster row."""

    version: int  # the metadata version applied (the one given when none was)
    error: str = ""  # why the controller failed; empty when it answered
    changed: bool = False  # it answered with changed metadata, which was applied
    topics_changed: int = 0  # topics written or deleted
    partitions_upserted: int = 0

    @property
    def ok(self) -> bool:
        return not self.error


class MetadataSync:
    """The controller's side of one sync (see the module docstring): :meth:`fetch` stages its
    answer, :meth:`stage_controller_dirs` its log dirs, :meth:`apply` merges."""

    def __init__(
        self,
        db: SyncCursor,
        staging: StagingArea,
        cluster: Cluster,
        source: ClusterSource,
        *,
        ask_all: bool,
        fresh: bool,
        version: int,
    ):
        """``version`` is what :attr:`outcome` records when no metadata is applied."""
        self.db = db
        self.staging = staging
        self.cluster = cluster
        self.source = source
        self.ask_all = ask_all
        self.fresh = fresh
        self.outcome = ControllerOutcome(version=version)
        # The staged topics and partitions, and the topics to delete: set by a changed answer.
        self.topics: StageTable | None = None
        self.parts: StageTable | None = None
        self.gone_topics: list[str] = []

    def fetch(self) -> ClusterMetadata | None:
        """The controller's answer, staged; None when it failed (recorded in :attr:`outcome`)."""
        since = (
            None
            if self.ask_all or self.cluster.metadata_version < 0
            else (self.cluster.metadata_version)
        )
        try:
            body = metadata_rows(self.source, since)
            with transaction.atomic():  # a savepoint: a malformed answer fails the controller only
                md = self.stage_metadata(body)
        except Exception as exc:  # any failure of the controller marks it stale, nothing else
            log.warning("cluster %s: controller failed: %s", self.cluster.name, exc)
            self.outcome.error = error_text(exc)
            return None
        return md

    def stage_metadata(self, body: bytes) -> ClusterMetadata:
        """Hand the controller's answer to PostgreSQL: its topics (those that changed) into
        ``stage_topic`` and their partitions into ``stage_partition``. Answers the metadata
        without its topics (validated by pydantic); :meth:`apply` merges.

        The answer is ``format=tsv`` (:mod:`broker_agent.contract.metadata_rows`): its rows go in with
        ``COPY`` as they came, and NOT NULL columns refuse a row that lacks a field. A JSON
        answer (a controller that predates the format) is expanded in PostgreSQL instead."""
        try:
            split = split_metadata_tsv(body)
        except ValueError as exc:  # incl. pydantic's ValidationError
            raise MalformedAnswer(f"controller metadata: {exc}") from exc
        md = self._stage_json(body) if split is None else self._stage_rows(*split)
        if not md.changed:
            return md
        topics, parts = self._staged_tables()
        self.gone_topics = sorted(md.removed_topics)
        skipped = 0
        if md.full:
            self.db.execute(
                "SELECT name FROM console_topic WHERE cluster_id = %s AND name NOT IN "
                "(SELECT name FROM stage_topic) ORDER BY name",
                [self.cluster.pk],
            )
            self.gone_topics = [row[0] for row in self.db.fetchall()]
        if md.full and not self.ask_all:  # only topics whose metadata digest changed are rewritten
            skipped = self.db.sql(
                """
                DELETE FROM stage_topic s USING console_topic t
                WHERE t.cluster_id = %(cluster)s AND t.name = s.name
                  AND t.metadata_digest = s.metadata_digest
                """
            )
            topics.rows -= skipped
        if skipped or (split is not None and not self.ask_all):
            # The skipped topics' partitions, and rows of a topic the answer does not list
            # (a malformed answer: merged, they would land in a topic of the same name). When
            # everything was asked for, no topic was skipped and every topic the answer does
            # not list is deleted before partitions are merged: such rows find no topic.
            parts.rows -= self.db.sql(
                "DELETE FROM stage_partition s WHERE NOT EXISTS "
                "(SELECT 1 FROM stage_topic t WHERE t.name = s.topic_name)"
            )
        return md

    def _staged_tables(self) -> tuple[StageTable, StageTable]:
        """The staged topics and partitions: there once a changed answer was staged."""
        if self.topics is None or self.parts is None:
            raise RuntimeError("no changed metadata was staged")
        return self.topics, self.parts

    def _stage_rows(
        self, md: ClusterMetadata, topic_rows: memoryview, partition_rows: memoryview
    ) -> ClusterMetadata:
        """A ``format=tsv`` answer into ``stage_topic`` / ``stage_partition``."""
        if not md.changed:
            return md
        raw = StageTable(
            self.db.cur, "raw_topic_row", TOPIC_ROW_COLUMNS, not_null=TOPIC_ROW_NOT_NULL
        )
        self.topics = StageTable(self.db.cur, "stage_topic", TOPIC_COLUMNS, keys=TOPIC_KEYS)
        self.parts = StageTable(
            self.db.cur,
            "stage_partition",
            PARTITION_COLUMNS,
            not_null=PARTITION_NOT_NULL,
            keys=PARTITION_KEYS,
        )
        try:
            raw.copy_text(topic_rows)
            self.parts.copy_text(partition_rows)
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            # a row with a missing field, a wrong type or the wrong number of columns
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise MalformedAnswer(f"controller metadata: bad row: {first}") from exc
        self.topics.rows = self.db.sql(STAGE_TOPIC_ROWS_SQL, self._topic_params(md))
        if self.topics.rows >= ANALYZE_TOPICS_AFTER:
            self.topics.analyze()
        return md

    def _topic_params(self, md: ClusterMetadata) -> dict[str, Any]:
        return {
            "delta": not md.full,
            "min_isr_key": TopicConfig.MIN_INSYNC_REPLICAS,
            "min_isr_default": MIN_ISR_DEFAULT,
        }

    def _stage_json(self, body: bytes) -> ClusterMetadata:
        """A JSON answer (a controller that predates ``format=tsv``) into ``stage_topic`` /
        ``stage_partition``, parsed and expanded by PostgreSQL."""
        # STORAGE EXTERNAL: the topics' JSON is read once, compressing it would be wasted.
        self.db.execute(
            "DROP TABLE IF EXISTS pg_temp.raw_topic; "
            "CREATE TEMP TABLE raw_topic (name text, digest text, j jsonb) ON COMMIT DROP; "
            "ALTER TABLE raw_topic ALTER COLUMN j SET STORAGE EXTERNAL"
        )
        # In pieces of whole topics (split_topics): a large cluster's answer is past what one
        # jsonb value may hold (#17); a small one is one piece.
        pieces = split_topics(body, METADATA_CHUNK_BYTES)
        envelope, chunks = pieces if pieces else (None, [body])
        insert = """
            INSERT INTO raw_topic (name, digest, j)
            SELECT t ->> 'name', md5(t::text), t FROM jsonb_array_elements(%(topics)s) t
        """
        for chunk in chunks:
            if envelope is None:  # not laid out as expected: the whole answer as one value
                envelope = self.db.raw(
                    """
                    WITH raw AS (SELECT %(body)s::jsonb AS j),
                    ins AS (INSERT INTO raw_topic (name, digest, j)
                            SELECT t ->> 'name', md5(t::text), t
                            FROM raw, jsonb_array_elements(raw.j -> 'topics') t)
                    SELECT raw.j - 'topics' FROM raw
                    """,
                    {"body": raw_json(chunk)},
                ).fetchone()[0]
            else:
                self.db.raw(insert, {"topics": raw_json(chunk)})
        md = ClusterMetadata.model_validate({**loads_json(envelope), "topics": []})
        if not md.changed:
            return md
        self.topics = StageTable(self.db.cur, "stage_topic", TOPIC_COLUMNS, keys=TOPIC_KEYS)
        self.parts = StageTable(
            self.db.cur, "stage_partition", PARTITION_COLUMNS, keys=PARTITION_KEYS
        )
        # A delta's topic is partial: its digest is blanked so a later full answer rewrites it.
        bad = self.db.raw(STAGE_TOPICS_SQL, self._topic_params(md)).fetchall()
        self.topics.rows = len(bad)
        if any(b for (b,) in bad):
            raise MalformedAnswer("controller metadata: a topic lacks a required field")
        if self.topics.rows >= ANALYZE_TOPICS_AFTER:
            # Row counts for the join below (the name column only: the JSON is not sampled);
            # unanalysed, the planner explodes every partition before joining and sorts them
            # all (7 s of a 1,000,000-partition sync).
            self.db.execute("ANALYZE raw_topic (name)")
            self.topics.analyze()
        bad = self.db.raw(STAGE_PARTITIONS_SQL).fetchall()
        self.parts.rows = len(bad)
        if any(b for (b,) in bad):
            raise MalformedAnswer("controller metadata: a partition lacks a required field")
        return md

    def stage_controller_dirs(self, md: ClusterMetadata | None) -> None:
        """The controller's view of the log dirs (from heartbeats), staged before any agent's:
        the last staged row of a dir wins (``apply_snapshots``), so an agent's own view, which
        is fresher than its last heartbeat, wins for the brokers whose agent answered."""
        if md is not None and md.changed:
            self.staging.logdirs.copy(
                row for b in md.brokers for row in logdir_rows(b.broker_id, b.log_dirs)
            )

    def apply(self, md: ClusterMetadata) -> None:
        self.outcome.version = md.version
        if not md.changed:
            return
        self.outcome.changed = True
        topics, parts = self._staged_tables()
        brokers = StageTable(self.db.cur, "stage_broker", BROKER_COLUMNS)
        brokers.copy((b.broker_id, b.url, b.alive, b.last_heartbeat_ms) for b in md.brokers)
        self.db.sql(
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

        # A partition-level delta lists every changed topic, with only its changed partitions;
        # deletions come as explicit lists. A full answer was cut to the changed topics when
        # it was staged (stage_metadata).
        delta = not md.full
        gone = self.gone_topics
        self.outcome.topics_changed = topics.rows + len(gone)
        if gone:
            self._delete_topics(gone)
        if delta and md.removed_partitions:
            self._delete_partitions(md.removed_partitions)
        if not topics.rows:
            return
        self.db.sql(
            """
            WITH upsert AS (
            INSERT INTO console_topic (cluster_id, name, topic_id, configs, tiered_state,
                tiered_epoch, disable_policy, tiering_acks, initial_partition_count,
                undeleted_partition_count, min_insync_replicas, metadata_digest, updated_at,
                partition_count, log_start_offset, local_log_start_offset, log_end_offset,
                remote_log_start_offset, remote_log_end_offset, remote_bytes, local_bytes,
                remote_segments, offline_partition_count, under_replicated_partition_count,
                under_min_isr_partition_count, offline_replica_count, marked_for_deletion_count,
                remote_partition_count)
            SELECT %(cluster)s, s.name, s.topic_id, s.configs, s.tiered_state, s.tiered_epoch,
                s.disable_policy, s.tiering_acks, s.initial_partition_count,
                s.undeleted_partition_count, s.min_insync_replicas, s.metadata_digest, %(now)s,
                0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0
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
            RETURNING xmax = 0 AS inserted  -- a row inserted (not updated) has no xmax
            )
            SELECT count(*) FILTER (WHERE inserted) FROM upsert
            """
        )
        if self.db.fetchone()[0] >= ANALYZE_TOPICS_AFTER:
            # Stale statistics (e.g. of another cluster) estimate this cluster's topics at one
            # row, and the joins on topic name below then loop over every topic per row: 18 s
            # instead of 2 s for a new 200,000-partition cluster. After many new topics only:
            # updated ones change no statistic the joins use (0.3 s of a 1% sync at 37,636
            # topics, #17).
            self.db.sql("ANALYZE console_topic")
        parts.analyze()
        self.staging.replicas.analyze()
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
                remote_segments, {metrics})
            SELECT %(cluster)s, t.id, s.topic_name, s.partition, s.leader, s.leader_epoch,
                s.partition_epoch, s.replicas, s.isr, s.offline_replicas, s.created,
                s.leader_epoch_after_creation, s.leader_epoch_before_deletion,
                s.marked_for_deletion, cardinality(s.isr) < cardinality(s.replicas),
                cardinality(s.isr) < t.min_insync_replicas, s.leader < 0,
                cardinality(s.offline_replicas) > 0, coalesce(r.log_start_offset, 0),
                coalesce(r.local_log_start_offset, 0), coalesce(r.log_end_offset, 0),
                coalesce(r.high_watermark, 0), coalesce(r.remote_log_start_offset, -1),
                coalesce(r.remote_log_end_offset, -1), coalesce(r.remote_bytes, 0),
                coalesce(r.size_bytes, 0), coalesce(r.remote_segments, 0), {leader_metrics}
            FROM stage_partition s
            JOIN console_topic t ON t.cluster_id = %(cluster)s AND t.name = s.topic_name
            LEFT JOIN stage_replica r ON r.topic = s.topic_name AND r.partition = s.partition
                AND r.broker_id = s.leader
            """.format(  # noqa: S608 - column names from TIER_METRICS
            metrics=", ".join(TIER_METRICS),
            leader_metrics=", ".join(f"coalesce(r.{c}, 0)" for c in TIER_METRICS),
        )
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
        # Each partition's leader replica is found by a hash of the staged partitions probed
        # by the staged replicas. The planner prices that hash by one key column's skew (a
        # 10,000-partition topic's name) and would sort all 3,000,000 staged replicas on disk
        # for a merge join instead (8.6 s against 3.4 s at 1,000,000 partitions, #17). A
        # first sync's partitions find their topics by a hash of the topics too, not by a
        # cached index lookup per partition (3.2 s against 2.7 s for the join at that size).
        nestloop = "off" if self.fresh else "on"
        self.db.execute(
            "SELECT set_config('enable_mergejoin', 'off', true), "
            "set_config('enable_nestloop', %s, true)",
            [nestloop],
        )
        if self.fresh:
            # In (topic, partition) order, not in the order the hash join meets them (by the
            # staged replicas: broker by broker): each index is then filled at its right end,
            # and a topic's partitions (and, written in partition order, their replicas) sit
            # side by side for the pages that read them. 13.6 s -> 9.7-10.5 s at 1,000,000
            # partitions on fc-v657, the sort included (#17).
            self.outcome.partitions_upserted = self.db.sql(
                insert + " ORDER BY s.topic_name, s.partition"
            )
        else:
            # The partitions written are those whose offsets derive() looks at again (with
            # those whose replicas moved): a listed partition whose row did not change kept its
            # leader. Taken from the upsert itself rather than looked up again by name (0.11 s
            # of a 1% sync, #17).
            self.outcome.partitions_upserted = self.db.sql(
                f"WITH written AS ({insert} {upsert} RETURNING id) "  # noqa: S608
                "INSERT INTO touched_partition (id) SELECT id FROM written"
            )
        self.db.execute(
            "SELECT set_config('enable_mergejoin', 'on', true), "
            "set_config('enable_nestloop', 'on', true)"
        )
        if self.outcome.partitions_upserted >= ANALYZE_PARTITIONS_AFTER:
            # The replicas are resolved against these rows next: without statistics the planner
            # takes a bulk-written table for its old size (minutes at 1,000,000 partitions).
            self.db.sql("ANALYZE console_partition")
        self.db.sql(
            """
            INSERT INTO touched_topic (id)
            SELECT t.id FROM console_topic t JOIN stage_topic s ON s.name = t.name
            WHERE t.cluster_id = %(cluster)s
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
        self.db.sql(f"DELETE FROM console_replica WHERE partition_id IN ({gone_partitions})")  # noqa: S608
        self.db.sql(f"DELETE FROM console_partition WHERE id IN ({gone_partitions})")  # noqa: S608

    def _delete_partitions(self, keys: list[str]) -> None:
        """Delete ``topic:partition`` keys (a delta's ``removed_partitions``) and their replicas."""
        topics, parts = [], []
        for key in keys:
            topic, part = split_partition_key(key)
            topics.append(topic)
            parts.append(part)
        ids = """
            SELECT p.id FROM console_partition p
            JOIN unnest(%(topics)s::text[], %(parts)s::int[]) AS k(topic, partition)
              ON p.topic_name = k.topic AND p.partition = k.partition
            WHERE p.cluster_id = %(cluster)s
        """
        params = {"topics": topics, "parts": parts}
        self.db.sql(f"DELETE FROM console_replica WHERE partition_id IN ({ids})", params)  # noqa: S608
        self.db.sql(f"DELETE FROM console_partition WHERE id IN ({ids})", params)  # noqa: S608

    def _delete_topics(self, names: list[str]) -> None:
        params = {"names": names}
        topic_ids = (
            "SELECT id FROM console_topic WHERE cluster_id = %(cluster)s AND name = ANY(%(names)s)"
        )
        self.db.sql(
            "DELETE FROM console_replica WHERE partition_id IN "  # noqa: S608
            f"(SELECT id FROM console_partition WHERE topic_id IN ({topic_ids}))",
            params,
        )
        self.db.sql(f"DELETE FROM console_partition WHERE topic_id IN ({topic_ids})", params)  # noqa: S608
        self.db.sql(f"DELETE FROM console_topicsample WHERE topic_id IN ({topic_ids})", params)  # noqa: S608
        self.db.sql(
            "DELETE FROM console_topic WHERE cluster_id = %(cluster)s AND name = ANY(%(names)s)",
            params,
        )
