"""The shared remote store (KIP-405 RemoteStorageManager + RemoteLogMetadataManager stand-in).

Layout, under ``<data>/remote/``::

    <topic>-<topic_id>/<partition>/<segment_id>.log    the segment object (same bytes as local)
    <topic>-<topic_id>/<partition>/<segment_id>.json   its metadata record (RemoteSegmentRow)

A metadata record is rewritten atomically (write + rename) on each state change
COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED.
``object_path`` in each record is absolute, so the Spark purge / retention jobs can delete the
object directly and then mark the segment through the agent API.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator

from broker_agent.choices import RemoteSegmentState

__all__ = ["RemoteStore", "is_readable"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def is_readable(seg: dict, purge_below_tiered_epoch: int, log_start_offset: int) -> bool:
    """A remote segment serves fetches only when fully copied, not fenced by a delete-policy
    disablement (KIP-950: tiered_epoch below the purge epoch is unreadable at once) and not
    wholly below the log start offset."""
    return (
        seg["state"] == RemoteSegmentState.COPY_SEGMENT_FINISHED
        and seg["tiered_epoch"] >= purge_below_tiered_epoch
        and seg["end_offset"] >= log_start_offset
    )


class RemoteStore:
    def __init__(self, root: str, cluster: str):
        self.root = root
        self.cluster = cluster
        os.makedirs(root, exist_ok=True)
        self._cache: dict[str, tuple[int, list[dict]]] = {}
        self._lock = threading.Lock()

    def partition_dir(self, topic: str, topic_id: str, partition: int) -> str:
        return os.path.join(self.root, f"{topic}-{topic_id}", str(partition))

    # -- metadata ----------------------------------------------------------------------------

    def _write_record(self, pdir: str, record: dict) -> None:
        path = os.path.join(pdir, f"{record['segment_id']}.json")
        tmp = path + f".{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)

    def segments(self, topic: str, topic_id: str, partition: int) -> list[dict]:
        """All metadata records of a partition, oldest first (cached by directory mtime)."""
        pdir = self.partition_dir(topic, topic_id, partition)
        try:
            mtime = os.stat(pdir).st_mtime_ns
        except FileNotFoundError:
            return []
        with self._lock:
            cached = self._cache.get(pdir)
            if cached and cached[0] == mtime:
                return cached[1]
        out = []
        for name in os.listdir(pdir):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(pdir, name)) as fh:
                    out.append(json.load(fh))
            except (FileNotFoundError, json.JSONDecodeError):
                continue
        out.sort(key=lambda r: (r["start_offset"], r["event_timestamp_ms"]))
        with self._lock:
            self._cache[pdir] = (mtime, out)
        return out

    def iter_all(self, topic: str | None = None) -> Iterator[dict]:
        """Every metadata record in the store, ordered by topic, partition, start offset."""
        try:
            topic_dirs = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return
        for tdir in topic_dirs:
            name, _, topic_id = tdir.rpartition("-")
            if topic is not None and name != topic:
                continue
            parts = sorted(int(p) for p in os.listdir(os.path.join(self.root, tdir)) if p.isdigit())
            for p in parts:
                yield from self.segments(name, topic_id, p)

    def find(self, segment_id: str) -> tuple[str, dict] | None:
        for tdir in os.listdir(self.root):
            for p in os.listdir(os.path.join(self.root, tdir)):
                path = os.path.join(self.root, tdir, p, f"{segment_id}.json")
                if os.path.exists(path):
                    with open(path) as fh:
                        return os.path.dirname(path), json.load(fh)
        return None

    # -- copy / delete -----------------------------------------------------------------------

    def copy_segment(
        self,
        *,
        topic: str,
        topic_id: str,
        partition: int,
        data: bytes,
        start_offset: int,
        end_offset: int,
        max_timestamp_ms: int,
        segment_leader_epochs: list[dict],
        tiered_epoch: int,
    ) -> dict:
        """Copy a closed local segment: COPY_SEGMENT_STARTED, bytes, COPY_SEGMENT_FINISHED."""
        pdir = self.partition_dir(topic, topic_id, partition)
        os.makedirs(pdir, exist_ok=True)
        segment_id = uuid.uuid4().hex
        object_path = os.path.join(pdir, f"{segment_id}.log")
        record = {
            "cluster": self.cluster,
            "topic": topic,
            "topic_id": topic_id,
            "partition": partition,
            "segment_id": segment_id,
            "start_offset": start_offset,
            "end_offset": end_offset,
            "max_timestamp_ms": max_timestamp_ms,
            "size_bytes": 0,
            "segment_leader_epochs": segment_leader_epochs,
            "tiered_epoch": tiered_epoch,
            "state": RemoteSegmentState.COPY_SEGMENT_STARTED,
            "object_path": os.path.abspath(object_path),
            "event_timestamp_ms": _now_ms(),
        }
        self._write_record(pdir, record)
        with open(object_path, "wb") as dst:
            dst.write(data)
            dst.flush()
            os.fsync(dst.fileno())
        record = dict(record, size_bytes=len(data), event_timestamp_ms=_now_ms())
        record["state"] = RemoteSegmentState.COPY_SEGMENT_FINISHED
        self._write_record(pdir, record)
        return record

    def transition(self, segment_id: str, state: str) -> dict:
        """Move a segment to ``state``; repeating the current state is a no-op (idempotent).

        Raises ``KeyError`` if unknown and ``ValueError`` on a transition Kafka would refuse.
        """
        found = self.find(segment_id)
        if found is None:
            raise KeyError(segment_id)
        pdir, record = found
        if record["state"] == state:
            return record
        if state not in RemoteSegmentState.TRANSITIONS[record["state"]]:
            raise ValueError(f"{record['state']} -> {state} is not a valid transition")
        record = dict(record, state=state, event_timestamp_ms=_now_ms())
        self._write_record(pdir, record)
        return record

    def delete_segment(self, segment_id: str) -> dict:
        """DELETE_SEGMENT_STARTED -> object deleted -> DELETE_SEGMENT_FINISHED. An object already
        gone counts as deleted (the retry path)."""
        self.transition(segment_id, RemoteSegmentState.DELETE_SEGMENT_STARTED)
        _pdir, record = self.find(segment_id)  # type: ignore[misc]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(record["object_path"])
        return self.transition(segment_id, RemoteSegmentState.DELETE_SEGMENT_FINISHED)

    def read_object(self, record: dict) -> bytes:
        with open(record["object_path"], "rb") as fh:
            return fh.read()
