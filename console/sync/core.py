"""Sync one cluster: controller metadata and every agent's snapshot into PostgreSQL.

Incremental by version (``since``; only topics whose digest changed are rewritten; ``full=True``
asks everything again, as does a cluster whose UNLOGGED partitions a crash emptied). Bulk: rows
are COPYed into staging tables and merged in one statement each, derived values recomputed
set-based over what this sync touched; a first sync inserts plainly. One transaction per sync,
so a page never sees half of one; a per-cluster advisory lock makes a concurrent sync raise
:class:`SyncBusy` instead of waiting. A failing source keeps its last good data and is asked from
its last applied version next time. This module runs a sync and composes its parts (staging
area, metadata, snapshots, aggregates, groups), which share the transaction's cursor
(:class:`console.sync.common.SyncCursor`) and hand back small outcomes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from broker_agent.contract.models import ClusterMetadata
from console import history
from console.choices import ClusterBackend, SyncTrigger
from console.models import Cluster, Partition, SyncRun, Topic
from console.sync.aggregates import AggregateSync
from console.sync.common import Backwards, SyncCursor, error_text
from console.sync.extras import apply_elr
from console.sync.groups import GroupsOutcome, GroupSync
from console.sync.kafka_source import KafkaClusterSource
from console.sync.metadata import ControllerOutcome, MetadataSync
from console.sync.snapshots import AgentsOutcome, SnapshotSync
from console.sync.sources import ClusterSource, HttpClusterSource
from console.sync.staging_area import StagingArea

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


class _Sync:
    """One sync run: takes the lock, composes the parts (staging, metadata, snapshots,
    aggregates, groups) in their order, and records what they did; see the module docstring."""

    def __init__(self, cluster: Cluster, source: ClusterSource, *, full: bool, trigger: str):
        self.cluster = cluster
        self.source = source
        self.full = full
        self.trigger = trigger
        self.now = timezone.now()
        # Recorded as the version applied when the controller answers nothing: the caller's
        # row's, as it was handed in (the row is read again under the lock).
        self.previous_version = cluster.metadata_version

    def run(self) -> SyncResult:
        started = time.monotonic()
        cluster = self.cluster
        with transaction.atomic(), connection.cursor() as cur:
            db = SyncCursor(cur, cluster.pk, self.now)
            db.sql("SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": _lock_key(cluster.pk)})
            if not db.fetchone()[0]:
                raise SyncBusy(f"a sync of {cluster.name} is running")
            # Bulk joins of staged rows: sorted and hashed in memory (#17). JIT is off on every
            # console connection (config/settings.py).
            db.execute("SELECT set_config('work_mem', %s, true)", [settings.STRATA_SYNC_WORK_MEM])
            # Read under the lock: a sync that ran meanwhile moved the versions on.
            cluster.refresh_from_db()
            # A cluster with no partition yet (its first sync) has no row to merge with: its
            # partitions and replicas are INSERTed without the per-row conflict check and
            # nothing is looked for to delete (~1.5 s of a 200,000-partition first sync).
            db.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM console_partition WHERE cluster_id = %s)",
                [cluster.pk],
            )
            fresh = db.fetchone()[0]
            # A cluster without partitions is asked for everything, whatever versions it last
            # applied: its partitions and replicas are UNLOGGED tables, which PostgreSQL empties
            # after a crash (migration 0019), and a delta would rebuild nothing of them.
            ask_all = self.full or fresh
            # An incremental sync looks up a few thousand rows by key among millions (replicas
            # resolved to their partitions, offsets of touched partitions): with a random page
            # cost of 4 (for spinning disks) the planner read all 1,000,000 partitions instead
            # (0.5 s of a 1% sync at that size, #17). The tables are hot in memory or on SSD:
            # every console connection prices a random page at 1.1 (config.settings). A first
            # sync's bulk joins were measured and tuned at 4, and keep it.
            db.execute("SELECT set_config('random_page_cost', %s, true)", ["4" if fresh else "1.1"])
            staging = StagingArea(db)
            metadata = MetadataSync(
                db,
                staging,
                cluster,
                self.source,
                ask_all=ask_all,
                fresh=fresh,
                version=self.previous_version,
            )
            snapshots = SnapshotSync(
                db, staging, cluster, self.source, ask_all=ask_all, fresh=fresh
            )
            aggregates = AggregateSync(db, fresh=fresh, full=self.full)
            md = _read_sources(metadata, snapshots)
            snapshots.flush_snapshots()
            aggregates.capture(md)
            groups = GroupsOutcome()
            if md is not None:  # the controller answered
                metadata.apply(md)
                elr = getattr(self.source, "eligible_leader_replicas", None)
                if elr is not None:  # KIP-966 on a kafka cluster (none where it has no ELR)
                    apply_elr(db, elr() or {})
                groups = GroupSync(db, cluster, self.source, ask_all=ask_all).sync()
            staging.replicas.analyze()
            agents = snapshots.apply()
            aggregates.derive()
            if history.sample_due(cluster.history_sampled_at, self.now):
                history.write_samples(cur, cluster.pk, self.now)
                cluster.history_sampled_at = self.now
            result = self.finish(started, metadata.outcome, agents, groups)
        _analyze_if_bulk(result.run, groups.positions_written)
        return result

    def finish(
        self,
        started: float,
        controller: ControllerOutcome,
        agents: AgentsOutcome,
        groups: GroupsOutcome,
    ) -> SyncResult:
        """The run's record and the cluster row's sync fields, from the parts' outcomes."""
        finished = timezone.now()
        duration_ms = int((time.monotonic() - started) * 1000)
        errors = {}
        if not controller.ok:
            errors["controller"] = controller.error
        errors.update({f"broker {bid}": error for bid, error in agents.failed.items()})
        if groups.error:
            errors["groups"] = groups.error
        run = SyncRun.objects.create(
            cluster=self.cluster,
            trigger=self.trigger,
            started_at=self.now,
            finished_at=finished,
            duration_ms=duration_ms,
            full=self.full,
            metadata_version=controller.version,
            errors=errors,
            metadata_changed=controller.changed,
            topics_changed=controller.topics_changed,
            partitions_upserted=controller.partitions_upserted,
            replicas_upserted=agents.replicas_upserted,
            replicas_deleted=agents.replicas_deleted,
            brokers_synced=agents.synced,
            brokers_failed=len(agents.failed),
            controller_ok=controller.ok,
        )
        updates = {
            "metadata_version": controller.version,
            "synced_at": finished,
            "sync_duration_ms": duration_ms,
        }
        # What a kafka cluster supports, as this sync's read learnt it (console.capabilities)
        features = getattr(self.source, "backend_features", None)
        if features is not None:
            updates["backend_features"] = features
        if controller.ok:
            updates.update(controller_last_good_at=finished, controller_error="")
            updates["controller_error_at"] = None
        else:
            updates.update(controller_error=controller.error, controller_error_at=finished)
        Cluster.objects.filter(pk=self.cluster.pk).update(**updates)
        SyncRun.objects.filter(
            cluster=self.cluster, started_at__lt=self.now - SYNC_RUN_RETENTION
        ).delete()
        for key, value in updates.items():
            setattr(self.cluster, key, value)
        return SyncResult(run=run, unknown_replicas=agents.unknown_replicas)


