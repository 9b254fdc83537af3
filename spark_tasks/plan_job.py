"""The Spark side of the planning jobs (``retention``, ``purge``): apply ``rules`` per partition.

The inventory and the partition state are co-grouped by (cluster, topic, partition) and each group
goes, as two Arrow tables, to ``rules.plan_retention`` / ``rules.plan_purge`` on an executor
(``cogroup(...).applyInArrow``). Retention instead broadcasts the partition state (one row per
partition) and groups the segments alone, after pruning in Spark SQL what ``plan_retention``
provably ignores, and plans each partition with ``vector_rules`` (numpy over the Arrow columns)
where that is provably the pure planner, else with ``rules`` (see ``_staged_retention``). The
driver never sees a segment: it only reads the partition state and the counts that go into
``summary.json``.

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
import pyarrow.compute as pc

from spark_tasks import jobkit, rules, vector_rules
from spark_tasks.schema import (
    PARTITION_KEY,
    PARTITIONS_OUT_SCHEMA,
    PLAN_SCHEMA,
    SegmentState,
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


def _retention_planner(states, now_ms: int, in_flight_ms: int):
    """The retention UDF over groups keyed by ``_pid`` (an index into the broadcast ``states``:
    (key, PartitionState) per partition-state row). A null ``_pid`` is the group of segments
    without partition state: counted, never planned. Plans with ``vector_rules`` where its domain
    holds, else with the pure planner; the rows are the same either way."""

    def plan_group(table: pa.Table) -> pa.Table:
        if table.num_rows == 0:
            return STAGED_SCHEMA.empty_table()
        pid = table.column("_pid")[0].as_py()
        if pid is None:
            return pa.Table.from_pylist(
                [{"kind": RowKind.NO_STATE, "segments_deleted": table.num_rows}],
                schema=STAGED_SCHEMA,
            )
        key, part = states.value[pid]
        vplan = vector_rules.plan_retention_columns(part, table, now_ms, in_flight_ms)
        if vplan is None:
            plan = rules.plan_retention(part, segments_from_table(table), now_ms, in_flight_ms)
            rows_idx = None
            reasons = [d.reason for d in plan.deletions]
            new_lso = plan.new_log_start_offset
            seg_ids = [d.segment.segment_id for d in plan.deletions]
            sizes = [d.segment.size_bytes for d in plan.deletions]
            paths = [d.segment.object_path for d in plan.deletions]
        else:
            rows_idx = pa.array(vplan.rows, pa.int64())
            reasons = vplan.reasons
            new_lso = vplan.new_log_start_offset
            seg_ids = table.column("segment_id").take(rows_idx)
            sizes = pc.fill_null(table.column("size_bytes").take(rows_idx), 0)
            paths = pc.fill_null(table.column("object_path").take(rows_idx), "")
        n = len(reasons)
        if not n and new_lso == part.log_start_offset:
            return STAGED_SCHEMA.empty_table()
        total = sum(sizes) if rows_idx is None else (pc.sum(sizes).as_py() or 0)
        count = n + 1  # the segment rows, then the partition row

        def col(values, typ):
            return pa.concat_arrays(
                [
                    pa.array(values, typ)
                    if not isinstance(values, pa.ChunkedArray)
                    else values.combine_chunks().cast(typ),
                    pa.nulls(1, typ),
                ]
            )

        return pa.table(
            {
                "kind": pa.array([RowKind.SEGMENT] * n + [RowKind.PARTITION], pa.string()),
                "cluster": pa.array([key[0]] * count, pa.string()),
                "topic": pa.array([key[1]] * count, pa.string()),
                "partition": pa.array([key[2]] * count, pa.int32()),
                "segment_id": col(seg_ids, pa.string()),
                "reason": col(reasons, pa.string()),
                "size_bytes": col(sizes, pa.int64()),
                "object_path": col(paths, pa.string()),
                "new_log_start_offset": pa.array([None] * n + [new_lso], pa.int64()),
                "segments_deleted": pa.array([None] * n + [n], pa.int64()),
                "bytes_deleted": pa.array([None] * n + [total], pa.int64()),
            },
            schema=STAGED_SCHEMA,
        )

    return plan_group


def _staged_retention(spark, inv, parts, now_ms: int, in_flight_ms: int):
    """The retention plan's staged rows, without a co-group: the partition state (one row per
    partition, never a segment) is collected and broadcast, each segment gets its partition's
    index ``_pid`` by a broadcast join, and the segments are grouped by ``_pid`` alone.

    Pruned in Spark SQL before the Python step, for partitions that have a state row only:
    DELETE_SEGMENT_FINISHED segments and segments with ``tiered_epoch`` below the partition's
    fence (``purge_below_tiered_epoch``, null = 0; a null ``tiered_epoch`` is 0). Proof that this
    changes no plan: ``rules.plan_retention`` starts by reducing its input to ``live`` =
    exactly the segments that are *not* pruned here, and every later step (the lineage listing,
    the size estimate and sum, the scan, the sweep) reads ``live`` only; a partition whose
    ``live`` is empty plans nothing, as does a partition left without any segment here (it gets
    no group, hence no row, as its empty plan would give). Segments of partitions without a state
    row are not pruned, so ``segments_without_partition_state`` still counts all of them.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    states: list[tuple[tuple[str, str, int], rules.PartitionState]] = []
    seen: set[tuple[str, str, int]] = set()
    for row in parts.collect():
        key = (row["cluster"], row["topic"], row["partition"])
        if key in seen:
            continue  # a duplicate state row: the co-group also judged by one row
        seen.add(key)
        states.append((key, partition_from_row(row.asDict(recursive=True))))
    keys = spark.createDataFrame(
        [(*key, pid, part.purge_below_tiered_epoch or 0) for pid, (key, part) in enumerate(states)],
        T.StructType(
            [
                T.StructField("_k_cluster", T.StringType()),
                T.StructField("_k_topic", T.StringType()),
                T.StructField("_k_partition", T.IntegerType()),
                T.StructField("_pid", T.IntegerType()),
                T.StructField("_fence", T.IntegerType()),
            ]
        ),
    )
    pruned = (
        # null-safe, as the co-group's grouping treats null keys as equal
        inv.join(
            F.broadcast(keys),
            [inv[k].eqNullSafe(keys[f"_k_{k}"]) for k in PARTITION_KEY],
            "left",
        )
        .filter(
            F.col("_pid").isNull()
            | (
                ~F.col("state").eqNullSafe(SegmentState.DELETE_SEGMENT_FINISHED)
                & (F.coalesce(F.col("tiered_epoch"), F.lit(0)) >= F.col("_fence"))
            )
        )
        .select("_pid", *SEGMENT_COLUMNS)
    )
    bc = spark.sparkContext.broadcast(states)
    return pruned.groupBy("_pid").applyInArrow(
        _retention_planner(bc, now_ms, in_flight_ms), spark_ddl(STAGED_SCHEMA)
    )


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
    if kind == PlanKind.RETENTION:
        staged = _staged_retention(spark, inv, parts, now_ms, in_flight_ms)
    else:
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
