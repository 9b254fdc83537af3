"""Moving a replica between a broker's own log dirs (Kafka's AlterReplicaLogDirs, KIP-113).

As Kafka's ``ReplicaAlterLogDirsThread``: a *future replica* (``<topic>-<partition>.<id>-future``,
skipped by the start-up scan) is copied batch by batch while the current log keeps serving, then
swapped in under the replica's locks. The copy keeps the current segment boundaries, so the
remote copier (which works by offsets) finds the same closed segments, and follows a truncation
by leader epoch (KIP-101). ``replica.alter.log.dirs.io.max.bytes.per.second`` throttles it.
Unlike Kafka, the throttle is not persisted and a move under way at shutdown is not resumed
(its future folder stays behind, ignored).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from broker_agent.contract.choices import ErrorCode
from broker_agent.simulator.broker.logdirs import LogDirs
from broker_agent.simulator.broker.state import BrokerCore, log
from broker_agent.simulator.storage import LogDir, PartitionLog, StorageError

__all__ = ["FutureReplica", "ReplicaDirMover", "dir_of"]

#: the most the copy reads at once (bytes; at least one batch)
CHUNK_BYTES = 1 << 20


@dataclass
class FutureReplica:
    """A replica's copy under way to another dir of the same broker."""

    topic: str
    partition: int
    dir_name: str
    log: PartitionLog
    stop: threading.Event = field(default_factory=threading.Event)

    def offset_lag(self, current: PartitionLog) -> int:
        """How many offsets the copy is behind the ``current`` log (Kafka's
        ``getLogEndOffsetLag`` of a future replica, as DescribeLogDirs answers it)."""
        return max(current.log_end_offset - self.log.log_end_offset, 0)


