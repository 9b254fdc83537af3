"""Local log storage: log directories, replicas as ``<topic>-<partition>`` folders of segment files.

A segment file is named by its base offset and holds record batches, rolled at ``segment.bytes``:
``_HEADER`` (big-endian base offset, leader epoch, producer id, base sequence, max timestamp,
record count, payload length, CRC32 of the payload), then records of ``timestamp | key_len (-1 =
null) | key | value_len | value``; offsets are ``base_offset + index``. Every I/O goes through
:meth:`LogDir.io`, which turns an ``OSError`` into :class:`StorageError` and marks the dir OFFLINE
(KIP-112: "a log directory is good until an I/O operation on it fails"). Nothing is mocked.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import shutil
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from broker_agent.contract.choices import LogDirState

__all__ = [
    "Batch",
    "LogDir",
    "PartitionLog",
    "Record",
    "StorageError",
    "decode_batches",
    "encode_batch",
]

_HEADER = struct.Struct(">qiqiqiiI")
_REC_HEAD = struct.Struct(">qi")
_LEN = struct.Struct(">i")
SEGMENT_SUFFIX = ".log"
PROBE_FILE = ".strata-probe"


class StorageError(Exception):
    """An I/O error on a log directory (Kafka's KafkaStorageException)."""

    def __init__(self, log_dir: str, error: BaseException | str):
        super().__init__(f"{log_dir}: {error}")
        self.log_dir = log_dir
        self.error = str(error)


@dataclass(slots=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


@dataclass(slots=True)
class Batch:
    base_offset: int
    leader_epoch: int
    producer_id: int
    base_sequence: int
    max_timestamp_ms: int
    record_count: int
    payload: bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def size(self) -> int:
        return _HEADER.size + len(self.payload)

    def records(self) -> Iterator[Record]:
        pos, data = 0, self.payload
        for i in range(self.record_count):
            ts, klen = _REC_HEAD.unpack_from(data, pos)
            pos += _REC_HEAD.size
            key = None
            if klen >= 0:
                key = data[pos : pos + klen]
                pos += klen
            (vlen,) = _LEN.unpack_from(data, pos)
            pos += 4
            value = data[pos : pos + vlen]
            pos += vlen
            yield Record(self.base_offset + i, ts, key, value)

    def to_bytes(self) -> bytes:
        return (
            _HEADER.pack(
                self.base_offset,
                self.leader_epoch,
                self.producer_id,
                self.base_sequence,
                self.max_timestamp_ms,
                self.record_count,
                len(self.payload),
                zlib.crc32(self.payload),
            )
            + self.payload
        )


def encode_batch(
    records: list[tuple[bytes | None, bytes, int]],
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> Batch:
    """Build a batch from ``(key, value, timestamp_ms)`` tuples."""
    parts = []
    max_ts = -1
    for key, value, ts in records:
        max_ts = max(max_ts, ts)
        if key is None:
            parts.append(_REC_HEAD.pack(ts, -1))
        else:
            parts.append(_REC_HEAD.pack(ts, len(key)))
            parts.append(key)
        parts.append(_LEN.pack(len(value)))
        parts.append(value)
    return Batch(
        base_offset, leader_epoch, producer_id, base_sequence, max_ts, len(records), b"".join(parts)
    )


def decode_batches(data: bytes, *, strict: bool = True) -> Iterator[tuple[int, Batch]]:
    """Yield ``(position, batch)``; stops at a torn tail (or raises if ``strict``)."""
    pos, end = 0, len(data)
    while pos + _HEADER.size <= end:
        base, epoch, pid, seq, max_ts, count, plen, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        payload = data[start : start + plen]
        if len(payload) < plen or zlib.crc32(payload) != crc or count <= 0:
            if strict:
                raise ValueError(f"corrupt batch at position {pos}")
            return
        yield pos, Batch(base, epoch, pid, seq, max_ts, count, payload)
        pos = start + plen
    if strict and pos != end:
        raise ValueError("trailing bytes after the last batch")


class LogDir:
    """One JBOD log directory of a broker (KIP-112)."""

    def __init__(self, name: str, path: str, on_failure: Callable[[LogDir, str], None]):
        self.name = name
        self.path = path
        self.state = LogDirState.ONLINE
        self.error: str | None = None
        self.probe_latency_ms: float | None = None
        self.cordoned = False
        self.capacity_bytes: int | None = None
        """Simulated disk size (``--log-dir-capacity-bytes``): usable space is what the
        replicas on this dir leave of it (never more than the real free space)."""
        self.probe_delay_ms = 0.0
        """Latency injected into each probe (set only by the tests' agent entry point)."""
        self._on_failure = on_failure
        self._lock = threading.Lock()

    @property
    def good(self) -> bool:
        return self.state in LogDirState.GOOD

    def io(self, fn: Callable[[], object]):
        """Run an I/O operation on this dir; an OSError takes the whole dir offline."""
        if not self.good:
            raise StorageError(self.name, self.error or "log directory is offline")
        try:
            return fn()
        except OSError as exc:
            self.fail(f"{type(exc).__name__}: {exc}")
            raise StorageError(self.name, exc) from exc

    def fail(self, error: str) -> None:
        with self._lock:
            if self.state == LogDirState.OFFLINE:
                return
            self.state = LogDirState.OFFLINE
            self.error = error
        self._on_failure(self, error)

    def probe(self) -> float:
        """Write, fsync, read back and remove a probe file; return the latency in ms.

        Raises ``OSError`` if the directory is unusable (chmod 000 for non-root users, the folder
        replaced by a file, the disk gone).
        """
        started = time.monotonic()
        # One file per probe: the periodic prober, an admin's re-probe and a recovery step may
        # probe one dir at once, and a shared name let one truncate another's bytes, which read
        # back as a (false) KIP-112 failure.
        probe = os.path.join(self.path, f"{PROBE_FILE}-{uuid.uuid4().hex}")
        payload = os.urandom(16)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                os.write(fd, payload)
                if self.probe_delay_ms > 0:
                    time.sleep(self.probe_delay_ms / 1000.0)
                os.fsync(fd)
            finally:
                os.close(fd)
            with open(probe, "rb") as fh:
                if fh.read() != payload:
                    raise OSError("probe read back different bytes")
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(probe)
            raise
        os.unlink(probe)
        os.listdir(self.path)
        return (time.monotonic() - started) * 1000.0

    def usage(self) -> tuple[int, int]:
        try:
            st = shutil.disk_usage(self.path)
            return st.total, st.free
        except OSError:
            return 0, 0


@dataclass(slots=True)
class _BatchIndexEntry:
    base_offset: int
    last_offset: int
    position: int
    size: int
    max_timestamp_ms: int


@dataclass
class Segment:
    base_offset: int
    path: str
    size: int = 0
    entries: list[_BatchIndexEntry] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    max_timestamp_ms: int = -1
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def next_offset(self) -> int:
        return self.entries[-1].last_offset + 1 if self.entries else self.base_offset

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def add(self, entry: _BatchIndexEntry) -> None:
        self.entries.append(entry)
        self.bases.append(entry.base_offset)
        self.size = entry.position + entry.size
        self.max_timestamp_ms = max(self.max_timestamp_ms, entry.max_timestamp_ms)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class PartitionLog:
    """The local log of one replica: segments, offsets, leader-epoch cache, producer state.

    Checkpoints (small JSON files in the replica folder, rewritten atomically): ``log-start-offset``,
    ``leader-epoch-checkpoint`` (list of ``[epoch, start_offset]``) and ``partition.metadata``
    (topic id), as Kafka keeps them beside the segments.
    """

    def __init__(
        self,
        log_dir: LogDir,
        topic: str,
        partition: int,
        topic_id: str,
        segment_bytes: int,
        folder: str | None = None,
    ):
        """``folder``: the replica's folder in its dir, ``<topic>-<partition>`` unless given
        (a future replica's, until :meth:`rename`)."""
        self.log_dir = log_dir
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.segment_bytes = segment_bytes
        self.path = os.path.join(log_dir.path, folder or f"{topic}-{partition}")
        self.lock = threading.RLock()
        self.segments: list[Segment] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.leader_epochs: list[tuple[int, int]] = []
        # producer_id -> list of (first_seq, last_seq, base_offset, last_offset), last 5 batches
        self.producers: dict[int, list[tuple[int, int, int, int]]] = {}
        self.deleted = False

    # -- lifecycle ---------------------------------------------------------------------------

    def create(self) -> None:
        def _create():
            os.makedirs(self.path, exist_ok=True)
            self._write_json("partition.metadata", {"topic_id": self.topic_id, "version": 0})

        self._io(_create)
        self.segments = []
        self._write_checkpoints()

    def load(self) -> None:
        self._io(self._load)

    def _load(self) -> None:
        meta = self._read_json("partition.metadata", {})
        self.topic_id = meta.get("topic_id", self.topic_id)
        self.log_start_offset = self._read_json("log-start-offset", {}).get("offset", 0)
        self.leader_epochs = [tuple(e) for e in self._read_json("leader-epoch-checkpoint", [])]
        self.high_watermark = self._read_json("high-watermark", {}).get("offset", 0)
        names = sorted(n for n in os.listdir(self.path) if n.endswith(SEGMENT_SUFFIX))
        self.segments = []
        for name in names:
            seg = Segment(int(name[: -len(SEGMENT_SUFFIX)]), os.path.join(self.path, name))
            with open(seg.path, "rb") as fh:
                data = fh.read()
            valid = 0
            for pos, batch in decode_batches(data, strict=False):
                seg.add(
                    _BatchIndexEntry(
                        batch.base_offset,
                        batch.last_offset,
                        pos,
                        batch.size,
                        batch.max_timestamp_ms,
                    )
                )
                self._note_batch(batch)
                valid = pos + batch.size
            if valid != len(data):  # torn write at the tail: recover as Kafka does
                with open(seg.path, "r+b") as fh:
                    fh.truncate(valid)
            seg.size = valid
            seg.created_ms = int(os.stat(seg.path).st_mtime * 1000)
            self.segments.append(seg)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    def delete(self) -> None:
        """Remove the replica's folder. Under the log's lock, and every later operation on this
        log answers a :class:`StorageError` of its own (:meth:`_io`): a fetcher or the
        maintenance thread still holding the log must not find its files gone, which would
        read as a disk error and take the healthy dir offline."""
        with self.lock:
            self._io(lambda: shutil.rmtree(self.path, ignore_errors=False))
            self.deleted = True

    def rename(self) -> None:
        """Give the replica's folder its partition name, ``<topic>-<partition>`` in the same dir
        (a future replica swapped in, KIP-113); the segments follow, checkpoints are written."""
        path = os.path.join(self.log_dir.path, f"{self.topic}-{self.partition}")
        with self.lock:
            self._io(lambda: os.rename(self.path, path))
            self.path = path
            for seg in self.segments:
                seg.path = os.path.join(path, os.path.basename(seg.path))
            self._write_checkpoints()
            self.checkpoint_high_watermark()

    def _io(self, fn: Callable[[], object]):
        """:meth:`LogDir.io` for this log's files; a deleted log fails alone, not its dir."""
        if self.deleted:
            raise StorageError(self.log_dir.name, f"{self.topic}-{self.partition} was deleted")
        return self.log_dir.io(fn)

    # -- offsets -----------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        if self.segments:
            return self.segments[-1].next_offset
        return self._empty_start

    @property
    def _empty_start(self) -> int:
        return getattr(self, "_start_when_empty", self.log_start_offset)

    @property
    def local_log_start_offset(self) -> int:
        for seg in self.segments:
            if seg.entries:
                return seg.base_offset
        return self.log_end_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epochs[-1][0] if self.leader_epochs else -1

    # -- writes ------------------------------------------------------------------------------

    def _note_batch(self, batch: Batch) -> None:
        if not self.leader_epochs or batch.leader_epoch > self.leader_epochs[-1][0]:
            self.leader_epochs.append((batch.leader_epoch, batch.base_offset))
        if batch.producer_id >= 0:
            last_seq = batch.base_sequence + batch.record_count - 1
            history = self.producers.setdefault(batch.producer_id, [])
            history.append((batch.base_sequence, last_seq, batch.base_offset, batch.last_offset))
            del history[:-5]

    def find_duplicate(self, producer_id: int, base_sequence: int) -> tuple[int, int] | None:
        """Idempotent producer: the ``(base_offset, last_offset)`` of a batch already appended."""
        for first, _last, base, last_off in self.producers.get(producer_id, ()):
            if first == base_sequence:
                return base, last_off
        return None

    def append(self, batch: Batch, *, assign_offsets: bool) -> Batch:
        """Append one batch (leader: assign offsets; follower: keep the leader's offsets)."""
        with self.lock:
            if assign_offsets:
                batch.base_offset = self.log_end_offset
            elif batch.base_offset != self.log_end_offset:
                raise ValueError(
                    f"non-contiguous append at {batch.base_offset}, log end {self.log_end_offset}"
                )
            data = batch.to_bytes()
            seg = self.segments[-1] if self.segments else None
            if seg is None or (seg.size > 0 and seg.size + len(data) > self.segment_bytes):
                seg = Segment(
                    batch.base_offset, os.path.join(self.path, segment_file_name(batch.base_offset))
                )
                new = True
            else:
                new = False

            def _write():
                with open(seg.path, "ab") as fh:
                    pos = fh.tell()
                    fh.write(data)
                return pos

            position = self._io(_write)
            if new:
                self.segments.append(seg)
            seg.add(
                _BatchIndexEntry(
                    batch.base_offset,
                    batch.last_offset,
                    position,
                    len(data),
                    batch.max_timestamp_ms,
                )
            )
            epochs_before = len(self.leader_epochs)
            self._note_batch(batch)
            if len(self.leader_epochs) != epochs_before:
                self._write_checkpoints()
            return batch

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above ``offset`` (follower truncation after leader change)."""
        with self.lock:
            if offset >= self.log_end_offset:
                return

            def _truncate():
                while self.segments and self.segments[-1].base_offset >= offset:
                    seg = self.segments.pop()
                    os.unlink(seg.path)
                if self.segments:
                    seg = self.segments[-1]
                    keep = [e for e in seg.entries if e.base_offset < offset]
                    size = keep[-1].position + keep[-1].size if keep else 0
                    with open(seg.path, "r+b") as fh:
                        fh.truncate(size)
                    seg.entries, seg.bases, seg.size = keep, [e.base_offset for e in keep], size

            self._io(_truncate)
            if not self.segments:
                self._start_when_empty = offset
            self.leader_epochs = [(e, s) for e, s in self.leader_epochs if s < offset]
            self.producers = {}
            self._reload_producers()
            self.high_watermark = min(self.high_watermark, offset)
            self._write_checkpoints()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every local segment and restart the log at ``offset`` (Kafka's same-named step
        when the leader's local log starts above the follower's end, e.g. after tiering)."""
        with self.lock:

            def _drop():
                for seg in self.segments:
                    os.unlink(seg.path)

            self._io(_drop)
            self.segments = []
            self._start_when_empty = offset
            self.log_start_offset = max(self.log_start_offset, offset)
            self.high_watermark = max(self.high_watermark, offset)
            self._write_checkpoints()

    def _reload_producers(self) -> None:
        for seg in self.segments[-2:]:
            for batch in self._read_batches(seg, seg.base_offset, 1 << 62):
                if batch.producer_id >= 0:
                    last_seq = batch.base_sequence + batch.record_count - 1
                    hist = self.producers.setdefault(batch.producer_id, [])
                    hist.append(
                        (batch.base_sequence, last_seq, batch.base_offset, batch.last_offset)
                    )
                    del hist[:-5]

    def set_leader_epoch_start(self, epoch: int, start_offset: int) -> None:
        """A new leader records its epoch's start offset before appending (leader-epoch cache)."""
        with self.lock:
            if not self.leader_epochs or epoch > self.leader_epochs[-1][0]:
                self.leader_epochs.append((epoch, start_offset))
                self._write_checkpoints()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``."""
        with self.lock:
            found = -1, -1
            for i, (e, _start) in enumerate(self.leader_epochs):
                if e > epoch:
                    break
                nxt = self.leader_epochs[i + 1][1] if i + 1 < len(self.leader_epochs) else None
                found = e, (nxt if nxt is not None else self.log_end_offset)
            return found

    def epochs_between(self, start: int, end: int) -> list[dict]:
        """Leader epochs that cover offsets ``start..end`` (inclusive), as segment_leader_epochs."""
        out = []
        for i, (e, s) in enumerate(self.leader_epochs):
            nxt = self.leader_epochs[i + 1][1] if i + 1 < len(self.leader_epochs) else None
            if s > end or (nxt is not None and nxt <= start):
                continue
            out.append({"epoch": e, "start_offset": max(s, start)})
        return out

    def advance_log_start_offset(self, offset: int) -> bool:
        with self.lock:
            if offset <= self.log_start_offset:
                return False
            self.log_start_offset = offset
            self._write_checkpoints()
            return True

    def delete_segment(self, seg: Segment) -> None:
        """Delete a closed segment. A segment another thread has already taken away (a
        follower's truncation, or retention, between the caller's :meth:`closed_segments` and
        this call) is gone already: nothing to do - unlinking its file again would raise
        FileNotFoundError and take the whole log dir offline for a healthy disk."""
        with self.lock:
            if not any(s is seg for s in self.segments):
                return
            if seg is self.segments[-1]:
                raise ValueError("the active segment is never deleted")
            self._io(lambda: os.unlink(seg.path))
            self.segments.remove(seg)

    def maybe_roll(self, max_age_ms: int | None = None) -> None:
        """Roll the active segment so it can be tiered (segment.ms stand-in, used by tests)."""
        with self.lock:
            if self.segments and self.segments[-1].entries:
                seg = self.segments[-1]
                if max_age_ms is None or (time.time() * 1000 - seg.created_ms) >= max_age_ms:
                    nxt = Segment(
                        seg.next_offset, os.path.join(self.path, segment_file_name(seg.next_offset))
                    )
                    self._io(lambda: open(nxt.path, "ab").close())
                    self.segments.append(nxt)

    def checkpoint_high_watermark(self) -> None:
        with self.lock:
            self._write_json("high-watermark", {"offset": self.high_watermark})

    def _write_checkpoints(self) -> None:
        self._write_json("log-start-offset", {"offset": self.log_start_offset})
        self._write_json("leader-epoch-checkpoint", [list(e) for e in self.leader_epochs])

    def _write_json(self, name: str, obj) -> None:
        path = os.path.join(self.path, name)

        def _write():
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(obj, fh)
            os.replace(tmp, path)

        self._io(_write)

    def _read_json(self, name: str, default):
        try:
            with open(os.path.join(self.path, name)) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return default

    # -- reads -------------------------------------------------------------------------------

    def _read_batches(self, seg: Segment, offset: int, max_bytes: int) -> list[Batch]:
        idx = bisect.bisect_right(seg.bases, offset) - 1
        idx = max(idx, 0)
        if idx >= len(seg.entries):
            return []
        start = seg.entries[idx].position
        length = 0
        for e in seg.entries[idx:]:
            if length and length + e.size > max_bytes:
                break
            length += e.size

        def _read():
            with open(seg.path, "rb") as fh:
                fh.seek(start)
                return fh.read(length)

        data = self._io(_read)
        return [b for _, b in decode_batches(data)]

    def read(self, offset: int, max_bytes: int, upper: int | None = None) -> list[Batch]:
        """Batches from the one containing ``offset``, up to ``max_bytes`` (at least one batch),
        never past ``upper`` (exclusive: the high watermark for consumers)."""
        with self.lock:
            bases = [s.base_offset for s in self.segments]
            i = bisect.bisect_right(bases, offset) - 1
            out: list[Batch] = []
            budget = max_bytes
            i = max(i, 0)
            while i < len(self.segments) and budget > 0:
                seg = self.segments[i]
                if seg.entries and seg.last_offset >= offset:
                    for b in self._read_batches(seg, offset, budget):
                        if upper is not None and b.last_offset >= upper:
                            return out
                        if b.last_offset >= offset:
                            out.append(b)
                            budget -= b.size
                i += 1
            return out

    def read_segment_bytes(self, seg: Segment) -> bytes | None:
        """A closed segment's bytes (the copier's upload), or ``None`` when the segment was
        deleted or truncated away since the caller listed it. The file is opened under the
        log's lock, so it cannot vanish between the check and the open (an unlinked file stays
        readable through an open handle); the read itself runs outside the lock, so a large
        upload does not hold up appends."""
        with self.lock:
            if not any(s is seg for s in self.segments):
                return None
            fh = self._io(lambda: open(seg.path, "rb"))  # noqa: SIM115 (closed below, outside the lock)
        with fh:
            return self._io(lambda: fh.read(seg.size))

    def closed_segments(self) -> list[Segment]:
        with self.lock:
            return [s for s in self.segments[:-1] if s.entries]
