"""Quarantine: a planning job withholds the partitions whose plan names an object outside the
remote store, and plans the rest (issue #39).

Before #39 one such metadata record failed every retention and purge run of its cluster, so
whoever could write under ``__remote_log_metadata/`` could halt retention. The *partition* is
quarantined, not the row: publishing its log start offset would pass data the run cannot prove
it removed. :func:`quarantine_outside_store` runs after the plan is written and before anything
is published; its rows go to ``quarantined/`` (always written, possibly empty) and the summary's
figures describe the plan that is left. Only planned rows are judged. Delete jobs still refuse a
plan with any row outside (``jobkit``): a reviewed plan runs whole or not at all.
Runs under ``spark-submit`` (driver and executors): PySpark and pyarrow only.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks import jobkit, plan_io, store
from spark_tasks.schema import (
    PARTITION_KEY,
    PARTITIONS_OUT_SCHEMA,
    PLAN_SCHEMA,
    QUARANTINE_SCHEMA,
    QuarantineReason,
)

__all__ = ["QUARANTINE_DIR", "Quarantine", "quarantine_outside_store"]

#: The output directory of the withheld rows, beside ``plan/`` in the job's ``--out``.
QUARANTINE_DIR = "quarantined"
#: Quarantined partitions named in the job's log (the summary counts all of them).
NAMED_IN_LOG = 20

Key = tuple[Any, Any, Any]


@dataclasses.dataclass
class Quarantine:
    """What :func:`quarantine_outside_store` withheld, and how the summary's figures shrink."""

    partitions: int = 0
    segments: int = 0
    bytes: int = 0
    outside_objects: int = 0
    #: the withheld rows by their plan reason: {reason: {"segments", "bytes"}}
    by_reason: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: ``partitions/`` rows removed, and how many log start offset moves they counted
    partition_rows: int = 0
    log_start_offsets_moved: int = 0

    def summary(self) -> dict[str, int]:
        """``summary.json``'s ``quarantined``."""
        return {
            "partitions": self.partitions,
            "segments": self.segments,
            "bytes": self.bytes,
            "outside_objects": self.outside_objects,
        }

    def apply_to(self, counts: dict[str, Any]) -> None:
        """Take the withheld rows out of a planner's counts (``by_reason``, ``partitions``,
        ``log_start_offsets_moved``), in place."""
        by_reason = counts["by_reason"]
        for reason, gone in self.by_reason.items():
            left = by_reason.get(reason, {"segments": 0, "bytes": 0})
            left = {k: left.get(k, 0) - gone.get(k, 0) for k in ("segments", "bytes")}
            if left["segments"] > 0:
                by_reason[reason] = left
            else:
                by_reason.pop(reason, None)
        counts["partitions"] = counts.get("partitions", 0) - self.partition_rows
        counts["log_start_offsets_moved"] = (
            counts.get("log_start_offsets_moved", 0) - self.log_start_offsets_moved
        )


_FIND_COLUMNS = (*PARTITION_KEY, "object_path")


def _find_units(root: str):
    """Executor side: (rows outside the store, the keys of their partitions)."""

    def run(units: Iterator[jobkit.DeleteUnit]) -> Iterator[tuple[int, list[Key]]]:
        count = 0
        keys: set[Key] = set()
        for table in jobkit._unit_batches(units, jobkit.DELETE_BATCH_ROWS, _FIND_COLUMNS):
            cols = table.to_pydict()
            for cluster, topic, partition, path in zip(
                *(cols[c] for c in _FIND_COLUMNS), strict=True
            ):
                if store.store_entry(path, root) is None:
                    count += 1
                    keys.add((cluster, topic, partition))
        yield count, sorted(keys, key=repr)

    return run


def _write_atomically(table_batches: list[pa.Table], schema: pa.Schema, target: str) -> None:
    tmp = f"{target}.{os.getpid()}.tmp"
    with pq.ParquetWriter(tmp, schema) as writer:
        for table in table_batches:
            writer.write_table(table)
    os.replace(tmp, target)


