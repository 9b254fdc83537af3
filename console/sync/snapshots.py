"""The agents' side of a sync: which brokers to ask, each agent's snapshot (incremental by
version, COPY rows), staged in batches and merged into log dirs and replicas.

A part of the sync (:mod:`console.sync.core` composes it): it owns what it learns of the
agents (which answered, in full or not, which failed, which are behind the controller) and the
answers waiting to be staged; it fills and merges the staging part's replicas, log dirs and
removed keys, and leaves the partitions whose replicas it wrote in ``touched_partition`` for
:mod:`console.sync.aggregates`. The agents are asked in parallel by the run, which hands each
answer to :meth:`SnapshotSync.stage_snapshot` and calls :meth:`SnapshotSync.flush_snapshots`
once all answered; :meth:`SnapshotSync.apply` answers an :class:`AgentsOutcome`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import psycopg

from broker_agent.contract.models import (
    BrokerSnapshot,
    ClusterMetadata,
    ReplicaDirMove,
    split_snapshot_tsv,
)
from console.models import Broker, Cluster
from console.sync.common import (
    Backwards,
    MalformedAnswer,
    SyncCursor,
    error_text,
    loads_json,
    raw_json,
)
from console.sync.extras import apply_dir_moves
from console.sync.rows import (
    REPLICA_DATA,
    STAGE_SNAPSHOT_SQL,
    logdir_rows,
    removed_rows,
)
from console.sync.sources import ClusterSource, snapshot_rows
from console.sync.staging_area import StagingArea

__all__ = ["STAGE_BATCH_BYTES", "AgentsOutcome", "SnapshotSync"]

log = logging.getLogger("console.sync")

#: Agents' answers are COPY-ed into ``stage_replica`` together once this many bytes of their rows
#: are waiting (and when all answered): one COPY for all of a 1% sync's answers, a few dozen
#: for a first sync's 3,000,000 replicas.
STAGE_BATCH_BYTES = 8 << 20


def _row_count(rows: memoryview) -> int:
    """How many COPY rows ``rows`` holds: its lines, the last one with or without its newline
    (a row's own newlines are escaped as ``\\n`` in COPY's text format). Copied to be counted:
    0.12 s for 3,000,000 rows (300 MB) measured apart."""
    if not rows:
        return 0
    return bytes(rows).count(b"\n") + (rows[-1] != ord("\n"))


@dataclasses.dataclass(frozen=True)
class AgentsOutcome:
    """What the agents' side did, for the sync's record."""

    synced: int  # agents whose answer was applied
    failed: dict[int, str]  # broker id -> why its agent failed, in the order they failed
    replicas_upserted: int
    replicas_deleted: int
    unknown_replicas: int  # replicas of partitions the console does not know yet


class SnapshotSync:
    """The agents' side of one sync (see the module docstring)."""

    def __init__(
        self,
        db: SyncCursor,
        staging: StagingArea,
        cluster: Cluster,
        source: ClusterSource,
        *,
        ask_all: bool,
        fresh: bool,
    ):
        self.db = db
        self.staging = staging
        self.cluster = cluster
        self.source = source
        self.ask_all = ask_all
        self.fresh = fresh
        # (broker id, version, state, mode, store unreachable since, store error) per agent
        # whose answer is staged; of those, the ones that answered in full
        self.good_brokers: list[tuple[int, int, str, str, int | None, str]] = []
        self.full_brokers: list[int] = []
        self.failed_brokers: dict[int, str] = {}
        self.behind: dict[int, int] = {}  # broker id -> replicas of unknown partitions
        # agents' answers taken, not staged yet (flush_snapshots)
        self.pending: list[tuple[BrokerSnapshot, memoryview]] = []
        self.pending_bytes = 0
        # broker id -> the replicas it is moving between its dirs (console.sync.extras)
        self.dir_moves: dict[int, list[ReplicaDirMove]] = {}

    def known_brokers(self) -> dict[int, Mapping[str, Any]]:
        """The cluster's broker rows (id, agent URL, snapshot version), read once per sync."""
        return {
            b["broker_id"]: b
            for b in Broker.objects.filter(cluster=self.cluster).values(
                "broker_id", "url", "snapshot_version"
            )
        }

    def brokers_to_poll(
        self, md: ClusterMetadata | None, known: Mapping[int, Mapping[str, Any]]
    ) -> list[tuple[int, str, int | None]]:
        """(broker id, agent URL, since) for every broker the controller or ``known`` (the
        rows :meth:`known_brokers` read) knows."""
        urls = {bid: b["url"] for bid, b in known.items()}
        if md is not None and md.changed:
            urls.update({b.broker_id: b.url for b in md.brokers})
        out = []
        for bid, url in sorted(urls.items()):
            version = known.get(bid, {}).get("snapshot_version", -1)
            since = None if self.ask_all or version < 0 else version
            out.append((bid, url, since))
        return out

    def stage_snapshot(self, broker_id: int, body: bytes, since: int | None) -> None:
        """Take one agent's answer: checked here, its replicas handed to PostgreSQL with the
        next batch (:meth:`flush_snapshots`).

        The answer is ``format=tsv``: its rows go in with ``COPY`` as they came (no Python
        object per replica, no JSON for PostgreSQL to parse: 10,000 replicas in ~17 ms instead of
        ~200 ms as ``jsonb``, which was half of a 200,000-partition full sync). The stage
        table's NOT NULL columns refuse a row that lacks a required field. A JSON answer (an
        agent that predates the format) is expanded with ``jsonb_to_recordset`` instead, at
        once and in a savepoint of its own. Raises :class:`Backwards` (nothing staged) when the
        agent answered from before ``since``."""
        try:
            split = split_snapshot_tsv(body)
        except ValueError as exc:  # incl. pydantic's ValidationError
            raise MalformedAnswer(f"agent snapshot: {exc}") from exc
        if split is None:  # an agent that predates format=tsv answered JSON
            with self.staging.savepoint():
                envelope, bad, staged = self.db.raw(
                    STAGE_SNAPSHOT_SQL, {"body": raw_json(body)}
                ).fetchone()
                if bad:
                    raise MalformedAnswer(f"agent snapshot: {bad} replicas lack a required field")
                snap = BrokerSnapshot.model_validate({**loads_json(envelope), "replicas": []})
                if since is not None and not snap.full and snap.version < since:
                    raise Backwards  # rolls the savepoint back
                self.staging.replicas.rows += staged
                self._staged_agents([snap])
            return
        snap, rows = split
        if snap.broker_id != broker_id:
            raise MalformedAnswer(
                f"agent snapshot: broker {snap.broker_id} answered for broker {broker_id}"
            )
        if since is not None and not snap.full and snap.version < since:
            raise Backwards
        self.pending.append((snap, rows))
        self.pending_bytes += len(rows)
        if self.pending_bytes >= STAGE_BATCH_BYTES:
            self.flush_snapshots()

    def flush_snapshots(self) -> None:
        """COPY the replicas of the answers taken since the last flush, all in one, with their
        log dirs and removed keys (#17: a COPY per agent, each in a savepoint of its own, was a
        quarter of a 1% sync of 300 agents). Called when ``STAGE_BATCH_BYTES`` of rows are
        waiting and once all agents answered: a first sync's 3,000,000 replicas are never all
        held in memory.

        A batch PostgreSQL refuses (a malformed row: a missing field, a wrong type or count of
        columns) is rolled back whole and its answers are staged again one by one, each in a
        savepoint of its own: only the agent whose answer is malformed fails, as before."""
        batch, self.pending, self.pending_bytes = self.pending, [], 0
        if len(batch) > 1:
            try:
                with self.staging.savepoint():
                    self._copy_answers(batch)
                return
            except Exception:  # each answer is tried alone below
                log.info("cluster %s: a batch of agent answers was refused", self.cluster.name)
        for answer in batch:
            try:
                with self.staging.savepoint():
                    self._copy_answers([answer])
            except Exception as exc:  # one agent failing never stops the others
                self.agent_failed(answer[0].broker_id, exc)

    def _copy_answers(self, batch: list[tuple[BrokerSnapshot, memoryview]]) -> None:
        """One COPY of the answers' replica rows, then their log dirs and removed keys; raises
        :class:`MalformedAnswer` for rows PostgreSQL refuses or does not take in full."""
        sent = sum(_row_count(rows) for _, rows in batch)
        try:
            staged = self.staging.replicas.copy_text(*(rows for _, rows in batch))
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            # a row with a missing field, a wrong type or the wrong number of columns
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise MalformedAnswer(f"agent snapshot: bad replica row: {first}") from exc
        if staged != sent:  # a line COPY reads as its end of data ("\\.") cut it short
            raise MalformedAnswer(f"agent snapshot: {staged} of {sent} replica rows read")
        self._staged_agents([snap for snap, _ in batch])

    def _staged_agents(self, answers: list[BrokerSnapshot]) -> None:
        """Agents whose replicas are staged: their log dirs and removed keys are staged too,
        and they count as applied by this sync."""
        self.staging.logdirs.copy(
            row for snap in answers for row in logdir_rows(snap.broker_id, snap.log_dirs)
        )
        self.staging.removed.copy(
            row for snap in answers if snap.removed and not snap.full for row in removed_rows(snap)
        )
        for snap in answers:
            self.dir_moves[snap.broker_id] = snap.dir_moves
            if snap.full:
                self.full_brokers.append(snap.broker_id)
            self.good_brokers.append(
                (
                    snap.broker_id,
                    snap.version,
                    snap.state,
                    snap.expiration_mode,
                    snap.remote_store_unreachable_since_ms,
                    snap.remote_store_error or "",
                )
            )

    def agent_failed(self, broker_id: int, exc: BaseException) -> None:
        """Record an agent whose answer could not be had or staged; the others go on."""
        log.warning("cluster %s: agent %s failed: %s", self.cluster.name, broker_id, exc)
        self.failed_brokers[broker_id] = error_text(exc)

    def apply(self) -> AgentsOutcome:
        self.staging.logdirs.analyze()
        # Log dirs: the last staged row per (broker, name) wins (agent over controller).
        self.db.sql(
            """
            INSERT INTO console_logdir (cluster_id, broker_id, name, path, state,
                state_changed_at, total_bytes, usable_bytes, probe_latency_ms, error,
                replica_count, offline_replica_count, cordoned, updated_at)
            SELECT DISTINCT ON (b.id, s.name) %(cluster)s, b.id, s.name, s.path, s.state,
                %(now)s, s.total_bytes, s.usable_bytes, s.probe_latency_ms, s.error,
                s.replica_count, s.offline_replica_count, s.cordoned, %(now)s
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
                cordoned = EXCLUDED.cordoned, updated_at = EXCLUDED.updated_at
            WHERE (console_logdir.path, console_logdir.state, console_logdir.total_bytes,
                   console_logdir.usable_bytes, console_logdir.probe_latency_ms,
                   console_logdir.error, console_logdir.replica_count,
                   console_logdir.offline_replica_count, console_logdir.cordoned)
               IS DISTINCT FROM
                  (EXCLUDED.path, EXCLUDED.state, EXCLUDED.total_bytes, EXCLUDED.usable_bytes,
                   EXCLUDED.probe_latency_ms, EXCLUDED.error, EXCLUDED.replica_count,
                   EXCLUDED.offline_replica_count, EXCLUDED.cordoned)
            """
        )
        good_ids = [g[0] for g in self.good_brokers]
        apply_dir_moves(self.db, {bid: self.dir_moves.get(bid, []) for bid in good_ids})
        if good_ids:
            # A dir an agent no longer reports was removed from its config (KIP-112 recovery).
            gone_dirs = """
                SELECT d.id FROM console_logdir d JOIN console_broker b ON b.id = d.broker_id
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = ANY(%(good)s)
                  AND NOT EXISTS (SELECT 1 FROM stage_logdir s
                                  WHERE s.broker_id = b.broker_id AND s.name = d.name)
            """
            self.db.sql(
                f"UPDATE console_replica SET log_dir_id = NULL WHERE log_dir_id IN ({gone_dirs})",  # noqa: S608
                {"good": good_ids},
            )
            self.db.sql(
                f"DELETE FROM console_logdirsample WHERE log_dir_id IN ({gone_dirs})",  # noqa: S608
                {"good": good_ids},
            )
            self.db.sql(f"DELETE FROM console_logdir WHERE id IN ({gone_dirs})", {"good": good_ids})  # noqa: S608

        if self.fresh:
            # A new cluster's brokers and dirs were written in this transaction: without
            # statistics the planner counts one broker, estimates the replicas to resolve at a
            # few thousand and looks each of 3,000,000 up by index (#17).
            self.db.sql("ANALYZE console_broker, console_logdir")
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
        self.db.sql("DROP TABLE IF EXISTS pg_temp.resolved_replica")
        if self.fresh:
            # Replicas of partitions the console does not know yet are looked for only when
            # the insert wrote fewer rows than were staged (an anti-join of 3,000,000 staged
            # rows for the count alone was 4.5 s of a 1,000,000-partition first sync, and a
            # count per broker of the rows written ~2 s, #17).
            resolved = f"({resolve}) r WHERE r.partition_id IS NOT NULL"
        else:
            self.db.sql(f"CREATE TEMP TABLE resolved_replica ON COMMIT DROP AS {resolve}")
            resolved = "resolved_replica"
            self.db.execute(
                "SELECT broker_id, count(*) FROM resolved_replica WHERE partition_id IS NULL "
                "GROUP BY broker_id"
            )
            self.behind = dict(self.db.fetchall())
            self.db.sql("DELETE FROM resolved_replica WHERE partition_id IS NULL")
            self.db.sql("ANALYZE resolved_replica (partition_id, broker_pk)")  # the join keys
        cols = ", ".join(REPLICA_DATA)
        excluded = ", ".join(f"EXCLUDED.{c}" for c in REPLICA_DATA)
        current = ", ".join(f"console_replica.{c}" for c in REPLICA_DATA if c != "version")
        excluded_cmp = ", ".join(f"EXCLUDED.{c}" for c in REPLICA_DATA if c != "version")
        # Replicas of agents that answered in full and no longer report them go first, so
        # that only rows from before this sync are looked at.
        deleted = 0
        if self.full_brokers and not self.fresh:
            deleted += self.db.sql(
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
        if self.fresh:
            # In partition order: a partition's replicas land side by side, as they would
            # after CLUSTER on the primary key, instead of one broker's answer after another.
            # Every later sync reads and rewrites replicas partition by partition (those of the
            # partitions it touched): a 1% sync at 1,000,000 partitions rewrote its 30,000
            # replicas on ~10,000 pages instead of ~30,000 (0.3 s of 3.6 s, #17), for a sort
            # that costs the first sync ~1.5 s of ~58 s.
            upserted = self.db.sql(insert + " ORDER BY partition_id, broker_pk")
            if upserted < self.staging.replicas.rows:  # an agent ahead of the controller
                self.db.sql(
                    f"SELECT r.broker_id, count(*) FROM ({resolve}) r "  # noqa: S608
                    "WHERE r.partition_id IS NULL GROUP BY r.broker_id"
                )
                self.behind = dict(self.db.fetchall())
        else:
            upserted = self.db.sql(insert + upsert)
        if self.staging.removed.rows:
            deleted += self.db.sql(
                """
                DELETE FROM console_replica r
                USING stage_removed s, console_broker b, console_topic t, console_partition p
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = s.broker_id
                  AND t.cluster_id = %(cluster)s AND t.name = s.topic
                  AND p.topic_id = t.id AND p.partition = s.partition
                  AND r.partition_id = p.id AND r.broker_id = b.id
                """
            )

        # Agents that answered: their state, version and last good time.
        if self.good_brokers:
            rows = [
                g if g[0] not in self.behind else (g[0], None, *g[2:]) for g in self.good_brokers
            ]
            self.db.sql(
                """
                UPDATE console_broker b SET
                    snapshot_version = COALESCE(v.version, b.snapshot_version),
                    agent_state = v.state, expiration_mode = v.mode,
                    remote_store_unreachable_since = CASE WHEN v.store_since IS NULL THEN NULL
                        ELSE to_timestamp(v.store_since / 1000.0) END,
                    remote_store_error = v.store_error,
                    last_good_at = %(now)s, error = '', error_at = NULL, updated_at = %(now)s
                FROM unnest(%(ids)s::int[], %(versions)s::bigint[], %(states)s::text[],
                            %(modes)s::text[], %(store_since)s::bigint[],
                            %(store_errors)s::text[])
                     AS v(broker_id, version, state, mode, store_since, store_error)
                WHERE b.cluster_id = %(cluster)s AND b.broker_id = v.broker_id
                """,
                {
                    "ids": [r[0] for r in rows],
                    "versions": [r[1] for r in rows],
                    "states": [r[2] for r in rows],
                    "modes": [r[3] for r in rows],
                    "store_since": [r[4] for r in rows],
                    "store_errors": [r[5] for r in rows],
                },
            )
        if self.failed_brokers:
            self.db.sql(
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
            self.db.sql(
                """
                INSERT INTO touched_partition (id)
                SELECT DISTINCT partition_id FROM resolved_replica
                """
            )
        return AgentsOutcome(
            synced=len(self.good_brokers),
            failed=dict(self.failed_brokers),
            replicas_upserted=upserted,
            replicas_deleted=deleted,
            unknown_replicas=sum(self.behind.values()),
        )

    def fetch_snapshot(self, broker_id: int, url: str, since: int | None) -> bytes:
        """One agent's answer (called in the run's threads: it reads the source only)."""
        return snapshot_rows(self.source, broker_id, url, since)
