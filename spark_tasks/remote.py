"""What the Spark jobs need from the cluster's remote-log metadata, behind one small interface.

The broker agent owns the remote-log metadata and the store; the Celery side reaches it only
through :class:`RemoteMetadata`, chosen by ``settings.SPARK_REMOTE_METADATA`` (unset:
:class:`NotConfigured`, only dry runs with explicit inputs work). A non-dry run follows Kafka's
``RemoteLogManager`` order: plan, :func:`publish_log_start_offsets` (before any delete, so no
reader sees an offset whose data is gone), :func:`mark_planned` (DELETE_SEGMENT_STARTED), the
``delete_objects`` job, :func:`mark_deleted`. Plans stream in ``BATCH`` rows; every call is
idempotent, and a crash anywhere is finished by the next run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import pyarrow.dataset as ds

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.jobkit import DeleteOutcome

__all__ = [
    "BATCH",
    "NotConfigured",
    "PartitionLogStart",
    "RemoteMetadata",
    "SegmentRef",
    "get_remote_metadata",
    "mark_deleted",
    "mark_planned",
    "publish_log_start_offsets",
]

BATCH = 5_000


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentRef:
    topic: str
    partition: int
    segment_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionLogStart:
    topic: str
    partition: int
    log_start_offset: int


@runtime_checkable
class RemoteMetadata(Protocol):
    """What Strata needs from one cluster's broker agents (the agent client implements it)."""

    cluster: str

    def remote_root(self) -> str:
        """The remote store's root (``s3://BUCKET/PREFIX``), from configuration and never
        from the inventory's rows: it bounds what a delete may touch (``--store-root``,
        ``spark_tasks.store``). Raises when it is not known."""
        ...

    def export_inputs(self, dest: Path) -> tuple[Path, Path]:
        """Write the inventory and partition state as Parquet (DESIGN.md schemas) under ``dest``;
        return (inventory path, partitions path)."""
        ...

    def publish_log_start_offsets(self, items: list[PartitionLogStart]) -> None:
        """Move each partition's log start offset up to the given value (never down)."""
        ...

    def mark_segments(self, state: str, segments: list[SegmentRef]) -> None:
        """Move each segment to ``state`` (DELETE_SEGMENT_STARTED / DELETE_SEGMENT_FINISHED);
        a segment already there, or past it, is left alone."""
        ...


class NotConfigured:
    """The stand-in until ``SPARK_REMOTE_METADATA`` names the agent adapter."""

    def __init__(self, cluster: str, *, reason: str = "") -> None:
        self.cluster = cluster
        self.reason = reason or (
            "set SPARK_REMOTE_METADATA to the broker agent adapter "
            "(spark_tasks.agent_remote.for_cluster)"
        )

    def _refuse(self) -> None:
        raise RuntimeError(
            f"No remote-metadata backend for cluster {self.cluster!r}: {self.reason}; "
            "dry runs with explicit --inventory/--partitions work."
        )

    def remote_root(self) -> str:
        self._refuse()
        return ""

    def export_inputs(self, dest: Path) -> tuple[Path, Path]:
        self._refuse()
        return dest, dest

    def publish_log_start_offsets(self, items: list[PartitionLogStart]) -> None:
        self._refuse()

    def mark_segments(self, state: str, segments: list[SegmentRef]) -> None:
        self._refuse()


def get_remote_metadata(cluster: str | None) -> RemoteMetadata:
    from django.conf import settings
    from django.utils.module_loading import import_string

    factory_path = getattr(settings, "SPARK_REMOTE_METADATA", "")
    if not factory_path:
        return NotConfigured(cluster or "")
    return import_string(factory_path)(cluster)


def _batches(path: Path, columns: list[str], filter_=None) -> Iterator[dict[str, list]]:
    if not path.exists():
        return
    dataset = ds.dataset(str(path), format="parquet")
    for batch in dataset.to_batches(columns=columns, filter=filter_, batch_size=BATCH):
        if batch.num_rows:
            yield batch.to_pydict()


def publish_log_start_offsets(backend: RemoteMetadata, out_dir: Path) -> int:
    """Step 2: publish ``partitions/``'s new log start offsets. Returns how many partitions."""
    done = 0
    for cols in _batches(out_dir / "partitions", ["topic", "partition", "new_log_start_offset"]):
        items = [
            PartitionLogStart(t, int(p), int(o))
            for t, p, o in zip(
                cols["topic"], cols["partition"], cols["new_log_start_offset"], strict=True
            )
        ]
        backend.publish_log_start_offsets(items)
        done += len(items)
    return done


def mark_planned(backend: RemoteMetadata, out_dir: Path) -> int:
    """Step 3: every planned segment -> DELETE_SEGMENT_STARTED. Returns how many."""
    done = 0
    for cols in _batches(out_dir / "plan", ["topic", "partition", "segment_id"]):
        refs = [
            SegmentRef(t, int(p), s)
            for t, p, s in zip(cols["topic"], cols["partition"], cols["segment_id"], strict=True)
        ]
        backend.mark_segments(RemoteSegmentState.DELETE_SEGMENT_STARTED, refs)
        done += len(refs)
    return done


def mark_deleted(backend: RemoteMetadata, out_dir: Path) -> int:
    """Step 5: segments whose object is gone -> DELETE_SEGMENT_FINISHED. Returns how many."""
    done = 0
    flt = ds.field("outcome").isin(list(DeleteOutcome.DONE))
    for cols in _batches(out_dir / "deleted", ["topic", "partition", "segment_id"], flt):
        refs = [
            SegmentRef(t, int(p), s)
            for t, p, s in zip(cols["topic"], cols["partition"], cols["segment_id"], strict=True)
        ]
        backend.mark_segments(RemoteSegmentState.DELETE_SEGMENT_FINISHED, refs)
        done += len(refs)
    return done
