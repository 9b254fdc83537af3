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
   answer as COPY rows (``format=tsv``), so their replicas are never parsed as JSON, and the
   answers are COPY-ed in batches (``STAGE_BATCH_BYTES``), not one COPY per agent. A
   cluster's first sync has nothing to merge with: it inserts plainly and skips the
   comparisons and deletes (``fresh``). A cluster without partitions is asked for everything
   whatever versions it applied: partitions and replicas are UNLOGGED tables (migration
   0019), which PostgreSQL empties after a crash, and the next sync rebuilds them.
3. **One transaction, one sync at a time.** All writes of a sync commit together, so a page
   never sees half a sync; a transaction-level advisory lock per cluster makes a concurrent
   sync (beat and webhook at once) return :class:`SyncBusy` instead of waiting.
4. **Per-source staleness.** A controller or agent that fails is recorded on its row (error,
   time) and keeps its last good data and ``last_good_at``; everything else keeps syncing. A
   failed agent is asked from its last applied version again next time, so nothing is missed.
   Replicas an agent reports for partitions the console does not know yet (agent ahead of the
   controller) leave that agent's version where it was, so they are fetched again.

5. **History.** At most every ``STRATA_HISTORY_SAMPLE_SECONDS`` a sync also writes a sample of
   every answering broker's log dirs and of every tiered topic whose figures changed (or whose
   keep-alive is due), in the same transaction (:mod:`console.history`; the trend charts read
   them).

