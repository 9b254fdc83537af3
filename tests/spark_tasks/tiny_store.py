"""A remote store in a temporary directory with one fenced partition, as the Spark jobs see it:
``inventory/`` and ``partitions/`` Parquet (DESIGN.md schemas) and the objects themselves.

The partition was disabled with the ``delete`` policy at tiered epoch 1, so ``purge`` plans every
segment it lists (all tiered at epoch 0). ``escapes=True`` adds two segments whose objects lie
outside the store although their paths start inside it: one through ``..``, one through a
directory symlink."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks.schema import INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA, SegmentState

CLUSTER = "lab"
TOPIC = "fenced"
TOPIC_ID = "tid"
NOW = 1_700_000_000_000


@dataclasses.dataclass
class TinyStore:
    base: Path
    remote: Path
    inventory: Path
    partitions: Path
    inside: list[Path]
    #: segment id -> the file outside the store its object path reaches
    outside: dict[str, Path]


def _segment(segment_id: str, i: int, object_path: str) -> dict:
    return {
        "cluster": CLUSTER,
        "topic": TOPIC,
        "topic_id": TOPIC_ID,
        "partition": 0,
        "segment_id": segment_id,
        "start_offset": 100 * i,
        "end_offset": 100 * i + 99,
        "max_timestamp_ms": NOW - 3_600_000,
        "size_bytes": 1000 + i,
        "segment_leader_epochs": [{"epoch": 0, "start_offset": 0}],
        "tiered_epoch": 0,
        "state": SegmentState.COPY_SEGMENT_FINISHED,
        "object_path": object_path,
        "event_timestamp_ms": NOW - 3_600_000,
    }


def build(base: Path, *, escapes: bool = False) -> TinyStore:
    remote = base / "remote"
    pdir = remote / f"{TOPIC}-{TOPIC_ID}" / "0"
    pdir.mkdir(parents=True)
    rows, inside = [], []
    for i in range(3):
        obj = pdir / f"seg-{i}.log"
        obj.write_bytes(b"x" * (1000 + i))
        inside.append(obj)
        rows.append(_segment(f"seg-{i}", i, str(obj)))
    outside: dict[str, Path] = {}
    if escapes:
        elsewhere = base / "elsewhere"
        elsewhere.mkdir()
        victim = elsewhere / "victim.log"
        victim.write_bytes(b"not the store's")
        dotdot = f"{pdir}/../../../elsewhere/victim.log"
        rows.append(_segment("seg-dotdot", 3, dotdot))
        outside["seg-dotdot"] = victim
        (pdir / "escape").symlink_to(elsewhere, target_is_directory=True)
        linked = elsewhere / "linked.log"
        linked.write_bytes(b"not the store's either")
        rows.append(_segment("seg-symlink", 4, f"{pdir}/escape/linked.log"))
        outside["seg-symlink"] = linked
    state = {
        "cluster": CLUSTER,
        "topic": TOPIC,
        "topic_id": TOPIC_ID,
        "partition": 0,
        "retention_ms": -1,
        "retention_bytes": -1,
        "log_start_offset": 0,
        "local_log_start_offset": 100 * len(rows),
        "log_end_offset": 100 * len(rows) + 50,
        "local_untiered_bytes": 0,
        "leader_epochs": [{"epoch": 0, "start_offset": 0}],
        "tiered_state": "DISABLED",
        "tiered_epoch": 1,
        "disable_policy": "delete",
        "purge_below_tiered_epoch": 1,
    }
    inputs = base / "inputs"
    (inputs / "inventory").mkdir(parents=True)
    (inputs / "partitions").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA),
        inputs / "inventory" / "part-00000.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist([state], schema=PARTITION_STATE_SCHEMA),
        inputs / "partitions" / "part-00000.parquet",
    )
    return TinyStore(
        base=base,
        remote=remote,
        inventory=inputs / "inventory",
        partitions=inputs / "partitions",
        inside=inside,
        outside=outside,
    )