def _read_sources(metadata: MetadataSync, snapshots: SnapshotSync) -> ClusterMetadata | None:
    """Ask the controller and the agents, staging each answer as it arrives; answers the
    controller's metadata (None when it failed).

    Agents are read in parallel and each answer is staged as it arrives; at most
    ``2 * MAX_PARALLEL_AGENTS`` answers are in flight. The agents the console knows are asked
    while the controller answers (the metadata's fetch and staging were ~0.2 s of a 1% sync of
    300 agents, #17); one the controller moved to another URL is asked there instead. Metadata
    is merged once the replicas are staged, so new partitions are written with their offsets
    in one go."""
    window_size = 2 * MAX_PARALLEL_AGENTS
    with ThreadPoolExecutor(MAX_PARALLEL_AGENTS, thread_name_prefix="strata-sync") as pool:
        window: list[tuple[int, str, int | None, Future[bytes]]] = []

        def submit(bid: int, url: str, since: int | None) -> None:
            window.append((bid, url, since, pool.submit(snapshots.fetch_snapshot, bid, url, since)))

        known = snapshots.known_brokers()
        for poll in snapshots.brokers_to_poll(None, known)[:window_size]:
            submit(*poll)
        md = metadata.fetch()
        metadata.stage_controller_dirs(md)
        polls = snapshots.brokers_to_poll(md, known)
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
                    snapshots.stage_snapshot(bid, future.result(), since)
                except Backwards:
                    # The agent's versions went backwards (it restarted): start over from a
                    # full one.
                    snapshots.stage_snapshot(bid, snapshots.fetch_snapshot(bid, url, None), None)
            except Exception as exc:  # one agent failing never stops the others
                snapshots.agent_failed(bid, exc)
            del future  # the answer's bytes go once staged
    return md


def _analyze_if_bulk(run: SyncRun, positions_written: int) -> None:
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
    written = run.partitions_upserted + run.replicas_upserted + run.replicas_deleted
    tables = []
    if written >= ANALYZE_AFTER_ROWS:
        tables += ["console_topic", "console_partition", "console_replica"]
    if positions_written >= ANALYZE_AFTER_ROWS:
        tables += ["console_consumergroup", "console_groupoffset"]
    if tables:
        with connection.cursor() as cur:
            cur.execute(f"ANALYZE {', '.join(tables)}")


def do_sync_cluster(
    cluster: Cluster,
    *,
    acting_user: Any = None,
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
        src = source_factory(cluster) if source is None else source
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


def _record_failure(
    cluster: Cluster, trigger: str, started: datetime, full: bool, errors: dict[str, str]
) -> None:
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