Where it lives: this module runs a sync (lock, order, the agents in parallel, the SyncRun);
:mod:`console.sync.metadata` is the controller's side, :mod:`console.sync.snapshots` the
agents', :mod:`console.sync.aggregates` the derived values; ``rows``, ``staging`` and
``sources`` are the COPY formats, the staging tables and where answers come from
(``kafka_source`` and ``kafka_reads``: a ``kafka`` cluster, read over Kafka's protocol).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from console import history
from console.choices import ClusterBackend, SyncTrigger
from console.models import Cluster, Partition, SyncRun, Topic
from console.sync.aggregates import AggregateSync
from console.sync.common import Backwards, error_text
from console.sync.groups import GroupSync
from console.sync.kafka_source import KafkaClusterSource
from console.sync.metadata import MetadataSync
from console.sync.rows import (
    LOGDIR_COLUMNS,
    REMOVED_COLUMNS,
    REPLICA_COLUMNS,
    REPLICA_NOT_NULL,
)
from console.sync.snapshots import SnapshotSync
from console.sync.sources import ClusterSource, HttpClusterSource
from console.sync.staging import StageTable

__all__ = ["SyncBusy", "SyncResult", "do_sync_cluster", "inventory_missing", "source_for"]

log = logging.getLogger("console.sync")

SYNC_RUN_RETENTION = timedelta(days=1)
MAX_PARALLEL_AGENTS = 8
#: A sync that wrote at least this many partitions and replicas analyses their tables.
ANALYZE_AFTER_ROWS = 50_000


class SyncBusy(Exception):
    """Another sync of this cluster holds its lock; try again shortly."""


@dataclasses.dataclass
class SyncResult:
    run: SyncRun
    unknown_replicas: int = 0


def source_for(cluster: Cluster) -> ClusterSource:
    """Where a registered cluster is read from, by its backend: Kafka's protocol through its
    bootstrap servers, or its controller and agents over HTTP, signed with the secret its
    reference names."""
    if cluster.backend == ClusterBackend.KAFKA:
        return KafkaClusterSource(cluster.kafka_client_kwargs())
    return HttpClusterSource(cluster.controller_url, cluster.read_secret())


def _lock_key(cluster_pk: int) -> int:
    return zlib.crc32(f"strata-sync:{cluster_pk}".encode())


class _Sync(MetadataSync, SnapshotSync, AggregateSync, GroupSync):
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
        self.positions_written = 0  # consumer group positions inserted, updated or deleted
        self.fresh = False  # set under the lock by run()
        self.ask_all = full  # ask the controller and agents for everything (full or fresh)

    # -- SQL helpers -------------------------------------------------------------------------

    def sql(self, statement: str, params: dict | None = None) -> int:
        self.cur.execute(statement, {"cluster": self.cluster.pk, "now": self.now, **(params or {})})
        return self.cur.rowcount

    # -- controller --------------------------------------------------------------------------

    def raw(self, statement: str, params: dict | None = None):
        """Execute on the psycopg cursor itself: its parameters are whole JSON answers (tens of
        MB), which Django's debug wrapper would format into its query log."""
        raw = self.cur.cursor
        raw.execute(statement, {"cluster": self.cluster.pk, "now": self.now, **(params or {})})
        return raw

    def run(self) -> SyncResult:
        started = time.monotonic()
        self.good_brokers: list[tuple] = []
        self.failed_brokers: dict[int, str] = {}
        self.full_brokers: list[int] = []
        self.behind: dict[int, int] = {}
        self.pending: list[tuple] = []  # agents' answers taken, not staged yet (flush_snapshots)
        self.pending_bytes = 0
        with transaction.atomic(), connection.cursor() as cur:
            self.cur = cur
            self.sql(
                "SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": _lock_key(self.cluster.pk)}
            )
            if not cur.fetchone()[0]:
                raise SyncBusy(f"a sync of {self.cluster.name} is running")
            # Bulk joins of staged rows: sorted and hashed in memory (#17). JIT is off on every
            # console connection (config/settings.py).
            cur.execute("SELECT set_config('work_mem', %s, true)", [settings.STRATA_SYNC_WORK_MEM])
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
            # A cluster without partitions is asked for everything, whatever versions it last
            # applied: its partitions and replicas are UNLOGGED tables, which PostgreSQL empties
            # after a crash (migration 0019), and a delta would rebuild nothing of them.
            self.ask_all = self.full or self.fresh
            # An incremental sync looks up a few thousand rows by key among millions (replicas
            # resolved to their partitions, offsets of touched partitions): with a random page
            # cost of 4 (for spinning disks) the planner read all 1,000,000 partitions instead
            # (0.5 s of a 1% sync at that size, #17). The tables are hot in memory or on SSD:
            # every console connection prices a random page at 1.1 (config.settings). A first
            # sync's bulk joins were measured and tuned at 4, and keep it.
            cur.execute(
                "SELECT set_config('random_page_cost', %s, true)", ["4" if self.fresh else "1.1"]
            )
            cur.execute(
                "DROP TABLE IF EXISTS pg_temp.touched_topic, pg_temp.touched_partition; "
                "CREATE TEMP TABLE touched_topic (id bigint) ON COMMIT DROP; "
                "CREATE TEMP TABLE touched_partition (id bigint) ON COMMIT DROP"
            )
            self.logdirs = StageTable(
                cur, "stage_logdir", LOGDIR_COLUMNS, keys=("broker_id", "name")
            )
            self.replicas = StageTable(
                cur,
                "stage_replica",
                REPLICA_COLUMNS,
                not_null=REPLICA_NOT_NULL,
                keys=("broker_id", "topic", "partition", "log_dir"),
            )
            self.removed = StageTable(cur, "stage_removed", REMOVED_COLUMNS)
            # Agents are read in parallel and each answer is staged as it arrives; at most
            # ``2 * MAX_PARALLEL_AGENTS`` answers are in flight. The agents the console knows
            # are asked while the controller answers (the metadata's fetch and staging were
            # ~0.2 s of a 1% sync of 300 agents, #17); one the controller moved to another URL
            # is asked there instead. Metadata is merged once the replicas are staged, so new
            # partitions are written with their offsets in one go.
            window_size = 2 * MAX_PARALLEL_AGENTS
            with ThreadPoolExecutor(MAX_PARALLEL_AGENTS, thread_name_prefix="strata-sync") as pool:
                window: list[tuple[int, str, int | None, Future]] = []

                def submit(bid: int, url: str, since: int | None) -> None:
                    window.append(
                        (bid, url, since, pool.submit(self.fetch_snapshot, bid, url, since))
                    )

                known = self.known_brokers()
                for poll in self.brokers_to_poll(None, known)[:window_size]:
                    submit(*poll)
                md = self.fetch_metadata()
                self.stage_controller_dirs(md)
                polls = self.brokers_to_poll(md, known)
                wanted = set(polls)
                window = [w for w in window if w[:3] in wanted]
                asked = {w[:3] for w in window}
                pending = iter([p for p in polls if p not in asked])

                def submit_next() -> None:
                    for poll in pending:
                        submit(*poll)
                        return

                for _ in range(window_size - len(window)):
                    submit_next()
                while window:
                    bid, url, since, future = window.pop(0)
                    submit_next()
                    try:
                        try:
                            self.stage_snapshot(bid, future.result(), since)
                        except Backwards:
                            # The agent's versions went backwards (it restarted): start over
                            # from a full one.
                            self.stage_snapshot(bid, self.fetch_snapshot(bid, url, None), None)
                    except Exception as exc:  # one agent failing never stops the others
                        self.agent_failed(bid, exc)
                    del future  # the answer's bytes go once staged
            self.flush_snapshots()
            self.capture_aggregates(md)
            if md is not None:
                self.apply_metadata(md)
            self.sync_groups()
            self.replicas.analyze()
            self.apply_snapshots()
            self.derive()
            if history.sample_due(self.cluster.history_sampled_at, self.now):
                history.write_samples(cur, self.cluster.pk, self.now)
                self.cluster.history_sampled_at = self.now
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

        Consumer group positions likewise: on a server without autovacuum (this project's test
        machines) they were never analysed, and the planner took a topic's 10,000 positions of
        the 539,020 for one row (#17).
        """
        written = (
            self.run_stats["partitions_upserted"]
            + self.run_stats["replicas_upserted"]
            + self.run_stats["replicas_deleted"]
        )
        tables = []
        if written >= ANALYZE_AFTER_ROWS:
            tables += ["console_topic", "console_partition", "console_replica"]
        if self.positions_written >= ANALYZE_AFTER_ROWS:
            tables += ["console_consumergroup", "console_groupoffset"]
        if tables:
            with connection.cursor() as cur:
                cur.execute(f"ANALYZE {', '.join(tables)}")

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
        # What a kafka cluster supports, as this sync's read learnt it (console.capabilities)
        features = getattr(self.source, "backend_features", None)
        if features is not None:
            updates["backend_features"] = features
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
    event. Raises :class:`SyncBusy` at once when another sync of this cluster holds its lock:
    it never waits (``pg_try_advisory_xact_lock``); the next beat or webhook syncs again.
    """
    own = source is None
    started = timezone.now()
    try:
        src = source_factory(cluster) if own else source
    except Exception as exc:  # e.g. the secret file is missing: recorded like any failure
        _record_failure(cluster, trigger, started, full, {"secret": error_text(exc)})
        raise
    try:
        return _Sync(cluster, src, full=full, trigger=trigger).run()
    except SyncBusy:
        raise
    except Exception as exc:
        log.exception("cluster %s: sync failed", cluster.name)
        _record_failure(cluster, trigger, started, full, {"sync": error_text(exc)})
        raise
    finally:
        if own:
            src.close()


def inventory_missing(cluster_name: str) -> bool:
    """Whether ``cluster_name``'s topics hold partitions the console has no row of: after a
    PostgreSQL crash emptied the UNLOGGED partitions and replicas (migration 0019), until the
    next sync rebuilt them. Planning waits meanwhile (``workflows.planning.compute_plan``): a
    plan made from an empty inventory would see no replica to move, grow or delete."""
    return (
        Topic.objects.filter(cluster__name=cluster_name, partition_count__gt=0).exists()
        and not Partition.objects.filter(cluster__name=cluster_name).exists()
    )


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