def _split_units(keys: frozenset[Key], root: str, kept_dir: str, quarantined_dir: str):
    """Executor side: write a task's plan rows to ``kept_dir`` (partitions not in ``keys``) or
    ``quarantined_dir`` (with their quarantine reason), one ``part-<index>.parquet`` each
    (atomically: a retried task replaces them), and yield (plan reason, segments, bytes) of the
    withheld rows."""

    def run(index: int, units: Iterator[jobkit.DeleteUnit]) -> Iterator[tuple[str, int, int]]:
        kept: list[pa.Table] = []
        withheld: list[pa.Table] = []
        totals: dict[str, list[int]] = {}
        for table in jobkit._unit_batches(
            units, jobkit.DELETE_BATCH_ROWS, tuple(PLAN_SCHEMA.names)
        ):
            table = table.cast(PLAN_SCHEMA)
            cols = table.to_pydict()
            mask = [key in keys for key in zip(*(cols[c] for c in PARTITION_KEY), strict=True)]
            kept.append(table.filter(pa.array([not m for m in mask])))
            out = table.filter(pa.array(mask))
            if not out.num_rows:
                continue
            reasons = [
                QuarantineReason.PARTITION_QUARANTINED
                if store.store_entry(path, root) is not None
                else QuarantineReason.OUTSIDE_STORE
                for path in out.column("object_path").to_pylist()
            ]
            withheld.append(
                pa.Table.from_arrays(
                    [
                        *(out.column(f.name) for f in QUARANTINE_SCHEMA if f.name != "reason"),
                        pa.array(reasons, pa.string()),
                    ],
                    schema=QUARANTINE_SCHEMA,
                )
            )
            for reason, size in zip(
                out.column("reason").to_pylist(), out.column("size_bytes").to_pylist(), strict=True
            ):
                acc = totals.setdefault(reason, [0, 0])
                acc[0] += 1
                acc[1] += size or 0
        name = f"part-{index:05d}.parquet"
        _write_atomically(kept, PLAN_SCHEMA, os.path.join(kept_dir, name))
        _write_atomically(withheld, QUARANTINE_SCHEMA, os.path.join(quarantined_dir, name))
        for reason, (segments, size) in totals.items():
            yield reason, segments, size

    return run


def _empty_output(dest: Path, schema: pa.Schema) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    pq.write_table(schema.empty_table(), dest / "part-00000.parquet")
    (dest / "_SUCCESS").touch()


def _find(spark, plan_dir: Path, root: str) -> tuple[list[jobkit.DeleteUnit], int, set[Key]]:
    sc = spark.sparkContext
    units = jobkit.plan_units(plan_dir, jobkit.delete_tasks(sc))
    if not units:
        return units, 0, set()
    count = 0
    keys: set[Key] = set()
    for n, found in (
        sc.parallelize(units, min(max(1, sc.defaultParallelism), len(units)))
        .mapPartitions(_find_units(root))
        .collect()  # one (count, keys) per task: keys of quarantined partitions only
    ):
        count += n
        keys.update(tuple(k) for k in found)
    return units, count, keys


def _split_plan(
    spark, plan_dir: Path, quarantined_dir: Path, units: list, keys: set[Key], root: str
) -> dict[str, dict[str, int]]:
    """Rewrite ``plan/`` without the rows of ``keys``' partitions; those go to
    ``quarantined_dir``. Returns the withheld rows by plan reason."""
    sc = spark.sparkContext
    kept_dir = plan_dir.parent / "_plan_kept"
    shutil.rmtree(kept_dir, ignore_errors=True)
    kept_dir.mkdir(parents=True)
    quarantined_dir.mkdir(parents=True, exist_ok=True)
    by_reason: dict[str, dict[str, int]] = {}
    for reason, segments, size in (
        sc.parallelize(units, min(max(1, sc.defaultParallelism), len(units)))
        .mapPartitionsWithIndex(
            _split_units(frozenset(keys), root, str(kept_dir), str(quarantined_dir))
        )
        .collect()  # at most one row per plan reason per task
    ):
        acc = by_reason.setdefault(reason, {"segments": 0, "bytes": 0})
        acc["segments"] += int(segments)
        acc["bytes"] += int(size)
    (kept_dir / "_SUCCESS").touch()
    (quarantined_dir / "_SUCCESS").touch()
    shutil.rmtree(plan_dir)
    os.replace(kept_dir, plan_dir)
    return by_reason


