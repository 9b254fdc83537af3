"""Retention's planning path: one Spark job from the inventory to ``plan/``, no co-group.

The partition state is broadcast, what ``plan_retention`` provably ignores is pruned in Spark SQL,
segments are shuffled by partition in a narrow form and planned per task with ``vector_rules``
where provably equal, else ``rules``. The driver never sees a segment: ``plan/`` is written
from the UDF, per-partition outcomes come back through a keyed accumulator (staging through
``_staged/`` cost ~10 s of the 10M bench's ~100 s; purge still stages). Of the segments without
partition state only DELETE_SEGMENT_STARTED ones are planned (:func:`_retry_without_state`).
The UDF's closures reference this module, ``plan_io``, ``rules`` and ``vector_rules``: all in
the ``spark_tasks`` zip ``submit`` ships with ``--py-files``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks import rules, vector_rules
from spark_tasks.plan_io import (
    STATE_BY_CODE,
    _narrow_segment_columns,
    _partition_rows,
    _restore_segment_columns,
    _write_driver_rows,
    partition_from_row,
    segments_from_table,
)
from spark_tasks.schema import (
    PARTITION_KEY,
    PARTITIONS_OUT_SCHEMA,
    PLAN_SCHEMA,
    PlanReason,
    spark_ddl,
)

__all__ = ["_retention_outputs", "_retention_plan"]


_VECTOR_REASONS = pa.array(vector_rules.REASONS, pa.string())


def _retention_planner(states, outcomes, now_ms: int, in_flight_ms: int):
    """The retention UDF over groups keyed by ``_pid`` (an index into the broadcast ``states``:
    (key, PartitionState) per partition-state row). A null ``_pid`` is the group of segments
    without partition state: counted, never planned. Plans with ``vector_rules`` where its domain
    holds, else with the pure planner; the rows are the same either way. A group whose rows are
    all in the narrow columns' common form (a state code, a one-entry epoch list) goes to
    ``vector_rules`` as it is; any other is restored first (:func:`_restore_segment_columns`).

    Returns the partition's ``plan/`` rows only. What a partition contributes to ``partitions/``
    and ``summary.json`` goes to the accumulator ``outcomes`` as ``{_pid: (new_log_start_offset,
    segments_deleted, bytes_deleted, {reason: (segments, bytes)})}`` (``{None: (segments,
    retried, retried_bytes)}`` for the group without state): one entry per partition, never a segment, and keyed, so a task that
    Spark runs again adds the same entry again instead of counting twice."""

    def plan_group(table: pa.Table) -> pa.Table:
        if table.num_rows == 0:
            return PLAN_SCHEMA.empty_table()
        pid = table.column("_pid")[0].as_py()
        if pid is None:
            out = _retry_without_state(table)
            retried = pc.sum(out.column("size_bytes")).as_py() or 0
            outcomes.add({None: (table.num_rows, out.num_rows, retried)})
            return out
        key, part = states.value[pid]
        vplan = None
        codes, e0 = table.column("_state"), table.column("_e0")
        if codes.null_count == 0 and e0.null_count == 0:
            # the common form: the planner reads the narrow columns as they are
            vplan = vector_rules.plan_retention_columns(
                part,
                table,
                now_ms,
                in_flight_ms,
                state_codes=vector_rules.numpy_column(codes),
                single_epochs=(
                    vector_rules.numpy_column(e0),
                    vector_rules.numpy_column(table.column("_o0")),
                ),
            )
        if vplan is None:
            table = _restore_segment_columns(table)
            vplan = vector_rules.plan_retention_columns(part, table, now_ms, in_flight_ms)
        if vplan is None:
            plan = rules.plan_retention(part, segments_from_table(table), now_ms, in_flight_ms)
            reasons = pa.array([d.reason for d in plan.deletions], pa.string())
            new_lso = plan.new_log_start_offset
            seg_ids = pa.array([d.segment.segment_id for d in plan.deletions], pa.string())
            sizes = pa.array([d.segment.size_bytes for d in plan.deletions], pa.int64())
            paths = pa.array([d.segment.object_path for d in plan.deletions], pa.string())
        else:
            rows_idx = pa.array(vplan.rows, pa.int64())
            reasons = _VECTOR_REASONS.take(pa.array(vplan.codes))
            new_lso = vplan.new_log_start_offset
            seg_ids = table.column("segment_id").take(rows_idx).combine_chunks()
            sizes = pc.fill_null(table.column("size_bytes").take(rows_idx), 0).combine_chunks()
            paths = pc.fill_null(table.column("object_path").take(rows_idx), "").combine_chunks()
        n = len(reasons)
        if not n and new_lso == part.log_start_offset:
            return PLAN_SCHEMA.empty_table()
        out = pa.table(
            {
                "segment_id": seg_ids.cast(pa.string()),
                "cluster": pa.array([key[0]] * n, pa.string()),
                "topic": pa.array([key[1]] * n, pa.string()),
                "partition": pa.array([key[2]] * n, pa.int32()),
                "reason": reasons,
                "size_bytes": sizes.cast(pa.int64()),
                "object_path": paths.cast(pa.string()),
            },
            schema=PLAN_SCHEMA,
        )
        by_reason = {}
        if vplan is not None:
            codes, size_np = vplan.codes, sizes.to_numpy()
            by_reason = {  # integer sums (bincount's weights would sum in float64)
                vector_rules.REASONS[c]: (int(mask.sum()), int(size_np[mask].sum()))
                for c in np.unique(codes).tolist()
                for mask in (codes == c,)
            }
        elif n:
            agg = out.group_by("reason").aggregate([("size_bytes", "sum"), ("reason", "count")])
            by_reason = {
                r: (int(c), int(b or 0))
                for r, b, c in zip(
                    agg.column("reason").to_pylist(),
                    agg.column("size_bytes_sum").to_pylist(),
                    agg.column("reason_count").to_pylist(),
                    strict=True,
                )
            }
        total = sum(b for _, b in by_reason.values())
        outcomes.add({pid: (new_lso, n, total, by_reason)})
        return out

    return plan_group


_DSS_CODE = STATE_BY_CODE.index(RemoteSegmentState.DELETE_SEGMENT_STARTED)


def _retry_without_state(table: pa.Table) -> pa.Table:
    """``plan/`` rows for the segments without partition state (the group of null ``_pid``, in
    shuffle form): their DELETE_SEGMENT_STARTED segments, as ``delete_retry``.

    Kafka's RemoteLogManager retries a segment left DELETE_SEGMENT_STARTED on its next
    retention pass; such a segment is already unreadable (the metadata no longer serves it) and
    only its object is left, so finishing the delete needs no lineage, retention setting or log
    start offset, nor a leader: it is what the partition's next leader would do first. Nothing
    else of these partitions is planned. Their key travels as ``_key`` (JSON, null for every
    row that has state, so the shuffle carries it for these rows only)."""
    mask = pc.fill_null(pc.equal(table.column("_state"), _DSS_CODE), False)
    rows = table.filter(mask)
    if rows.num_rows == 0:
        return PLAN_SCHEMA.empty_table()
    keys = [json.loads(k) for k in rows.column("_key").to_pylist()]
    return pa.table(
        {
            "segment_id": rows.column("segment_id").cast(pa.string()),
            "cluster": pa.array([k.get("cluster") for k in keys], pa.string()),
            "topic": pa.array([k.get("topic") for k in keys], pa.string()),
            "partition": pa.array([k.get("partition") for k in keys], pa.int32()),
            "reason": pa.array([PlanReason.DELETE_RETRY] * rows.num_rows, pa.string()),
            "size_bytes": pc.fill_null(rows.column("size_bytes"), 0).cast(pa.int64()),
            "object_path": pc.fill_null(rows.column("object_path"), "").cast(pa.string()),
        },
        schema=PLAN_SCHEMA,
    )


def _by_partition(plan_group):
    """A ``mapInArrow`` function over a hash partition of the segments by ``_pid``: every row
    of a partition's group is in the same task, so the task collects its rows, sorts them by
    ``_pid`` and runs ``plan_group`` on each group, as ``groupBy("_pid").applyInArrow`` would
    without the JVM's sort of every row. A task holds its shuffle partition in memory (AQE
    coalesces them to ``advisoryPartitionSizeInBytes``, see ``PLAN_SQL_CONF``), as the grouped
    UDF held a whole group. Measured on the bench's retention dry run (with the narrow columns,
    AMD 2 cores): 1M segments 27.1 s -> 24.1 s wall, 10M 57.2 s -> 49.0 s; same plans.

    The rows are gathered into group order once and each group is a zero-copy slice of that: a
    ``take`` per group re-read the whole chunked table every time (offline, on 20 groups of the
    bench's 10M inventory: 8.9 ms a group with per-group takes, 3.6 ms with one gather)."""

    def run(batches):
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        del batches
        keys = pc.fill_null(table.column("_pid").combine_chunks(), -1)  # no state: -1, first
        order = pc.sort_indices(keys)
        table = table.take(order)  # the task's rows once, in group order
        sorted_keys = keys.take(order).to_numpy(zero_copy_only=False)
        del keys, order
        bounds = [0, *(np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1).tolist()]
        bounds.append(len(sorted_keys))
        for lo, hi in itertools.pairwise(bounds):
            yield from plan_group(table.slice(lo, hi - lo)).to_batches()
        del table
        pa.default_memory_pool().release_unused()  # the worker runs the next task's rows next

    return run


class _KeyedOutcomes:
    """Accumulates ``{key: outcome}`` dicts; a key added twice (a task run again) keeps one."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


def _retention_plan(spark, inv, partitions: str, now_ms: int, in_flight_ms: int):
    """The retention plan without a co-group: ``(plan rows, partition-state rows, outcomes)``.

    The partition state is read on the driver and broadcast; segments get their partition's
    ``_pid`` by a broadcast join, are hash-partitioned by it and grouped in their tasks
    (:func:`_by_partition`); ``outcomes`` is filled once the plan rows are written. For partitions
    with a state row, DELETE_SEGMENT_FINISHED segments and those below the fence are pruned in SQL:
    that changes no plan, since ``rules.plan_retention`` reads only its ``live`` set, exactly what
    survives here. Partitions without state are not pruned, so their count stays complete.
    """
    from pyspark.sql import functions as F

    states: list[tuple[tuple[str, str, int], rules.PartitionState]] = []
    seen: set[tuple[str, str, int]] = set()
    part_rows = _partition_rows(spark, partitions)
    for row in part_rows:
        key = (row["cluster"], row["topic"], row["partition"])
        if key in seen:
            continue  # a duplicate state row: the co-group also judged by one row
        seen.add(key)
        states.append((key, partition_from_row(row)))
    # From an Arrow table, so that the JVM reads it as it is: a list of tuples goes through
    # Python workers, ~1.4 s before the first segment is read.
    keys = spark.createDataFrame(
        pa.table(
            {
                "_k_cluster": pa.array([key[0] for key, _ in states], pa.string()),
                "_k_topic": pa.array([key[1] for key, _ in states], pa.string()),
                "_k_partition": pa.array([key[2] for key, _ in states], pa.int32()),
                "_pid": pa.array(range(len(states)), pa.int32()),
                "_fence": pa.array(
                    [part.purge_below_tiered_epoch or 0 for _, part in states], pa.int32()
                ),
            }
        )
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
                ~F.col("state").eqNullSafe(RemoteSegmentState.DELETE_SEGMENT_FINISHED)
                & (F.coalesce(F.col("tiered_epoch"), F.lit(0)) >= F.col("_fence"))
            )
        )
        .select(
            "_pid",
            *_narrow_segment_columns(),
            F.when(F.col("_pid").isNull(), F.to_json(F.struct(*PARTITION_KEY))).alias("_key"),
        )
    )
    sc = spark.sparkContext
    bc = sc.broadcast(states)
    outcomes = sc.accumulator({}, _KeyedOutcomes())
    plan = pruned.repartition("_pid").mapInArrow(
        _by_partition(_retention_planner(bc, outcomes, now_ms, in_flight_ms)),
        spark_ddl(PLAN_SCHEMA),
    )
    return plan, part_rows, outcomes


def _retention_outputs(part_rows, outcomes: dict, out_dir: Path) -> dict[str, Any]:
    """``partitions/`` and the summary counts from the planner's per-partition outcomes (one
    entry per partition, on the driver as the partition state already is), the same rows and
    numbers as the staged path of :func:`run_plan_job` computes in Spark; ``lso_moved`` is its
    inner join with the partition state (null keys never match; every duplicate state row
    counts), done here over the collected state rows."""
    states: dict[int, tuple[tuple[str, str, int], Any]] = {}
    seen: set[tuple[str, str, int]] = set()
    lsos: dict[tuple[str, str, int], list[int]] = {}
    for row in part_rows:
        key = (row["cluster"], row["topic"], row["partition"])
        if key not in seen:
            seen.add(key)
            states[len(states)] = key
        if None not in key and row["log_start_offset"] is not None:
            lsos.setdefault(key, []).append(int(row["log_start_offset"]))
    by_reason: dict[str, dict[str, int]] = {}
    rows = []
    no_state = 0
    lso_moved = 0
    for pid, outcome in sorted(outcomes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        if pid is None:
            segments, retried, retried_bytes = outcome
            no_state += segments
            if retried:
                acc = by_reason.setdefault(PlanReason.DELETE_RETRY, {"segments": 0, "bytes": 0})
                acc["segments"] += retried
                acc["bytes"] += retried_bytes
            continue
        key = states[pid]
        new_lso, n, total, reasons = outcome
        rows.append((*key, new_lso, n, total))
        lso_moved += sum(1 for lso in lsos.get(key, ()) if new_lso > lso)
        for reason, (count, size) in reasons.items():
            acc = by_reason.setdefault(reason, {"segments": 0, "bytes": 0})
            acc["segments"] += count
            acc["bytes"] += size
    _write_driver_rows(rows, PARTITIONS_OUT_SCHEMA, out_dir / "partitions")
    return {
        "by_reason": by_reason,
        "partitions": len(rows),
        "log_start_offsets_moved": lso_moved,
        "segments_without_partition_state": no_state,
    }
