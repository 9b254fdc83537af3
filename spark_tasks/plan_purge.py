"""Purge's planning path: a co-group per partition, staged, then read back for the outputs.

The inventory and the partition state are co-grouped by (cluster, topic, partition) and each
group goes to ``rules.plan_purge`` on an executor (the UDF of :func:`_planner`); its rows are
staged in ``_staged/`` and read back by :func:`_staged_outputs`. ``_planner`` can still plan
retention (the path retention took before ``plan_retention``), but only purge is sent here.
Segments without partition state are counted, never planned. The UDF's closure references this
module, ``plan_io`` and ``rules``: all in the ``spark_tasks`` zip ``submit`` ships.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_tasks import jobkit, rules
from spark_tasks.plan_io import PlanKind, partition_from_row, segments_from_table
from spark_tasks.schema import PARTITION_KEY, PARTITIONS_OUT_SCHEMA, PLAN_SCHEMA, spark_ddl

__all__ = ["STAGED_SCHEMA", "RowKind", "_planner", "_staged_outputs"]


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


def _staged_outputs(
    spark, kind: str, inv, parts, out_dir: Path, now_ms: int, in_flight_ms: int
) -> dict[str, Any]:
    """``plan/``, ``partitions/`` and the summary counts through one staged output: the co-group
    writes ``_staged/`` (segment, partition and no-state rows), which is read back for the two
    outputs and the counts, then removed."""
    from pyspark.sql import functions as F

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
    jobkit.shutil.rmtree(staged_dir, ignore_errors=True)
    return {
        "by_reason": by_reason,
        "partitions": partitions_changed,
        "log_start_offsets_moved": lso_moved,
        "segments_without_partition_state": no_state,
    }