def _withhold_partition_rows(
    spark, partitions_dir: Path, partitions_input: str, keys: set[Key]
) -> tuple[int, int]:
    """Remove ``keys``' rows from ``partitions/`` (one row per partition, read on the driver).
    Returns (rows removed, log start offset moves they counted in the summary: as the planners
    count them, against every partition-state row of a non-null key whose offset is below)."""
    if not partitions_dir.exists():
        return 0, 0
    table = pq.read_table(partitions_dir).select(PARTITIONS_OUT_SCHEMA.names)
    table = table.cast(PARTITIONS_OUT_SCHEMA)
    rows = table.to_pylist()
    kept = [r for r in rows if tuple(r[c] for c in PARTITION_KEY) not in keys]
    removed = {
        tuple(r[c] for c in PARTITION_KEY): r["new_log_start_offset"]
        for r in rows
        if tuple(r[c] for c in PARTITION_KEY) in keys
    }
    if not removed:
        return 0, 0
    shutil.rmtree(partitions_dir)
    plan_io._write_driver_rows(
        [tuple(r[f.name] for f in PARTITIONS_OUT_SCHEMA) for r in kept],
        PARTITIONS_OUT_SCHEMA,
        partitions_dir,
    )
    moved = 0
    for state in plan_io._partition_rows(spark, partitions_input):
        key = tuple(state[c] for c in PARTITION_KEY)
        new_lso = removed.get(key)
        lso = state.get("log_start_offset")
        if None not in key and new_lso is not None and lso is not None and new_lso > lso:
            moved += 1
    return len(removed), moved


def quarantine_outside_store(
    spark, out_dir: Path, store_root: str, partitions_input: str
) -> Quarantine:
    """Withhold from ``out_dir``'s ``plan/`` and ``partitions/`` every partition with a planned
    row outside the store rooted at ``store_root`` (from configuration), writing those rows to
    ``quarantined/`` (see the module doc). ``partitions_input`` is the job's partition state
    (to correct ``log_start_offsets_moved``). Nothing is deleted here."""
    root = store.store_root(store_root)
    plan_dir = out_dir / "plan"
    quarantined_dir = out_dir / QUARANTINE_DIR
    shutil.rmtree(quarantined_dir, ignore_errors=True)
    units, outside, keys = _find(spark, plan_dir, root)
    if not keys:
        _empty_output(quarantined_dir, QUARANTINE_SCHEMA)
        return Quarantine()
    by_reason = _split_plan(spark, plan_dir, quarantined_dir, units, keys, root)
    rows, moved = _withhold_partition_rows(spark, out_dir / "partitions", partitions_input, keys)
    result = Quarantine(
        partitions=len(keys),
        segments=sum(v["segments"] for v in by_reason.values()),
        bytes=sum(v["bytes"] for v in by_reason.values()),
        outside_objects=outside,
        by_reason=by_reason,
        partition_rows=rows,
        log_start_offsets_moved=moved,
    )
    named = ", ".join(f"{c}/{t}-{p}" for c, t, p in sorted(keys, key=repr)[:NAMED_IN_LOG])
    more = f" (first {NAMED_IN_LOG} named)" if len(keys) > NAMED_IN_LOG else ""
    print(
        f"QUARANTINED {len(keys)} partition(s), {outside} record(s) naming objects outside the "
        f"remote store {root}; their cleanup is refused{more}: {named}",
        file=sys.stderr,
    )
    return result
