"""Synthetic scale mode: metadata-only partitions so one process presents a large cluster.

Layouts: ``topics`` x ``partitions_per_topic``, or the fleet (``sim up --synthetic-fleet N``,
:func:`fleet_topic_sizes`). One process serves the controller API subset a sync needs and every
synthetic broker's agent API, with the same models (routes: :mod:`broker_agent.server.synthetic_app`);
60 uvicorn processes would measure the machine, not the console. ``delta=true`` metadata answers
carry only changed partitions; ``/v1/tick`` and ``/v1/synthetic/churn`` move offsets and
leaders/ISRs for the incremental-sync bench. Partitions carry offsets, no bytes. Versions start
at the process start in ms, so a restarted process never answers a delta to a ``since`` from
its previous life. KIP-253 expansion only.
"""

from __future__ import annotations

import bisect
import json
import random
import threading
import time
import zlib
from array import array

from broker_agent.contract.choices import (
    ErrorCode,
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.contract.errors import ApiError
from broker_agent.contract.metadata_rows import metadata_rows_body
from broker_agent.contract.models import SNAPSHOT_TSV_COLUMNS
from broker_agent.contract.ordering import first_ancestor_within

__all__ = [
    "DIR_TOTAL_BYTES",
    "DIR_USABLE_BYTES",
    "FLEET_MIX",
    "SyntheticCluster",
    "fleet_topic_sizes",
    "gzip_bytes",
]

#: Every synthetic log dir's KIP-827 total / usable bytes (the HTTP and Kafka paths alike).
DIR_TOTAL_BYTES = 4 << 40
DIR_USABLE_BYTES = 2 << 40
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


#: The fleet layout's mix (``sim up --synthetic-fleet N``): (partitions per topic, share of all
#: partitions). A large fleet is mostly small topics by count and mostly large ones by
#: partitions: at 1,000,000 partitions, 16 topics of 10,000, 20 of 5,000, 100 of 1,000 ...
#: 10,000 single-partition topics - 37,636 topics in all.
FLEET_MIX = (
    (10_000, 0.16),
    (5_000, 0.10),
    (1_000, 0.10),
    (200, 0.10),
    (100, 0.20),
    (30, 0.15),
    (12, 0.12),
    (6, 0.06),
    (1, 0.01),
)


def fleet_topic_sizes(partitions: int) -> list[int]:
    """Topic sizes of the fleet layout, largest first (so ``synthetic.topic-0000`` is a
    10,000-partition topic once the fleet is that big), summing to exactly ``partitions``:
    each class of :data:`FLEET_MIX` gets its share rounded down, and what rounding leaves goes
    to topics of 100 partitions and the last few to single-partition topics."""
    sizes: list[int] = []
    for size, share in FLEET_MIX:
        sizes += [size] * int(partitions * share // size)
    left = partitions - sum(sizes)
    sizes += [100] * (left // 100) + [1] * (left % 100)
    return sorted(sizes, reverse=True)


class SyntheticCluster:
    """All state of the synthetic cluster, in flat arrays indexed by partition ``i``
    (:meth:`locate`: topics are consecutive runs of indexes, of
    any sizes). Thread-safe (one lock)."""

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
        topic_sizes: list[int] | None = None,
    ):
        self.cluster_id = cluster_id
        self.brokers = brokers
        self.log_dirs = log_dirs
        self.base_url = base_url.rstrip("/")
        sizes = list(topic_sizes) if topic_sizes else [partitions_per_topic] * topics
        topics = len(sizes)
        self.topics = [f"synthetic.topic-{i:04d}" for i in range(topics)]
        self.topic_ids = [f"synthetic{t:013d}" for t in range(topics)]
        self.sizes = array("i", sizes)  # undeleted_partition_count (expansion raises it)
        self.initial_sizes = array("i", sizes)  # initial_partition_count
        self._index = {name: t for t, name in enumerate(self.topics)}
        #: First partition index of each topic (and ``n`` at the end): topic t is
        #: ``range(topic_start[t], topic_start[t + 1])``.
        self.topic_start = array("q", [0])
        self._topic_of = array("i")  # partition index -> topic
        for t, size in enumerate(sizes):
            self.topic_start.append(self.topic_start[-1] + size)
            self._topic_of.extend(array("i", [t]) * size)
        self.rf = max(1, min(rf, brokers))
        n = self.topic_start[-1]
        self.n = n
        # Partitions added by an expansion (alter_partition_count) are appended after the
        # layout's: index -> topic in _topic_of as any other, their numbers in _extra_part
        # (index - _layout_n), and per topic in _extra so topic_range lists them.
        self._layout_n = n
        self._extra_part = array("i")
        # Per added partition, its one leaderEpochAfterCreation entry (see _expand)
        self._barrier = array("i")
        self._barrier_epoch = array("i")
        self._extra: dict[int, list[int]] = {}
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
        self._meta_row: list[str | None] = [None] * n  # the same as a format=tsv row
        self._snap_entry: list[str | None] = [None] * n
        # A broker's replica entry differs between brokers only by leader / follower.
        # [follower JSON, leader JSON, follower row, leader row] per partition
        self._replica_entry: list[list[str | None]] = [[None] * n for _ in range(4)]
        # Changed partitions per version (snapshots: tick and churn; metadata: churn only).
        self._snap_log = _ChangeLog(start, 4 * n)
        self._meta_log = _ChangeLog(start, 4 * n)
        self._cache: dict[tuple, tuple[bytes, int]] = {}
        self._since_memo: tuple[tuple, list[int]] | None = None  # see _changed_since
        self._by_broker_memo: tuple[tuple, dict[int, list[int]]] | None = None
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
        self.groups = None  # SyntheticGroups (synthetic_groups.py): consumer groups, if any

    # -- state -------------------------------------------------------------------------------

    def locate(self, i: int) -> tuple[int, int]:
        """(topic, partition number) of partition index ``i``."""
        t = self._topic_of[i]
        if i >= self._layout_n:
            return t, self._extra_part[i - self._layout_n]
        return t, i - self.topic_start[t]

    def topic_range(self, t: int) -> range | list[int]:
        """The partition indexes of topic ``t``, in partition order."""
        layout = range(self.topic_start[t], self.topic_start[t + 1])
        extra = self._extra.get(t)
        return [*layout, *extra] if extra else layout

    def topic_index(self, name: str) -> int:
        t = self._index.get(name)
        if t is None:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return t

    def alter_partition_count(self, name: str, target: int) -> bytes:
        """KIP-253 expansion (``POST /v1/topics/{t}/partition-count``): the topic grows to
        ``target`` partitions in one new version, placed round robin like the rest; every
        existing partition of the topic gets a new leader epoch and partition epoch (the real
        controller's bump). Each new partition's leaderEpochAfterCreation holds the one entry
        consumers and the console read: the leader epoch, before the bump, of the partition its
        keys come from (:func:`~broker_agent.contract.ordering.first_ancestor_within` below the old
        count, KIP-253 step 4.2) - the controller's map of every lower partition would be
        10^8 entries for a 10,000-partition topic doubled. Answers the topic
        (``TopicMetadata``). A shrink is the real
        simulated cluster's (it needs partitions that drain): 400 ``INVALID_PARTITIONS`` here."""
        with self.lock:
            t = self.topic_index(name)
            u = self.sizes[t]
            if target < u:
                raise ApiError(
                    400,
                    ErrorCode.INVALID_PARTITIONS,
                    f"the synthetic cluster only expands ({name} has {u} partitions)",
                )
            if target > u:
                self._expand(t, u, target)
            return self._topic_json(t, self.topic_range(t)).encode()

    def _expand(self, t: int, u: int, target: int) -> None:
        self.version += 1
        v = self.version
        existing = list(self.topic_range(t))
        # leaderEpochAfterCreation, recorded before the bump as the controller does - only the
        # entry a consumer reads (KIP-253 step 4.2: the first ancestor that existed before),
        # not one per lower partition: a 10,000-partition topic doubled would hold 10^8
        epoch_of = {self.locate(i)[1]: self.leader_epoch[i] for i in existing}
        for q in range(u, target):
            barrier = first_ancestor_within(q, self.initial_sizes[t], u)
            self._barrier.append(barrier)
            self._barrier_epoch.append(epoch_of[barrier])
        for i in existing:
            self.leader_epoch[i] += 1
            self.partition_epoch[i] += 1
            self.mversion[i] = self.pversion[i] = v
            self._invalidate(i)
        count = target - u
        first = self.n
        new = range(first, first + count)
        self.leo.extend(array("q", bytes(8 * count)))
        self.lso.extend(array("q", bytes(8 * count)))
        self.leader_pos.extend(array("b", bytes(count)))
        self.isr_mask.extend(array("B", [(1 << self.rf) - 1]) * count)
        self.leader_epoch.extend(array("i", bytes(4 * count)))
        self.partition_epoch.extend(array("i", bytes(4 * count)))
        self.pversion.extend(array("q", [v]) * count)
        self.mversion.extend(array("q", [v]) * count)
        self._meta_entry.extend([None] * count)
        self._meta_row.extend([None] * count)
        self._snap_entry.extend([None] * count)
        for entries in self._replica_entry:
            entries.extend([None] * count)
        self._topic_of.extend(array("i", [t]) * count)
        self._extra_part.extend(array("i", range(u, target)))
        self._extra.setdefault(t, []).extend(new)
        for i in new:
            for k in range(self.rf):
                b = ((i + k) % self.brokers) + 1
                self.hosted[b].append(i)
                self.dir_counts[b][i % self.log_dirs] += 1
        self.n += count
        self.sizes[t] = target
        changed = [*existing, *new]
        self._snap_log.limit = self._meta_log.limit = 4 * self.n
        self._snap_log.add(v, changed)
        self._meta_log.add(v, changed)
        self.metadata_version = v
        self._cache.clear()
        self._cache_bytes = 0

    def replicas(self, i: int) -> list[int]:
        return [((i + k) % self.brokers) + 1 for k in range(self.rf)]

    def leader(self, i: int) -> int:
        return ((i + self.leader_pos[i]) % self.brokers) + 1

    def isr(self, i: int, replicas: list[int] | None = None) -> list[int]:
        """Partition ``i``'s ISR (``replicas``: its :meth:`replicas`, if the caller has them)."""
        m = self.isr_mask[i]
        return [r for k, r in enumerate(replicas or self.replicas(i)) if m >> k & 1]

    def tiered(self, t: int) -> bool:
        return t % 2 == 0

    def _known(self, since: int | None) -> bool:
        """A ``since`` this process can answer a delta to (from its own life)."""
        return since is not None and self.start_version <= since <= self.version

    def _invalidate(self, i: int) -> None:
        self._meta_entry[i] = None
        self._meta_row[i] = None
        self._snap_entry[i] = None
        for entries in self._replica_entry:
            entries[i] = None

    def _changed_since(self, since: int, *, metadata: bool = False) -> list[int]:
        """Sorted indexes of partitions whose (metadata or snapshot) version is after
        ``since``: from the change log when it reaches back that far, else by a scan."""
        key = (self.version, since, metadata)
        if self._since_memo is not None and self._since_memo[0] == key:
            return self._since_memo[1]  # every broker of a sync asks from the same version
        versions = self.mversion if metadata else self.pversion
        logged = (self._meta_log if metadata else self._snap_log).since(since)
        if logged is None:
            out = [i for i in range(self.n) if versions[i] > since]
        else:
            out = [i for i in logged if versions[i] > since]
        self._since_memo = (key, out)
        return out

    def _changed_by_broker(self, since: int) -> dict[int, list[int]]:
        """:meth:`_changed_since` (snapshots) split by hosting broker, once per version for
        all the brokers a sync asks (300 scans of the changes cost seconds at fleet scale)."""
        key = (self.version, since)
        if self._by_broker_memo is not None and self._by_broker_memo[0] == key:
            return self._by_broker_memo[1]
        out: dict[int, list[int]] = {}
        for i in self._changed_since(since):
            for k in range(self.rf):
                out.setdefault(((i + k) % self.brokers) + 1, []).append(i)
        self._by_broker_memo = (key, out)
        return out

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
            if self.groups is not None:
                self.groups.commit(fraction, self.version)
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
            if self.groups is not None:
                self.groups.commit(fraction, v, rnd)
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
            f'"state":"{LogDirState.ONLINE}","total_bytes":{DIR_TOTAL_BYTES},'
            f'"usable_bytes":{DIR_USABLE_BYTES},"probe_latency_ms":1.0,"error":null,'
            f'"replica_count":{self.dir_counts[b][d]},"offline_replica_count":0}}'
        )

    def _partition_json(self, i: int) -> str:
        s = self._meta_entry[i]
        if s is None:
            reps = _ints(self.replicas(i))
            s = (
                f'{{"partition":{self.locate(i)[1]},"replicas":{reps},"leader":{self.leader(i)},'
                f'"leader_epoch":{self.leader_epoch[i]},'
                f'"partition_epoch":{self.partition_epoch[i]},"isr":{_ints(self.isr(i))},'
                f'"offline_replicas":[],"created":{reps},'
                f'"leader_epoch_after_creation":{self._after_creation(i)},'
                f'"leader_epoch_before_deletion":{{}},"marked_for_deletion":false}}'
            )
            self._meta_entry[i] = s
        return s

    def _after_creation(self, i: int) -> str:
        """Partition ``i``'s leaderEpochAfterCreation as JSON (``{}`` for the layout's own)."""
        if i < self._layout_n:
            return "{}"
        j = i - self._layout_n
        return f'{{"{self._barrier[j]}":{self._barrier_epoch[j]}}}'

    def _partition_row(self, i: int) -> str:
        """:meth:`_partition_json` as a ``format=tsv`` row (``METADATA_PARTITION_COLUMNS``)."""
        s = self._meta_row[i]
        if s is None:
            reps = "{" + ",".join(map(str, self.replicas(i))) + "}"
            isr = "{" + ",".join(map(str, self.isr(i))) + "}"
            s = (
                f"{self.topics[self._topic_of[i]]}\t{self.locate(i)[1]}\t{reps}\t"
                f"{self.leader(i)}\t{self.leader_epoch[i]}\t{self.partition_epoch[i]}\t{isr}\t"
                f"{{}}\t{reps}\t{self._after_creation(i)}\t{{}}\tf"
            )
            self._meta_row[i] = s
        return s

    def _topic_fields(self, t: int) -> dict:
        """``TopicMetadata`` of topic ``t`` without its partitions (the live tiering state's
        when tiering commands are served)."""
        if self.tiering is not None:
            st = self.tiering.topic(t)
            configs, state, epoch = st["configs"], st["tiered_state"], st["tiered_epoch"]
            policy, acks = st["disable_policy"], sorted(st["tiering_acks"])
        else:
            tiered = self.tiered(t)
            configs = {TopicConfig.REMOTE_STORAGE_ENABLE: "true"} if tiered else {}
            state = TieredState.ENABLED if tiered else TieredState.NONE
            epoch, policy, acks = 0, None, []
        return {
            "name": self.topics[t],
            "topic_id": self.topic_ids[t],
            "configs": configs,
            "tiered_state": state,
            "tiered_epoch": epoch,
            "disable_policy": policy,
            "tiering_acks": acks,
            "initial_partition_count": self.initial_sizes[t],
            "undeleted_partition_count": self.sizes[t],
        }

    def _topic_head(self, t: int) -> str:
        """A ``TopicMetadata`` object up to ``"partitions":[``."""
        return json.dumps(self._topic_fields(t), separators=(",", ":"))[:-1] + ',"partitions":['

    def brokers_body(self) -> bytes:
        """``GET /v1/brokers``: the brokers of ``/v1/metadata`` without the topics."""
        with self.lock:
            return (
                "[" + ",".join(self._broker_json(b) for b in range(1, self.brokers + 1)) + "]"
            ).encode()

    def _topic_json(self, t: int, indexes) -> str:
        return self._topic_head(t) + ",".join(self._partition_json(i) for i in indexes) + "]}"

    def metadata_body(self, since: int | None, delta: bool, tsv: bool = False) -> bytes:
        """Bytes of ``GET /v1/metadata`` (uncompressed): JSON, or ``format=tsv``
        (:mod:`broker_agent.contract.metadata_rows`) with ``tsv``."""
        with self.lock:
            known = self._known(since)
            unchanged = known and since >= self.metadata_version
            is_delta = delta and known and not unchanged
            if unchanged:
                topic_parts: list[tuple[int, list[int] | range]] = []
            elif is_delta:
                by_topic: dict[int, list[int]] = {}
                for i in self._changed_since(since, metadata=True):
                    by_topic.setdefault(self._topic_of[i], []).append(i)
                topic_parts = list(by_topic.items())
            else:
                topic_parts = [(t, self.topic_range(t)) for t in range(len(self.topics))]
            brokers = (
                ""
                if unchanged
                else ",".join(self._broker_json(b) for b in range(1, self.brokers + 1))
            )
            # The answer's fields but its topics, which go first in the JSON answer
            # (``ClusterMetadata``'s field order) and as rows in the tsv one.
            fields = (
                f'"cluster_id":"{self.cluster_id}","version":{self.metadata_version},'
                f'"brokers":[{brokers}]'
            )
            rest = (
                f'"changed":{"false" if unchanged else "true"},'
                f'"full":{"false" if is_delta else "true"},'
                f'"since":{since if is_delta or unchanged else "null"},'
                f'"removed_topics":[],"removed_partitions":[]'
            )
            if tsv:
                return metadata_rows_body(
                    json.loads(f"{{{fields},{rest}}}"),
                    (
                        (self._topic_fields(t), [self._partition_row(i) for i in parts])
                        for t, parts in topic_parts
                    ),
                )
            topics = ",".join(self._topic_json(t, parts) for t, parts in topic_parts)
            return f'{{{fields},"topics":[{topics}],{rest}}}'.encode()

    def topic_body(self, name: str | None) -> bytes:
        with self.lock:
            if name is None:
                return (
                    "["
                    + ",".join(
                        self._topic_json(t, self.topic_range(t)) for t in range(len(self.topics))
                    )
                    + "]"
                ).encode()
            t = self.topic_index(name)
            return self._topic_json(t, self.topic_range(t)).encode()

    # -- snapshots ---------------------------------------------------------------------------

    def _cluster_entry(self, i: int) -> str:
        s = self._snap_entry[i]
        live = (
            self.tiering.cluster_tiering(self._topic_of[i])
            if self.tiering is not None and self.tiering.topics
            else None
        )
        if s is None or live is not None:
            t, p = self.locate(i)
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
        if tiering is None or not tiering.brokers or (b, self._topic_of[i]) not in tiering.brokers:
            return None
        return tiering.replica_tiering(b, self._topic_of[i], is_leader)

    def _replica_json(self, i: int, is_leader: bool, b: int = 0) -> str:
        """One replica entry of broker ``b``'s snapshot (the same for every follower of ``i``,
        cached, unless ``b`` applied a tiering command for its topic)."""
        live = self._live_tiering(b, i, is_leader)
        cache = self._replica_entry[1 if is_leader else 0]
        s = cache[i]
        if s is None or live is not None:
            t, p = self.locate(i)
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
            t, p = self.locate(i)
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
        """One synthetic broker's :class:`~broker_agent.contract.models.BrokerSnapshot` as JSON bytes,
        or with ``rows`` in ``format=tsv`` (see ``broker_agent.contract.models.snapshot_tsv``)."""
        self._check_broker(broker_id)
        with self.lock:
            full = not self._known(since)
            b = broker_id
            indexes = self.hosted[b] if full else self._changed_by_broker(since).get(b, [])
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
