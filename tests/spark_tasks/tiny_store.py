"""A remote store on S3 (a prefix of the test session's store) with one fenced partition, as the
Spark jobs see it: ``inventory/`` and ``partitions/`` Parquet (DESIGN.md schemas) in a temporary
directory, and the objects themselves in the bucket.

The partition was disabled with the ``delete`` policy at tiered epoch 1, so ``purge`` plans every
segment it lists (all tiered at epoch 0). ``escapes=True`` adds two segments whose objects lie
outside the store, each an object that exists: one whose path starts inside the prefix and
climbs out of it through ``..`` segments into a sibling prefix ``<prefix>-elsewhere/``, one in a
sibling prefix that shares the store's characters (``<prefix>-evil/``). ``clean_partitions=n``
adds partitions 1..n of the same topic, fenced the same way, each with three segments whose
objects lie inside the store (``clean``: partition -> its objects' URIs)."""

from __future__ import annotations

import dataclasses
import os
import secrets
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.objectstore import S3Location
from spark_tasks.schema import INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA
from tests import s3util

CLUSTER = "lab"
TOPIC = "fenced"
TOPIC_ID = "tid"
NOW = 1_700_000_000_000


@dataclasses.dataclass
class TinyStore:
    base: Path
    #: the store's root, ``s3://BUCKET/PREFIX``
    remote: str
    inventory: Path
    partitions: Path
    #: the URIs of the store's objects
    inside: list[str]
    #: segment id -> the object outside the store its object path reaches
    outside: dict[str, str]
    #: partition (1..n) -> the URIs of its objects, all inside the store
    clean: dict[int, list[str]] = dataclasses.field(default_factory=dict)


def store_prefix(name: str) -> S3Location:
    """A prefix of its own under the session's store (``STRATA_REMOTE_STORE``, set by
    ``tests/conftest.py``'s ``object_store``), named after ``name`` and unique."""
    session = S3Location.parse(os.environ["STRATA_REMOTE_STORE"])
    return session.child(f"{name}-{secrets.token_hex(3)}")


def _segment(segment_id: str, i: int, object_path: str, partition: int = 0) -> dict:
    return {
        "cluster": CLUSTER,
        "topic": TOPIC,
        "topic_id": TOPIC_ID,
        "partition": partition,
        "segment_id": segment_id,
        "start_offset": 100 * i,
        "end_offset": 100 * i + 99,
        "max_timestamp_ms": NOW - 3_600_000,
        "size_bytes": 1000 + i,
        "segment_leader_epochs": [{"epoch": 0, "start_offset": 0}],
        "tiered_epoch": 0,
        "state": RemoteSegmentState.COPY_SEGMENT_FINISHED,
        "object_path": object_path,
        "event_timestamp_ms": NOW - 3_600_000,
    }


def build(base: Path, *, escapes: bool = False, clean_partitions: int = 0) -> TinyStore:
    loc = store_prefix(base.name)
    pdir = f"{loc.uri}/{TOPIC}-{TOPIC_ID}/0"
    rows, inside = [], []
    for i in range(3):
        obj = f"{pdir}/{i * 100:020d}-seg-{i}.log"
        s3util.put(obj, b"x" * (1000 + i))
        inside.append(obj)
        rows.append(_segment(f"seg-{i}", i, obj))
    outside: dict[str, str] = {}
    if escapes:
        leaf = loc.prefix.rsplit("/", 1)[-1]
        victim = f"{loc.uri}-elsewhere/victim.log"
        s3util.put(victim, b"not the store's")
        rows.append(_segment("seg-dotdot", 3, f"{pdir}/../../../{leaf}-elsewhere/victim.log"))
        outside["seg-dotdot"] = victim
        sibling = f"{loc.uri}-evil/{TOPIC}-{TOPIC_ID}/0/linked.log"
        s3util.put(sibling, b"not the store's either")
        rows.append(_segment("seg-sibling", 4, sibling))
        outside["seg-sibling"] = sibling
    states = [_state(0, len(rows))]
    clean: dict[int, list[str]] = {}
    for partition in range(1, clean_partitions + 1):
        clean[partition] = []
        for i in range(3):
            obj = f"{loc.uri}/{TOPIC}-{TOPIC_ID}/{partition}/{i * 100:020d}-p{partition}-{i}.log"
            s3util.put(obj, b"y" * (1000 + i))
            clean[partition].append(obj)
            rows.append(_segment(f"p{partition}-seg-{i}", i, obj, partition))
        states.append(_state(partition, 3))
    inputs = base / "inputs"
    (inputs / "inventory").mkdir(parents=True)
    (inputs / "partitions").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA),
        inputs / "inventory" / "part-00000.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist(states, schema=PARTITION_STATE_SCHEMA),
        inputs / "partitions" / "part-00000.parquet",
    )
    return TinyStore(
        base=base,
        remote=loc.uri,
        inventory=inputs / "inventory",
        partitions=inputs / "partitions",
        inside=inside,
        outside=outside,
        clean=clean,
    )


def _state(partition: int, segments: int) -> dict:
    """A partition disabled with the delete policy at tiered epoch 1: its ``segments`` segments
    (tiered at epoch 0) are all below the purge epoch."""
    return {
        "cluster": CLUSTER,
        "topic": TOPIC,
        "topic_id": TOPIC_ID,
        "partition": partition,
        "retention_ms": -1,
        "retention_bytes": -1,
        "log_start_offset": 0,
        "local_log_start_offset": 100 * segments,
        "log_end_offset": 100 * segments + 50,
        "local_untiered_bytes": 0,
        "leader_epochs": [{"epoch": 0, "start_offset": 0}],
        "tiered_state": "DISABLED",
        "tiered_epoch": 1,
        "disable_policy": "delete",
        "purge_below_tiered_epoch": 1,
    }
