"""The planning jobs (``retention``, ``purge``): the driver's entry, :func:`run_plan_job`.

It reads the inventory, has the executors apply ``rules`` per (cluster, topic, partition), writes
``plan/``, ``partitions/``, ``quarantined/`` and ``summary.json`` (DESIGN.md "Spark job
contract") and, unless ``--dry-run``, deletes the planned objects. The paths live apart:
``plan_retention`` (broadcast state, narrow shuffle, no co-group), ``plan_purge`` (a co-group
staged in ``_staged/``), ``plan_io`` (Arrow I/O both share). Segments without partition state
are counted, not judged: only retention re-plans their DELETE_SEGMENT_STARTED ones.
``PlanKind``, ``InvalidInventory``, ``partition_from_row`` and ``segments_from_table`` are
re-exported from ``plan_io``, where they used to be defined.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from spark_tasks import jobkit, quarantine, rules
from spark_tasks.plan_io import (
    SEGMENT_COLUMNS,
    InvalidInventory,
    PlanKind,
    partition_from_row,
    segments_from_table,
)
from spark_tasks.plan_purge import _staged_outputs
from spark_tasks.plan_retention import _retention_outputs, _retention_plan
from spark_tasks.schema import PARTITION_KEY

__all__ = [
    "InvalidInventory",
    "PlanKind",
    "partition_from_row",
    "run_plan_job",
    "segments_from_table",
]


#: Session SQL settings of the planning jobs, applied unless the submission sets them itself
#: (``--conf``). Measured on the bench's 10M-segment retention dry run, ``local[2]``, 1g driver,
#: from the Spark event logs of one pair of runs on the shared bench machine (load ~4.5):
#:
#: - ``advisoryPartitionSizeInBytes`` 16m (AQE default 64m): the grouping sorts each shuffle
#:   partition in the executor before the Arrow UDF; at 64m the 435 MB shuffle became 7 tasks
#:   whose sorts spilled 1.1 GB to disk. At 16m (~30 tasks) nothing spills and every task's sort
#:   stays small whatever the inventory's size; the planning stage went from 60 s to 42 s.
#: - ``files.maxPartitionBytes`` 16m (default 128m): the 370 MB inventory was read in 3 tasks on
#:   2 cores, i.e. two waves with one core idle in the second; now 24 splits of <= 16 MB (whole
#:   row groups each), the read-and-shuffle stage went from 22.4 s to 19.3 s.
#:
#: Together with the single-pass outputs (``plan_retention``'s doc) and ``vector_rules``' scan
#: loop: 10M retention dry run median 95.7 s -> 81.4 s wall (7 and 4 runs, interleaved, load ~4
#: on 2 cores; bare scan median 24.1 s), 1M 51.1 s -> 33.3 s (2 runs each).
PLAN_SQL_CONF = {
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "16m",
    "spark.sql.files.maxPartitionBytes": "16m",
}


def _apply_sql_conf(spark) -> None:
    explicit = spark.sparkContext.getConf()
    for key, value in PLAN_SQL_CONF.items():
        if not explicit.contains(key):
            spark.conf.set(key, value)


def run_plan_job(
    spark,
    kind: str,
    inventory: str,
    partitions: str,
    out: str,
    *,
    now_ms: int | None = None,
    in_flight_ms: int = rules.DEFAULT_IN_FLIGHT_MS,
    dry_run: bool = False,
    store_root: str | None = None,
) -> dict[str, Any]:
    """Plan ``kind`` into ``out`` and, unless ``dry_run``, delete the plan's objects.

    ``store_root`` (the remote store's root from configuration) is required to delete. When it
    is given, the plan is checked against it once it is written, dry run or not: a partition
    with a planned object outside the store is quarantined (``quarantine``: all its rows leave
    ``plan/`` and ``partitions/`` for ``quarantined/``, the summary counts them under
    ``quarantined``) and every other partition is planned and deleted as usual. This happens at
    planning time, before the Celery task publishes log start offsets or marks segments.
    """
    jobkit.require_store_root(dry_run, store_root)
    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out_dir = jobkit.prepare_out(out)
    _apply_sql_conf(spark)
    inv = spark.read.parquet(inventory).select(*PARTITION_KEY, *SEGMENT_COLUMNS)
    if kind == PlanKind.RETENTION:
        plan, part_rows, outcomes = _retention_plan(spark, inv, partitions, now_ms, in_flight_ms)
        plan.write.parquet(str(out_dir / "plan"))
        counts = _retention_outputs(part_rows, outcomes.value, out_dir)
    else:
        parts = spark.read.parquet(partitions)
        counts = _staged_outputs(spark, kind, inv, parts, out_dir, now_ms, in_flight_ms)
    withheld = None
    if store_root:
        withheld = quarantine.quarantine_outside_store(spark, out_dir, store_root, partitions)
        withheld.apply_to(counts)
    by_reason = counts.pop("by_reason")
    summary: dict[str, Any] = {
        "job": kind,
        "dry_run": dry_run,
        "now_ms": now_ms,
        "in_flight_ms": in_flight_ms if kind == PlanKind.RETENTION else None,
        "segments": sum(v["segments"] for v in by_reason.values()),
        "bytes": sum(v["bytes"] for v in by_reason.values()),
        "by_reason": by_reason,
        **counts,
    }
    if withheld is not None:
        summary["quarantined"] = withheld.summary()
    if not dry_run:
        timings: dict[str, float] = {}
        summary["deleted"] = jobkit.delete_planned_objects(
            spark, out_dir / "plan", out_dir, store_root=store_root, timings=timings
        )
        summary.update(timings)
    summary["seconds"] = round(time.monotonic() - started, 3)
    jobkit.write_summary(Path(out_dir), summary)
    return summary
