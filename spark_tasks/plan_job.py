"""The Spark side of the planning jobs (``retention``, ``purge``): apply ``rules`` per partition.

The inventory and the partition state are co-grouped by (cluster, topic, partition) and each group
goes, as two Arrow tables, to ``rules.plan_retention`` / ``rules.plan_purge`` on an executor
(``cogroup(...).applyInArrow``). The driver never sees a segment: it only reads the counts that
go into ``summary.json``.

Outputs (DESIGN.md "Spark job contract"): ``plan/`` (segment_id, cluster, topic, partition, reason,
size_bytes, object_path), ``partitions/`` (cluster, topic, partition, new_log_start_offset,
segments_deleted, bytes_deleted; a row for every partition whose plan deletes something or moves
its log start offset) and ``summary.json``. Without ``--dry-run`` the executors then delete the
planned objects (``deleted/``); with it nothing is deleted.

Segments whose partition has no row in the partition state are never planned (nothing to judge
them by); the summary counts them as ``segments_without_partition_state``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_tasks import jobkit, rules
from spark_tasks.schema import (
    PARTITION_KEY,
    PARTITIONS_OUT_SCHEMA,
    PLAN_SCHEMA,
    spark_ddl,
)

__all__ = ["PlanKind", "partition_from_row", "run_plan_job", "segments_from_table"]


class PlanKind:
    RETENTION = "retention"
    PURGE = "purge"


class RowKind:
    SEGMENT = "segment"
    PARTITION = "partition"
    NO_STATE = "no_partition_state"


STAGED_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("segment_id", pa.string()),
        ("reason", pa.string()),
        ("size_bytes", pa.int64()),
        ("object_path", pa.string()),
        ("new_log_start_offset", pa.int64()),
        ("segments_deleted", pa.int64()),
        ("bytes_deleted", pa.int64()),
    ]
)

SEGMENT_COLUMNS = (
    "segment_id",
    "start_offset",
    "end_offset",
    "max_timestamp_ms",
    "size_bytes",
    "segment_leader_epochs",
    "state",
    "event_timestamp_ms",
    "tiered_epoch",
    "object_path",
)


def _epochs(value: list[dict[str, int]] | None) -> tuple[tuple[int, int], ...]:
    return tuple((int(e["epoch"]), int(e["start_offset"])) for e in value or ())


def segments_from_table(table: pa.Table) -> list[rules.Segment]:
    cols = {name: table.column(name).to_pylist() for name in SEGMENT_COLUMNS}
    return [
        rules.Segment(
            segment_id=cols["segment_id"][i],
            start_offset=cols["start_offset"][i],
            end_offset=cols["end_offset"][i],
            max_timestamp_ms=cols["max_timestamp_ms"][i],
            size_bytes=cols["size_bytes"][i] or 0,
            leader_epochs=_epochs(cols["segment_leader_epochs"][i]),
            state=cols["state"][i],
            event_timestamp_ms=cols["event_timestamp_ms"][i] or 0,
            tiered_epoch=cols["tiered_epoch"][i] or 0,
            object_path=cols["object_path"][i] or "",
        )
        for i in range(table.num_rows)
    ]


def partition_from_row(row: dict[str, Any]) -> rules.PartitionState:
    def num(key: str, default: int) -> int:
        value = row.get(key)
        return default if value is None else int(value)

    return rules.PartitionState(
        log_start_offset=num("log_start_offset", 0),
        log_end_offset=num("log_end_offset", 0),
        leader_epochs=_epochs(row.get("leader_epochs")),
        retention_ms=num("retention_ms", -1),
        retention_bytes=num("retention_bytes", -1),
        local_untiered_bytes=num("local_untiered_bytes", 0),
        local_log_start_offset=num("local_log_start_offset", 0),
        disable_policy=row.get("disable_policy"),
        purge_below_tiered_epoch=row.get("purge_below_tiered_epoch"),
    )


def _planner(kind: str, now_ms: int, in_flight_ms: int):
    def plan_group(left: pa.Table, right: pa.Table) -> pa.Table:
        src = right if right.num_rows else left
        if src.num_rows == 0:
            return STAGED_SCHEMA.empty_table()
        key = {k: src.column(k)[0].as_py() for k in PARTITION_KEY}
        if right.num_rows == 0:
            return pa.Table.from_pylist(
                [{**key, "kind": RowKind.NO_STATE, "segments_deleted": left.num_rows}],
                schema=STAGED_SCHEMA,
            )
        part = partition_from_row(right.slice(0, 1).to_pylist()[0])
        segments = segments_from_table(left) if left.num_rows else []
        if kind == PlanKind.RETENTION:
            plan = rules.plan_retention(part, segments, now_ms, in_flight_ms)
        else:
            plan = rules.plan_purge(part, segments)
        rows = [
            {
                **key,
                "kind": RowKind.SEGMENT,
                "segment_id": d.segment.segment_id,
                "reason": d.reason,
                "size_bytes": d.segment.size_bytes,
                "object_path": d.segment.object_path,
            }
            for d in plan.deletions
        ]
        if plan.deletions or plan.new_log_start_offset != part.log_start_offset:
            rows.append(
                {
                    **key,
                    "kind": RowKind.PARTITION,
                    "new_log_start_offset": plan.new_log_start_offset,
                    "segments_deleted": len(plan.deletions),
                    "bytes_deleted": plan.bytes_deleted,
                }
            )
        return pa.Table.from_pylist(rows, schema=STAGED_SCHEMA)

    return plan_group


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
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out_dir = jobkit.prepare_out(out)
    inv = spark.read.parquet(inventory).select(*PARTITION_KEY, *SEGMENT_COLUMNS)
    parts = spark.read.parquet(partitions)
    staged = (
        inv.groupBy(*PARTITION_KEY)
        .cogroup(parts.groupBy(*PARTITION_KEY))
        .applyInArrow(_planner(kind, now_ms, in_flight_ms), spark_ddl(STAGED_SCHEMA))
    )
    staged_dir = out_dir / "_staged"
    staged.write.parquet(str(staged_dir))
    st = spark.read.parquet(str(staged_dir))
    st.filter(F.col("kind") == RowKind.SEGMENT).select(*PLAN_SCHEMA.names).write.parquet(
        str(out_dir / "plan")
    )
    st.filter(F.col("kind") == RowKind.PARTITION).select(
        *PARTITIONS_OUT_SCHEMA.names
    ).write.parquet(str(out_dir / "partitions"))

    by_reason: dict[str, dict[str, int]] = {}
    partitions_changed = 0
    lso_moved = 0
    no_state = 0
    for row in (
        st.groupBy("kind", "reason")
        .agg(
            F.count("*").alias("rows"),
            F.sum("size_bytes").alias("bytes"),
            F.sum("segments_deleted").alias("segs"),
        )
        .collect()
    ):
        if row["kind"] == RowKind.SEGMENT:
            by_reason[row["reason"]] = {"segments": int(row["rows"]), "bytes": int(row["bytes"])}
        elif row["kind"] == RowKind.PARTITION:
            partitions_changed += int(row["rows"])
        elif row["kind"] == RowKind.NO_STATE:
            no_state += int(row["segs"] or 0)
    if partitions_changed:
        lso_moved = (
            spark.read.parquet(str(out_dir / "partitions"))
            .join(parts.select(*PARTITION_KEY, "log_start_offset"), list(PARTITION_KEY), "inner")
            .filter(F.col("new_log_start_offset") > F.col("log_start_offset"))
            .count()
        )
    summary: dict[str, Any] = {
        "job": kind,
        "dry_run": dry_run,
        "now_ms": now_ms,
        "in_flight_ms": in_flight_ms if kind == PlanKind.RETENTION else None,
        "segments": sum(v["segments"] for v in by_reason.values()),
        "bytes": sum(v["bytes"] for v in by_reason.values()),
        "by_reason": by_reason,
        "partitions": partitions_changed,
        "log_start_offsets_moved": lso_moved,
        "segments_without_partition_state": no_state,
    }
    jobkit.shutil.rmtree(staged_dir, ignore_errors=True)
    if not dry_run:
        timings: dict[str, float] = {}
        summary["deleted"] = jobkit.delete_planned_objects(
            spark, out_dir / "plan", out_dir, timings=timings
        )
        summary.update(timings)
    summary["seconds"] = round(time.monotonic() - started, 3)
    jobkit.write_summary(Path(out_dir), summary)
    return summary
