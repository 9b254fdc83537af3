"""Synthetic scale mode: metadata-only partitions so one process presents a large cluster.

One process serves the controller API subset a console sync needs and every synthetic broker
(documented trade-off: 60 uvicorn processes would measure the machine, not the console).

Controller-compatible endpoints (same models as :mod:`broker_agent.controller`):

- ``GET /v1/health``
- ``GET /v1/metadata[?since=V][&delta=true]``: :class:`~broker_agent.models.ClusterMetadata`
  (brokers, topics with configs, tiered state / epoch / policy, initial and undeleted partition
  counts, partitions with replicas, leader, leader epoch, partition epoch, ISR, offline replicas,
  ``created``). ``changed: false`` when nothing moved after ``since``. With ``delta=true`` and a
  ``since`` this process knows, the answer is a delta (``full: false``): only topics with changed
  partitions, each carrying its topic-level fields and **only the changed partitions**. Without
  ``delta`` a changed answer is complete, exactly like the real controller. gzip when asked.
- ``GET /v1/topics``, ``GET /v1/topics/{t}``: :class:`~broker_agent.models.TopicMetadata`.

Agent-compatible endpoints, one per synthetic broker (``AgentClient(".../brokers/<id>")`` works
unchanged): ``GET /brokers/<id>/v1/health``, ``/v1/snapshot[?since=][&format=tsv]`` and
``/v1/log-dirs``.

Synthetic-only endpoints:

- ``GET /v1/snapshot[?since=]``: the whole cluster, one entry per partition (legacy, bench).
- ``POST /v1/tick``: advance the log end offset of 1% of the partitions (snapshots only).
- ``POST /v1/synthetic/churn?fraction=F[&seed=S]``: mutate ``F`` of the partitions in one new
  version: each gets a leader move or an ISR shrink / expand (leader epoch / partition epoch
  bumped, so the **metadata** changes) and a log end offset advance (so the **snapshots**
  change). This is what the console's incremental-sync bench drives.

Partitions carry offsets but no bytes. Versions start at the process start time in ms, so a
restarted process (state is in memory only) never answers a delta to a ``since`` from its previous
life: every partition is newer than it. A ticker advances 1% of the log end offsets every
``tick_interval`` seconds (0 disables it; benches want a still cluster).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import threading
import time
import zlib
from array import array
from typing import Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response

from broker_agent.choices import (
    ErrorCode,
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.models import SNAPSHOT_TSV_COLUMNS, SNAPSHOT_TSV_MEDIA_TYPE
from broker_agent.signing import audience_of
from broker_agent.web import PUBLIC_PATHS, ApiError, install

__all__ = ["SyntheticCluster", "create_app"]

_DIR_TOTAL = 4 << 40
_DIR_USABLE = 2 << 40
_CACHE_BYTES = 256 << 20


class _ChangeLog:
    """Which partitions changed at which version, so ``since`` answers cost O(changed)
    instead of a scan of every partition. Bounded: once the logged indexes exceed ``limit``
    the oldest versions are dropped, and a ``since`` older than what is kept answers ``None``
    (the caller then scans, as before)."""

    def __init__(self, start: int, limit: int):
        self.floor = start  # every change after ``floor`` is logged
        self.limit = max(1, limit)
        self.versions: list[int] = []
        self.changes: list[array] = []
        self.size = 0

    def add(self, version: int, indexes) -> None:
        changed = array("i", indexes)
        if self.versions and self.versions[-1] == version:
            self.changes[-1].extend(changed)
        else:
            self.versions.append(version)
            self.changes.append(changed)
        self.size += len(changed)
        while self.size > self.limit and len(self.versions) > 1:
            self.floor = self.versions.pop(0)
            self.size -= len(self.changes.pop(0))

    def since(self, since: int) -> list[int] | None:
        """Sorted distinct partition indexes changed after ``since``; None if not logged."""
        if since < self.floor:
            return None
        start = bisect.bisect_right(self.versions, since)
        out: set[int] = set()
        for changed in self.changes[start:]:
            out.update(changed)
        return sorted(out)


def _ints(values) -> str:
    return "[" + ",".join(map(str, values)) + "]"


def gzip_bytes(body: bytes, level: int = 1) -> bytes:
    """gzip with a fixed header (mtime 0) so equal bodies compress to equal bytes. Level 1:
    these bodies are tens of MB of repetitive JSON, where speed matters more than ratio."""
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(body) + c.flush()


class SyntheticCluster:
    """All state of the synthetic cluster, in flat arrays indexed by partition ``i``
    (``topic = i // ppt``, ``partition = i % ppt``). Thread-safe (one lock)."""

    def __init__(
        self,
        cluster_id: str,
        brokers: int,
        log_dirs: int,
        topics: int,
        partitions_per_topic: int,
        rf: int = 3,
        base_url: str = "",
        seed: int = 42,
    ):
        self.cluster_id = cluster_id
        self.brokers = brokers
        self.log_dirs = log_dirs
        self.base_url = base_url.rstrip("/")
        self.topics = [f"synthetic.topic-{i:04d}" for i in range(topics)]
        self.topic_ids = [f"synthetic{t:013d}" for t in range(topics)]
        self.ppt = partitions_per_topic
        self.rf = max(1, min(rf, brokers))
        n = topics * partitions_per_topic
        self.n = n
        self.lock = threading.RLock()
        rnd = random.Random(seed)  # noqa: S311 (synthetic offsets, not crypto)
        self._rnd = rnd
        self.leo = array("q", (rnd.randrange(0, 10_000_000) for _ in range(n)))
        self.lso = array("q", (max(0, x - rnd.randrange(0, 1_000_000)) for x in self.leo))
        self.leader_pos = array("b", bytes(n))  # index into replicas(i)
        full_mask = (1 << self.rf) - 1
        self.isr_mask = array("B", [full_mask]) * n  # bit k: replicas(i)[k] is in the ISR
        self.leader_epoch = array("i", bytes(4 * n))
        self.partition_epoch = array("i", bytes(4 * n))
        start = int(time.time() * 1000)
        self.start_version = start
        self.version = start  # global: bumps on tick (snapshots) and churn (both)
        self.metadata_version = start
        self.pversion = array("q", [start]) * n  # snapshot version per partition
        self.mversion = array("q", [start]) * n  # metadata version per partition
        # Per-partition rendered JSON, invalidated on change (a full answer after a 1% churn
        # re-renders 1% and joins the rest).
        self._meta_entry: list[str | None] = [None] * n
        self._snap_entry: list[str | None] = [None] * n
        # A broker's replica entry differs between brokers only by leader / follower.
        # [follower JSON, leader JSON, follower row, leader row] per partition
        self._replica_entry: list[list[str | None]] = [[None] * n for _ in range(4)]
        # Changed partitions per version (snapshots: tick and churn; metadata: churn only).
        self._snap_log = _ChangeLog(start, 4 * n)
        self._meta_log = _ChangeLog(start, 4 * n)
        self._cache: dict[tuple, tuple[bytes, int]] = {}
        self._cache_bytes = 0
        # Static placement: broker -> its partition indexes, and replicas per (broker, dir).
        self.hosted: list[array] = [array("i") for _ in range(brokers + 1)]
        for i in range(n):
            for k in range(self.rf):
                self.hosted[((i + k) % brokers) + 1].append(i)
        self.dir_counts = [[0] * log_dirs for _ in range(brokers + 1)]
        for b in range(1, brokers + 1):
            for i in self.hosted[b]:
                self.dir_counts[b][i % log_dirs] += 1
        self.started_ms = start
        self.tiering = None  # SyntheticTiering (synthetic_tiering.py): live KIP-950 state

    # -- state -------------------------------------------------------------------------------

    def replicas(self, i: int) -> list[int]:
        return [((i + k) % self.brokers) + 1 for k in range(self.rf)]

    def leader(self, i: int) -> int:
        return ((i + self.leader_pos[i]) % self.brokers) + 1

    def isr(self, i: int) -> list[int]:
        m = self.isr_mask[i]
        return [r for k, r in enumerate(self.replicas(i)) if m >> k & 1]

    def tiered(self, t: int) -> bool:
        return t % 2 == 0

    def _known(self, since: int | None) -> bool:
        """A ``since`` this process can answer a delta to (from its own life)."""
        return since is not None and self.start_version <= since <= self.version

    def _invalidate(self, i: int) -> None:
        self._meta_entry[i] = None
        self._snap_entry[i] = None
        for entries in self._replica_entry:
            entries[i] = None

    def _changed_since(self, since: int, *, metadata: bool = False) -> list[int]:
        """Sorted indexes of partitions whose (metadata or snapshot) version is after
        ``since``: from the change log when it reaches back that far, else by a scan."""
        versions = self.mversion if metadata else self.pversion
        logged = (self._meta_log if metadata else self._snap_log).since(since)
        if logged is None:
            return [i for i in range(self.n) if versions[i] > since]
        return [i for i in logged if versions[i] > since]

    def _hosts(self, broker_id: int, i: int) -> bool:
        """Whether ``broker_id`` holds a replica of partition ``i`` (see ``replicas``)."""
        return (broker_id - 1 - i) % self.brokers < self.rf

    def tick(self, fraction: float = 0.01) -> int:
        """Advance log end offsets of ``fraction`` of the partitions (snapshots only)."""
        with self.lock:
            self.version += 1
            ticked = []
            for _ in range(max(1, int(self.n * fraction))):
                i = self._rnd.randrange(self.n)
                self.leo[i] += self._rnd.randrange(1, 1000)
                self.pversion[i] = self.version
                self._snap_entry[i] = None
                for entries in self._replica_entry:
                    entries[i] = None
                ticked.append(i)
            self._snap_log.add(self.version, ticked)
            self._cache.clear()
            self._cache_bytes = 0
            return self.version

    def churn(self, fraction: float, seed: int | None = None) -> dict:
        """Mutate ``fraction`` of the partitions (distinct, at least one) in one new version:
        ISR shrunk -> restored; else alternately leader moves to the next ISR replica (leader
        epoch + 1) or the last follower leaves the ISR. Every change bumps the partition epoch,
        as the real controller does, and advances the log end offset."""
        with self.lock:
            rnd = random.Random(seed) if seed is not None else self._rnd  # noqa: S311
            k = min(self.n, max(1, round(self.n * fraction)))
            self.version += 1
            v = self.version
            full_mask = (1 << self.rf) - 1
            leader_moves = isr_changes = 0
            changed = rnd.sample(range(self.n), k)
            for i in changed:
                mask = self.isr_mask[i]
                if mask != full_mask:
                    self.isr_mask[i] = full_mask
                    isr_changes += 1
                elif self.rf > 1 and rnd.random() < 0.5:
                    pos = self.leader_pos[i]
                    drop = (pos + self.rf - 1) % self.rf  # the last follower, never the leader
                    self.isr_mask[i] = mask & ~(1 << drop)
                    isr_changes += 1
                else:
                    self.leader_pos[i] = (self.leader_pos[i] + 1) % self.rf
                    self.leader_epoch[i] += 1
                    leader_moves += 1
                self.partition_epoch[i] += 1
                self.leo[i] += rnd.randrange(1, 1000)
                self.pversion[i] = v
                self.mversion[i] = v
                self._invalidate(i)
            self._snap_log.add(v, changed)
            self._meta_log.add(v, changed)
            self.metadata_version = v
            self._cache.clear()
            self._cache_bytes = 0
            return {
                "version": v,
                "metadata_version": v,
                "changed_partitions": k,
                "leader_moves": leader_moves,
                "isr_changes": isr_changes,
            }

    # -- controller metadata -----------------------------------------------------------------

    def _broker_json(self, b: int) -> str:
        dirs = ",".join(self._dir_json(b, d) for d in range(self.log_dirs))
        return (
            f'{{"broker_id":{b},"url":"{self.base_url}/brokers/{b}","alive":true,'
            f'"log_dirs":[{dirs}],"offline_log_directory_count":0,"offline_replica_count":0,'
            f'"last_heartbeat_ms":{self.started_ms}}}'
        )

    def _dir_json(self, b: int, d: int) -> str:
        return (
            f'{{"name":"logdir-{d}","path":"/synthetic/broker-{b}/logdir-{d}",'
            f'"state":"{LogDirState.ONLINE}","total_bytes":{_DIR_TOTAL},'
            f'"usable_bytes":{_DIR_USABLE},"probe_latency_ms":1.0,"error":null,'
            f'"replica_count":{self.dir_counts[b][d]},"offline_replica_count":0}}'
        )

    def _partition_json(self, i: int) -> str:
        s = self._meta_entry[i]
        if s is None:
            reps = _ints(self.replicas(i))
            s = (
                f'{{"partition":{i % self.ppt},"replicas":{reps},"leader":{self.leader(i)},'
                f'"leader_epoch":{self.leader_epoch[i]},'
                f'"partition_epoch":{self.partition_epoch[i]},"isr":{_ints(self.isr(i))},'
                f'"offline_replicas":[],"created":{reps},"leader_epoch_after_creation":{{}},'
                f'"leader_epoch_before_deletion":{{}},"marked_for_deletion":false}}'
            )
            self._meta_entry[i] = s
        return s

    def _topic_head(self, t: int) -> str:
        if self.tiering is not None:
            return self.tiering.topic_head(t)
        if self.tiered(t):
            configs = f'{{"{TopicConfig.REMOTE_STORAGE_ENABLE}":"true"}}'
            state = TieredState.ENABLED
        else:
            configs, state = "{}", TieredState.NONE
        return (
            f'{{"name":"{self.topics[t]}","topic_id":"{self.topic_ids[t]}","configs":{configs},'
            f'"tiered_state":"{state}","tiered_epoch":0,"disable_policy":null,'
            f'"tiering_acks":[],"initial_partition_count":{self.ppt},'
            f'"undeleted_partition_count":{self.ppt},"partitions":['
        )

    def _topic_json(self, t: int, indexes) -> str:
        return self._topic_head(t) + ",".join(self._partition_json(i) for i in indexes) + "]}"

    def metadata_body(self, since: int | None, delta: bool) -> bytes:
        """JSON bytes of ``GET /v1/metadata`` (uncompressed)."""
        with self.lock:
            known = self._known(since)
            if known and since >= self.metadata_version:
                return (
                    f'{{"cluster_id":"{self.cluster_id}","version":{self.metadata_version},'
                    f'"brokers":[],"topics":[],"changed":false,"full":true,"since":{since}}}'
                ).encode()
            is_delta = delta and known
            brokers = ",".join(self._broker_json(b) for b in range(1, self.brokers + 1))
            topics = []
            if is_delta:
                by_topic: dict[int, list[int]] = {}
                for i in self._changed_since(since, metadata=True):
                    by_topic.setdefault(i // self.ppt, []).append(i)
                topics = [self._topic_json(t, changed) for t, changed in by_topic.items()]
            else:
                for t in range(len(self.topics)):
                    topics.append(self._topic_json(t, range(t * self.ppt, (t + 1) * self.ppt)))
            return (
                f'{{"cluster_id":"{self.cluster_id}","version":{self.metadata_version},'
                f'"brokers":[{brokers}],"topics":[{",".join(topics)}],"changed":true,'
                f'"full":{"false" if is_delta else "true"},'
                f'"since":{since if is_delta else "null"},'
                f'"removed_topics":[],"removed_partitions":[]}}'
            ).encode()

    def topic_body(self, name: str | None) -> bytes:
        with self.lock:
            if name is None:
                return (
                    "["
                    + ",".join(
                        self._topic_json(t, range(t * self.ppt, (t + 1) * self.ppt))
                        for t in range(len(self.topics))
                    )
                    + "]"
                ).encode()
            try:
                t = self.topics.index(name)
            except ValueError:
                raise ApiError(
                    404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"
                ) from None
            return self._topic_json(t, range(t * self.ppt, (t + 1) * self.ppt)).encode()

    # -- snapshots ---------------------------------------------------------------------------

    def _cluster_entry(self, i: int) -> str:
        s = self._snap_entry[i]
        live = (
            self.tiering.cluster_tiering(i // self.ppt)
            if self.tiering is not None and self.tiering.topics
            else None
        )
        if s is None or live is not None:
            t, p = divmod(i, self.ppt)
            tiered, epoch = live or (
                TieredState.ENABLED if self.tiered(t) else TieredState.NONE,
                0,
            )
            s = (
                f'{{"topic":"{self.topics[t]}","partition":{p},'
                f'"replicas":{_ints(self.replicas(i))},"leader":{self.leader(i)},'
                f'"leader_epoch":{self.leader_epoch[i]},"isr":{_ints(self.isr(i))},'
                f'"offline_replicas":[],"log_start_offset":{self.lso[i]},'
                f'"log_end_offset":{self.leo[i]},"tiered_state":"{tiered}",'
                f'"tiered_epoch":{epoch},"version":{self.pversion[i]}}}'
            )
            if live is None:
                self._snap_entry[i] = s
        return s

    def cluster_snapshot(self, since: int | None) -> bytes:
        """JSON bytes (uncompressed) of the cluster-wide snapshot."""
        with self.lock:
            full = not self._known(since)
            idx = range(self.n) if full else self._changed_since(since)
            head = (
                f'{{"cluster_id":"{self.cluster_id}","version":{self.version},'
                f'"since":{"null" if full else since},"full":{"true" if full else "false"},'
                f'"broker_count":{self.brokers},"partition_count":{self.n},"partitions":['
            )
            return (head + ",".join(self._cluster_entry(i) for i in idx) + "]}").encode()

    def _check_broker(self, broker_id: int) -> None:
        if not 1 <= broker_id <= self.brokers:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"no synthetic broker {broker_id}")

    def _task_states(self, t: int, is_leader: bool) -> tuple[str, str, bool]:
        """(copier state, expiration state, tiered) of a replica of topic ``t``."""
        tiered = self.tiered(t)
        if not is_leader:
            return TaskState.NOT_LEADER, TaskState.NOT_LEADER, tiered
        state = TaskState.RUNNING if tiered else TaskState.STOPPED
        return state, state, tiered

    def _live_tiering(self, b: int, i: int, is_leader: bool) -> tuple[str, int, str, str] | None:
        """The replica's tiering as broker ``b`` applied it (see
        :meth:`SyntheticTiering.replica_tiering`), or ``None`` for the layout's."""
        tiering = self.tiering
        if tiering is None or not tiering.brokers or (b, i // self.ppt) not in tiering.brokers:
            return None
        return tiering.replica_tiering(b, i // self.ppt, is_leader)

    def _replica_json(self, i: int, is_leader: bool, b: int = 0) -> str:
        """One replica entry of broker ``b``'s snapshot (the same for every follower of ``i``,
        cached, unless ``b`` applied a tiering command for its topic)."""
        live = self._live_tiering(b, i, is_leader)
        cache = self._replica_entry[1 if is_leader else 0]
        s = cache[i]
        if s is None or live is not None:
            t, p = divmod(i, self.ppt)
            copier, expiration, tiered = self._task_states(t, is_leader)
            tstate = TieredState.ENABLED if tiered else TieredState.NONE
            epoch = 0
            if live is not None:
                tstate, epoch, copier, expiration = live
            leo, lso = self.leo[i], self.lso[i]
            s = (
                f'{{"topic":"{self.topics[t]}","topic_id":"{self.topic_ids[t]}",'
                f'"partition":{p},"log_dir":"logdir-{i % self.log_dirs}",'
                f'"state":"{ReplicaState.ONLINE}",'
                f'"is_leader":{"true" if is_leader else "false"},"leader":{self.leader(i)},'
                f'"leader_epoch":{self.leader_epoch[i]},"isr":{_ints(self.isr(i))},'
                f'"log_start_offset":{lso},"local_log_start_offset":{lso},'
                f'"log_end_offset":{leo},"high_watermark":{leo},"size_bytes":0,'
                f'"tiered_state":"{tstate}","tiered_epoch":{epoch},"copier_state":"{copier}",'
                f'"expiration_state":"{expiration}","version":{self.pversion[i]}}}'
            )
            if live is None:
                cache[i] = s
        return s

    def _replica_row(self, i: int, is_leader: bool, b: int = 0) -> str:
        """:meth:`_replica_json` as a ``format=tsv`` row, without its leading broker id:
        ``SNAPSHOT_TSV_COLUMNS[1:]`` (topic ... version)."""
        live = self._live_tiering(b, i, is_leader)
        cache = self._replica_entry[3 if is_leader else 2]
        s = cache[i]
        if s is None or live is not None:
            t, p = divmod(i, self.ppt)
            copier, expiration, _ = self._task_states(t, is_leader)
            epoch = 0
            if live is not None:
                _state, epoch, copier, expiration = live
            leo, lso = self.leo[i], self.lso[i]
            s = (
                f"{self.topics[t]}\t{p}\tlogdir-{i % self.log_dirs}\t{ReplicaState.ONLINE}\t"
                f"{'t' if is_leader else 'f'}\t{self.leader_epoch[i]}\t{lso}\t{lso}\t"
                f"{leo}\t{leo}\t0\t{epoch}\t{copier}\t{expiration}\t-1\t-1\t0\t0\t"
                f"0\t0\t0\t0\t0\t0\t0\t{self.pversion[i]}"
            )
            if live is None:
                cache[i] = s
        return s

    def log_dirs_body(self, broker_id: int) -> bytes:
        self._check_broker(broker_id)
        return (
            "[" + ",".join(self._dir_json(broker_id, d) for d in range(self.log_dirs)) + "]"
        ).encode()

    def broker_snapshot(self, broker_id: int, since: int | None, *, rows: bool = False) -> bytes:
        """One synthetic broker's :class:`~broker_agent.models.BrokerSnapshot` as JSON bytes,
        or with ``rows`` in ``format=tsv`` (see ``broker_agent.models.snapshot_tsv``)."""
        self._check_broker(broker_id)
        with self.lock:
            full = not self._known(since)
            b = broker_id
            if full:
                indexes = self.hosted[b]
            else:
                indexes = [i for i in self._changed_since(since) if self._hosts(b, i)]
            dirs = ",".join(self._dir_json(b, d) for d in range(self.log_dirs))
            head = (
                f'{{"broker_id":{b},"version":{self.version},'
                f'"since":{"null" if full else since},"full":{"true" if full else "false"},'
                f'"state":"ONLINE","expiration_mode":"internal","log_dirs":[{dirs}],'
                f'"removed":[],"offline_log_directory_count":0,"offline_replica_count":0,'
                f'"generated_at_ms":{int(time.time() * 1000)},'
            )
            if rows:
                columns = ",".join(f'"{c}"' for c in SNAPSHOT_TSV_COLUMNS)
                lines = "".join(
                    f"{b}\t{self._replica_row(i, self.leader(i) == b, b)}\n" for i in indexes
                )
                return (f'{head}"replica_columns":[{columns}]}}\n{lines}').encode()
            parts = ",".join(self._replica_json(i, self.leader(i) == b, b) for i in indexes)
            return f'{head}"replicas":[{parts}]}}'.encode()

    # -- response cache ----------------------------------------------------------------------

    def cached(self, key: tuple, build, gzip: bool) -> tuple[bytes, int]:
        """(body, uncompressed length) for ``key`` at the current version, gzipped when asked;
        concurrent pollers of the same answer pay the serialisation (and compression) once.
        Cleared on every new version and bounded in size."""
        with self.lock:
            full_key = (self.version, gzip, *key)
            hit = self._cache.get(full_key)
            if hit is None:
                raw = build()
                hit = (gzip_bytes(raw) if gzip else raw, len(raw))
                if self._cache_bytes + len(hit[0]) > _CACHE_BYTES:
                    self._cache.clear()
                    self._cache_bytes = 0
                self._cache[full_key] = hit
                self._cache_bytes += len(hit[0])
            return hit


def create_app(
    secret: bytes,
    *,
    cluster_id: str,
    brokers: int,
    log_dirs: int,
    topics: int,
    partitions_per_topic: int,
    base_url: str,
    tick_interval: float = 5.0,
    nonce_path: str | None = None,
) -> FastAPI:
    cluster = SyntheticCluster(
        cluster_id, brokers, log_dirs, topics, partitions_per_topic, base_url=base_url
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async def ticker():
            while True:
                await asyncio.sleep(tick_interval)
                await asyncio.to_thread(cluster.tick)

        task = asyncio.create_task(ticker()) if tick_interval > 0 else None
        yield
        if task:
            task.cancel()

    app = FastAPI(
        title="Strata synthetic cluster",
        version="1",
        lifespan=lifespan,
        description="Synthetic scale mode: controller metadata and per-broker snapshots of a "
        "metadata-only cluster. All requests but /v1/health are HMAC-signed.",
    )
    # One authority for the controller and every broker: the broker id is in the signed path
    # (/brokers/<id>/v1/...), so a request signed for one broker does not verify at another.
    install(
        app,
        secret,
        audience=audience_of(base_url),
        public_paths=PUBLIC_PATHS | {f"/brokers/{b}/v1/health" for b in range(1, brokers + 1)},
        nonce_path=nonce_path,
    )

    def _respond(
        request: Request, key: tuple, build, media_type: str = "application/json"
    ) -> Response:
        gz = "gzip" in request.headers.get("accept-encoding", "")
        body, length = cluster.cached(key, build, gz)
        if gz:
            return Response(
                body,
                media_type=media_type,
                headers={"Content-Encoding": "gzip", "X-Uncompressed-Length": str(length)},
            )
        return Response(body, media_type=media_type)

    since_q = Query(None, ge=-1, le=2**62)

    @app.get("/v1/health")
    def health() -> dict:
        return {
            "status": "ok",
            "role": "synthetic",
            "brokers": brokers,
            "partitions": cluster.n,
            "version": cluster.version,
            "metadata_version": cluster.metadata_version,
        }

    @app.get("/v1/metadata")
    def metadata(
        request: Request,
        since: int | None = since_q,
        delta: bool = Query(False),
        wait_ms: int = Query(0, ge=0, le=30_000),
    ):
        """Controller metadata (``ClusterMetadata``); ``delta=true`` for partition-level deltas.
        ``wait_ms`` is accepted for compatibility and ignored (nothing here long-polls)."""
        return _respond(
            request, ("metadata", since, delta), lambda: cluster.metadata_body(since, delta)
        )

    @app.get("/v1/topics")
    def list_topics(request: Request):
        return _respond(request, ("topics",), lambda: cluster.topic_body(None))

    @app.get("/v1/topics/{topic}")
    def get_topic(request: Request, topic: str):
        body = cluster.topic_body(topic)
        return _respond(request, ("topic", topic), lambda: body)

    @app.get("/v1/snapshot")
    def snapshot(request: Request, since: int | None = since_q):
        return _respond(request, ("snapshot", since), lambda: cluster.cluster_snapshot(since))

    @app.post("/v1/tick")
    def tick() -> dict:
        return {"version": cluster.tick()}

    @app.post("/v1/synthetic/churn")
    def churn(
        fraction: float = Query(0.01, gt=0, le=1),
        seed: int | None = Query(None, ge=0, le=2**62),
    ) -> dict:
        return cluster.churn(fraction, seed)

    @app.get("/brokers/{broker_id}/v1/health")
    def broker_health(broker_id: int) -> dict:
        cluster._check_broker(broker_id)
        return {"status": "ok", "role": "broker", "broker_id": broker_id, "online": True}

    @app.get("/brokers/{broker_id}/v1/snapshot")
    def broker_snapshot(
        request: Request,
        broker_id: int,
        since: int | None = since_q,
        format: Literal["json", "tsv"] = Query("json"),
    ):
        cluster._check_broker(broker_id)
        if format == "tsv":
            return _respond(
                request,
                ("broker-tsv", broker_id, since),
                lambda: cluster.broker_snapshot(broker_id, since, rows=True),
                SNAPSHOT_TSV_MEDIA_TYPE,
            )
        return _respond(
            request,
            ("broker", broker_id, since),
            lambda: cluster.broker_snapshot(broker_id, since),
        )

    @app.get("/brokers/{broker_id}/v1/log-dirs")
    def broker_log_dirs(request: Request, broker_id: int):
        return Response(cluster.log_dirs_body(broker_id), media_type="application/json")

    from broker_agent.synthetic_tiering import install_tiering_routes  # KIP-950 endpoints

    cluster.tiering = install_tiering_routes(app, cluster)
    return app
