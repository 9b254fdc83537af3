"""The shared remote store on S3 (KIP-405 RemoteStorageManager + RemoteLogMetadataManager
stand-in, issue #13).

Keys follow Kafka's RSM plugins' layout (Aiven's) under the cluster's location: the segment at
``<topic>-<topic_id>/<partition>/<start_offset:020d>-<segment_id>.log`` and its metadata record,
one object rewritten whole per state change, under ``__remote_log_metadata/``. Reads come from
a per-partition cache, written through by this broker's changes, refreshed by listing (only
changed ETags re-read) and at once on becoming leader, so a new leader never copies from a stale
remote log end and request paths never wait for S3. An outage (KAFKA-19952) backs off to
:data:`MAX_BACKOFF_S` while the cache keeps serving, so local retention waits for the copy.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location

__all__ = ["METADATA_DIR", "RemoteStorageError", "RemoteStore", "is_readable"]

log = logging.getLogger("broker_agent.simulator.remote")

#: The prefix (under the cluster's location) of the metadata records, named after Kafka's topic.
METADATA_DIR = "__remote_log_metadata"
#: How old a partition's cache may get before the maintenance loop lists it again.
REFRESH_S = 5.0
#: Backoff after a failed call: 0.5 s, doubling, at most this.
MAX_BACKOFF_S = 10.0


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


class RemoteStorageError(Exception):
    """The object store did not answer or refused (the agent's KAFKA_STORAGE_ERROR)."""


def _reason(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        return f"{error.get('Code') or 'error'}: {error.get('Message') or exc}"
    return f"{type(exc).__name__}: {exc}"


class _Partition:
    """The cached metadata of one partition: records and ETags by segment id."""

    __slots__ = ("etags", "loaded_at", "lock", "ordered", "records")

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}
        self.etags: dict[str, str] = {}
        self.ordered: list[dict] = []
        self.loaded_at: float | None = None  # monotonic; None = never loaded (or invalidated)
        self.lock = threading.Lock()  # one refresh or write at a time

    def reorder(self) -> None:
        self.ordered = sorted(
            self.records.values(), key=lambda r: (r["start_offset"], r["event_timestamp_ms"])
        )


class RemoteStore:
    """One broker's client of the cluster's remote store (module doc)."""

    def __init__(
        self,
        location: S3Location,
        cluster: str,
        config: ObjectStoreConfig | None = None,
        *,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.location = location
        self.cluster = cluster
        self.refresh_s = refresh_s
        config = (config or ObjectStoreConfig.from_env()).with_location(location)
        # short timeouts and one botocore retry: the copier retries on its own, with backoff
        self._client = config.client(connect_timeout=3.0, read_timeout=20.0, max_attempts=2)
        self._parts: dict[tuple[str, str, int], _Partition] = {}
        self._where: dict[str, tuple[str, str, int]] = {}  # segment id -> partition key
        self._lock = threading.Lock()
        #: epoch ms of the first failed call of the current outage; None when reachable
        self.unreachable_since: int | None = None
        self.last_error: str | None = None
        self._failures = 0
        self._retry_at = 0.0

    # -- keys --------------------------------------------------------------------------------

    def _pdir(self, topic: str, topic_id: str) -> str:
        return f"{topic}-{topic_id}"

    def data_key(self, topic: str, topic_id: str, partition: int, start: int, sid: str) -> str:
        return self.location.key(
            self._pdir(topic, topic_id), str(partition), f"{start:020d}-{sid}.log"
        )

    def metadata_key(self, topic: str, topic_id: str, partition: int, sid: str) -> str:
        return self.location.key(
            METADATA_DIR, self._pdir(topic, topic_id), str(partition), f"{sid}.json"
        )

    def _metadata_prefix(self, *parts: str) -> str:
        return self.location.key(METADATA_DIR, *parts) + "/"

    # -- calls, with outage tracking ------------------------------------------------------------

    def _call(self, op: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._failures and time.monotonic() < self._retry_at:
            raise RemoteStorageError(
                f"remote store unreachable since {self.unreachable_since} ms ({self.last_error}); "
                "backing off"
            )
        try:
            out = getattr(self._client, op)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "404") or status == 404:
                self._ok()
                raise FileNotFoundError(kwargs.get("Key", "")) from None
            # anything else (5xx, SlowDown, AccessDenied, NoSuchBucket): the copier cannot go on
            self._failed(exc)
            raise RemoteStorageError(_reason(exc)) from None
        except BotoCoreError as exc:
            self._failed(exc)
            raise RemoteStorageError(_reason(exc)) from None
        self._ok()
        return out

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            if self.unreachable_since is None:
                self.unreachable_since = _now_ms()
                log.warning("remote store %s unreachable: %s", self.location.uri, _reason(exc))
            self.last_error = _reason(exc)
            self._failures += 1
            self._retry_at = time.monotonic() + min(0.5 * 2 ** (self._failures - 1), MAX_BACKOFF_S)

    def _ok(self) -> None:
        if self._failures or self.unreachable_since is not None:
            with self._lock:
                if self.unreachable_since is not None:
                    log.warning("remote store %s reachable again", self.location.uri)
                self.unreachable_since, self.last_error, self._failures = None, None, 0

    def status(self) -> dict:
        """What the broker reports: the store, and since when it has been unreachable."""
        return {
            "location": self.location.uri,
            "unreachable_since_ms": self.unreachable_since,
            "error": self.last_error,
        }

    def _put_record(self, pc: _Partition, record: dict) -> None:
        key = self.metadata_key(
            record["topic"], record["topic_id"], record["partition"], record["segment_id"]
        )
        out = self._call(
            "put_object",
            Bucket=self.location.bucket,
            Key=key,
            Body=json.dumps(record).encode(),
            ContentType="application/json",
        )
        pc.records[record["segment_id"]] = record
        pc.etags[record["segment_id"]] = out.get("ETag", "")
        pc.reorder()

    # -- metadata ----------------------------------------------------------------------------

    def _partition(self, topic: str, topic_id: str, partition: int) -> _Partition:
        key = (topic, topic_id, partition)
        with self._lock:
            pc = self._parts.get(key)
            if pc is None:
                pc = self._parts[key] = _Partition()
            return pc

    def _list(self, prefix: str, delimiter: str | None = None) -> Iterator[dict]:
        """ListObjectsV2 pages of ``prefix`` (Contents and CommonPrefixes entries)."""
        token = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": prefix}
            if delimiter:
                kwargs["Delimiter"] = delimiter
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("list_objects_v2", **kwargs)
            yield page
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def _load(self, topic: str, topic_id: str, partition: int, pc: _Partition) -> None:
        """List the partition's metadata records; read the new and changed ones. Caller holds
        ``pc.lock``."""
        prefix = self._metadata_prefix(self._pdir(topic, topic_id), str(partition))
        seen: dict[str, str] = {}
        for page in self._list(prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if name.endswith(".json") and "/" not in name:
                    seen[name[: -len(".json")]] = obj.get("ETag", "")
        records = {s: r for s, r in pc.records.items() if s in seen}
        etags = {s: e for s, e in pc.etags.items() if s in seen}
        for sid, etag in seen.items():
            if etags.get(sid) == etag and sid in records:
                continue
            try:
                body = self._call(
                    "get_object", Bucket=self.location.bucket, Key=prefix + sid + ".json"
                )
                records[sid] = json.loads(body["Body"].read())
                etags[sid] = body.get("ETag", etag)
            except FileNotFoundError:  # deleted between the listing and the read
                records.pop(sid, None)
                etags.pop(sid, None)
            except ValueError:
                log.warning("unreadable metadata record %s%s.json", prefix, sid)
        pc.records, pc.etags = records, etags
        pc.reorder()
        pc.loaded_at = time.monotonic()
        with self._lock:
            for sid in records:
                self._where[sid] = (topic, topic_id, partition)

    def segments(self, topic: str, topic_id: str, partition: int) -> list[dict]:
        """All metadata records of a partition, oldest first: the cache, loaded on first use
        (which raises :class:`RemoteStorageError` if the store cannot be read then)."""
        pc = self._partition(topic, topic_id, partition)
        if pc.loaded_at is None:
            with pc.lock:
                if pc.loaded_at is None:
                    self._load(topic, topic_id, partition, pc)
        return pc.ordered

    def refresh(self, topic: str, topic_id: str, partition: int, *, force: bool = False) -> None:
        """List the partition again when its cache is older than ``refresh_s`` (maintenance
        loop); a failure keeps the cache as it was."""
        pc = self._partition(topic, topic_id, partition)
        fresh = pc.loaded_at is not None and time.monotonic() - pc.loaded_at < self.refresh_s
        if fresh and not force:
            return
        with pc.lock:
            self._load(topic, topic_id, partition, pc)

    def invalidate(self, topic: str, topic_id: str, partition: int) -> None:
        """Read the partition from the store again before its next use (a new leader)."""
        self._partition(topic, topic_id, partition).loaded_at = None

    def topic_partitions(self, topic: str | None = None) -> list[tuple[str, str, int]]:
        """(topic, topic id, partition) of every partition with metadata in the store."""
        out = []
        for page in self._list(self._metadata_prefix(), "/"):
            for cp in page.get("CommonPrefixes", []):
                tdir = cp["Prefix"].rstrip("/").rsplit("/", 1)[-1]
                name, _, topic_id = tdir.rpartition("-")
                if topic is not None and name != topic:
                    continue
                for ppage in self._list(cp["Prefix"], "/"):
                    for pp in ppage.get("CommonPrefixes", []):
                        p = pp["Prefix"].rstrip("/").rsplit("/", 1)[-1]
                        if p.isdigit():
                            out.append((name, topic_id, int(p)))
        return sorted(out, key=lambda t: (t[0], t[2]))

    def iter_all(self, topic: str | None = None) -> Iterator[dict]:
        """Every metadata record in the store, ordered by topic, partition, start offset, each
        partition read afresh (the inventory the Spark jobs plan from). The partitions are listed
        before this returns, so an unreachable store raises here, not mid-stream."""
        parts = self.topic_partitions(topic)

        def records() -> Iterator[dict]:
            for name, topic_id, p in parts:
                self.refresh(name, topic_id, p, force=True)
                yield from self.segments(name, topic_id, p)

        return records()

    def _find(self, segment_id: str) -> tuple[str, str, int] | None:
        with self._lock:
            where = self._where.get(segment_id)
        if where is not None:
            return where
        for page in self._list(self._metadata_prefix()):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith(f"/{segment_id}.json"):
                    tdir, p = obj["Key"].split("/")[-3:-1]
                    name, _, topic_id = tdir.rpartition("-")
                    return name, topic_id, int(p)
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
        """Copy a closed local segment: COPY_SEGMENT_STARTED, the object, COPY_SEGMENT_FINISHED.
        A copy that fails after its STARTED record is left for the expiration task to delete
        (a dangling copy, as Kafka's RemoteLogManager does); the copier tries again with a new
        segment id."""
        pc = self._partition(topic, topic_id, partition)
        segment_id = uuid.uuid4().hex
        key = self.data_key(topic, topic_id, partition, start_offset, segment_id)
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
            "object_path": self.location.object_uri(key),
            "event_timestamp_ms": _now_ms(),
        }
        with pc.lock:
            self._put_record(pc, record)
            with self._lock:
                self._where[segment_id] = (topic, topic_id, partition)
            self._call("put_object", Bucket=self.location.bucket, Key=key, Body=data)
            record = dict(record, size_bytes=len(data), event_timestamp_ms=_now_ms())
            record["state"] = RemoteSegmentState.COPY_SEGMENT_FINISHED
            self._put_record(pc, record)
        return record

    def transition(self, segment_id: str, state: str) -> dict:
        """Move a segment to ``state``; repeating the current state is a no-op (idempotent).

        Raises ``KeyError`` if unknown and ``ValueError`` on a transition Kafka would refuse.
        """
        where = self._find(segment_id)
        if where is None:
            raise KeyError(segment_id)
        pc = self._partition(*where)
        self.segments(*where)
        with pc.lock:
            record = pc.records.get(segment_id)
            if record is None:
                raise KeyError(segment_id)
            if record["state"] == state:
                return record
            if state not in RemoteSegmentState.TRANSITIONS[record["state"]]:
                raise ValueError(f"{record['state']} -> {state} is not a valid transition")
            record = dict(record, state=state, event_timestamp_ms=_now_ms())
            self._put_record(pc, record)
        return record

    def delete_segment(self, segment_id: str) -> dict:
        """DELETE_SEGMENT_STARTED -> object deleted -> DELETE_SEGMENT_FINISHED. An object already
        gone counts as deleted (S3 answers a delete of a missing key with success)."""
        record = self.transition(segment_id, RemoteSegmentState.DELETE_SEGMENT_STARTED)
        key = self.location.key_of(record["object_path"])
        if key is not None:  # never outside the store's bucket and prefix
            self._call("delete_object", Bucket=self.location.bucket, Key=key)
        return self.transition(segment_id, RemoteSegmentState.DELETE_SEGMENT_FINISHED)

    def read_object(self, record: dict) -> bytes:
        """The segment's bytes; ``FileNotFoundError`` if the object is gone."""
        key = self.location.key_of(record["object_path"])
        if key is None:
            raise FileNotFoundError(record["object_path"])
        return self._call("get_object", Bucket=self.location.bucket, Key=key)["Body"].read()