class ReplicaDirMover:
    """The moves of one broker (Kafka's ``ReplicaAlterLogDirsManager``). Reads the broker's
    ``core`` (lock, replicas, topics, stopped, data_cond) and its ``log_dirs``, where it also
    leaves a preferred dir; owns the future replicas (``futures``, guarded by the core's lock)
    and the copy throttle."""

    def __init__(self, core: BrokerCore, log_dirs: LogDirs):
        self.core = core
        self.log_dirs = log_dirs
        self.futures: dict[tuple[str, int], FutureReplica] = {}
        #: ``replica.alter.log.dirs.io.max.bytes.per.second`` (None: unthrottled)
        self.throttle_bytes_per_s: int | None = None

    # -- the request ---------------------------------------------------------------------------

    def alter(self, topic: str, partition: int, path: str) -> str | None:
        """Move the replica to the dir at ``path`` (absolute); Kafka's error name, or None.

        In Kafka's order: a path that is no configured dir is LOG_DIR_NOT_FOUND, an offline
        destination KAFKA_STORAGE_ERROR; a move under way to another dir is abandoned; an
        offline replica is KAFKA_STORAGE_ERROR; a partition this broker does not host is
        REPLICA_NOT_AVAILABLE, and the dir is remembered for its replica should one be assigned
        here (UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition); the replica's own dir (or a move already going there) is done; a broker
        with any offline dir creates no future replica (KAFKA_STORAGE_ERROR), so one partition
        never gets future logs in two dirs."""
        b = self.core
        d = dir_of(self.log_dirs.dirs, path)
        if d is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not d.good:
            return ErrorCode.KAFKA_STORAGE_ERROR
        key = (topic, partition)
        with b.lock:
            current = self.futures.get(key)
            if current is not None and current.dir_name != d.name:
                self._abandon(current)
            r = b.replicas.get(key)
            if r is None:
                parts = b.topics.get(topic, {}).get("partitions", [])
                if any(p["partition"] == partition for p in parts):
                    # Kafka's preferred log dir: a replica assigned here later (a reassignment
                    # adding this broker) is created on that dir
                    self.log_dirs.prefer_dir(topic, partition, d.name)
                    return ErrorCode.REPLICA_NOT_AVAILABLE
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            src = r.log
            if src is None:
                return ErrorCode.KAFKA_STORAGE_ERROR
            if r.dir_name == d.name or key in self.futures:
                return None
            if not self.log_dirs.no_bad_dir():
                return ErrorCode.KAFKA_STORAGE_ERROR
            folder = f"{topic}-{partition}.{uuid.uuid4().hex}-future"
            fut = PartitionLog(d, topic, partition, src.topic_id, 1 << 62, folder=folder)
            try:
                fut.create()
            except StorageError:
                return ErrorCode.KAFKA_STORAGE_ERROR
            move = FutureReplica(topic, partition, d.name, fut)
            self.futures[key] = move
        log.info("moving %s-%s from %s to %s", topic, partition, r.dir_name, d.name)
        threading.Thread(
            target=self._run,
            args=(move, r),
            name=f"alter-log-dirs-{topic}-{partition}",
            daemon=True,
        ).start()
        return None

    def incoming_bytes(self, dir_name: str) -> int:
        """Bytes of the future replicas on ``dir_name``: a replica being moved there takes room
        already."""
        return sum(f.log.size_bytes for f in list(self.futures.values()) if f.dir_name == dir_name)

    def moves(self) -> list[dict]:
        """The moves under way as :class:`broker_agent.contract.models.ReplicaDirMove` fields (under the
        core's lock), by partition: what the broker's snapshot reports."""
        out = []
        for (topic, partition), move in sorted(self.futures.items()):
            r = self.core.replicas.get((topic, partition))
            if r is None or r.log is None:
                continue
            out.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "log_dir": r.dir_name,
                    "future_log_dir": move.dir_name,
                    "future_size_bytes": move.log.size_bytes,
                    "future_offset_lag": move.offset_lag(r.log),
                }
            )
        return out

    # -- the copy ------------------------------------------------------------------------------

    def _run(self, move: FutureReplica, r) -> None:
        started, copied = time.monotonic(), 0
        try:
            while not (move.stop.is_set() or self.core.stopped.is_set()):
                src = r.log
                if src is None or self.core.replicas.get((move.topic, move.partition)) is not r:
                    break  # the replica went offline or away: the move with it
                n = self._copy_some(src, move.log, self._chunk())
                if n == 0 and self._swap(move, r, src):
                    return
                copied += n
                started, copied = self._throttle(move, started, copied)
                if n == 0:
                    time.sleep(0.01)
        except StorageError as exc:
            log.warning("moving %s-%s stopped: %s", move.topic, move.partition, exc)
        except Exception:
            log.exception("moving %s-%s failed", move.topic, move.partition)
        with self.core.lock:
            if self.futures.get((move.topic, move.partition)) is move:
                self._abandon(move)

    def _chunk(self) -> int:
        limit = self.throttle_bytes_per_s
        return CHUNK_BYTES if limit is None else max(1, min(CHUNK_BYTES, limit))

    def _throttle(self, move: FutureReplica, started: float, copied: int) -> tuple[float, int]:
        """Wait while the copy is ahead of the quota; a lifted quota ends the wait at once."""
        while not move.stop.is_set():
            limit = self.throttle_bytes_per_s
            if limit is None:
                return time.monotonic(), 0
            if copied <= limit * (time.monotonic() - started):
                return started, copied
            move.stop.wait(0.05)
        return started, copied

    @staticmethod
    def _copy_some(src: PartitionLog, fut: PartitionLog, max_bytes: int) -> int:
        """Copy the next batches of ``src`` into ``fut``; the bytes copied (0: caught up)."""
        epoch = fut.latest_epoch
        if epoch >= 0:  # KIP-101: drop what the current log no longer has
            _e, end = src.end_offset_for_epoch(epoch)
            if 0 <= end < fut.log_end_offset:
                fut.truncate_to(end)
        if fut.log_end_offset > src.log_end_offset:
            fut.truncate_to(src.log_end_offset)
        start = src.local_log_start_offset
        if fut.log_end_offset < start or (not fut.segments and fut.log_end_offset != start):
            fut.truncate_fully_and_start_at(start)  # retention or tiering took the head
        if fut.log_end_offset >= src.log_end_offset:
            return 0
        bases = {s.base_offset for s in src.segments}
        n = 0
        for batch in src.read(fut.log_end_offset, max_bytes):
            if batch.base_offset != fut.log_end_offset:
                break  # the current log changed under the read: the next round sees it
            if batch.base_offset in bases and fut.segments and fut.segments[-1].entries:
                fut.maybe_roll()  # the current log's segment boundaries
            fut.append(batch, assign_offsets=False)
            n += batch.size
        return n

    def _swap(self, move: FutureReplica, r, src: PartitionLog) -> bool:
        """Swap the caught-up future log in (Kafka's ``maybeReplaceCurrentWithFutureReplica``),
        or answer False when the current log moved on meanwhile."""
        b, fut = self.core, move.log
        with b.lock, r.cond, src.lock:
            if r.log is not src or self.futures.get((move.topic, move.partition)) is not move:
                return False
            while self._copy_some(src, fut, CHUNK_BYTES):
                pass  # the last batches: no append can come in while the log's lock is held
            if fut.log_end_offset != src.log_end_offset:
                return False
            with fut.lock:
                for seg in fut.closed_segments():  # retention ran on the current log
                    if seg.last_offset < src.local_log_start_offset:
                        fut.delete_segment(seg)
                fut.log_start_offset = src.log_start_offset
                fut.high_watermark = src.high_watermark
                fut.leader_epochs = list(src.leader_epochs)
                fut.producers = {k: list(v) for k, v in src.producers.items()}
                fut.segment_bytes = src.segment_bytes
                fut.rename()
            r.log, r.dir_name = fut, move.dir_name
            del self.futures[(move.topic, move.partition)]
            with contextlib.suppress(StorageError):
                src.delete()  # a writer still holding it gets a StorageError of its own
            r.cond.notify_all()
        b.notify_data()
        log.info("moved %s-%s to %s", move.topic, move.partition, move.dir_name)
        return True

    def _abandon(self, move: FutureReplica) -> None:
        """Stop a move and delete its future log (under the broker's lock)."""
        move.stop.set()
        self.futures.pop((move.topic, move.partition), None)
        with contextlib.suppress(StorageError):
            move.log.delete()


def dir_of(dirs: dict[str, LogDir], path: str) -> LogDir | None:
    """The configured dir (of ``dirs``, a broker's) at absolute ``path``."""
    return next(
        (d for d in dirs.values() if os.path.abspath(d.path) == os.path.normpath(path)),
        None,
    )
