"""The Spark side of the planning jobs (``retention``, ``purge``): apply ``rules`` per partition.

The inventory and the partition state are co-grouped by (cluster, topic, partition) and each group
goes, as two Arrow tables, to ``rules.plan_retention`` / ``rules.plan_purge`` on an executor
(``cogroup(...).applyInArrow``). Retention instead broadcasts the partition state (one row per
partition), prunes in Spark SQL what ``plan_retention`` provably ignores, shuffles the segments
by partition in a narrow form (``_narrow_segment_columns``), groups them in each task itself
(``_by_partition``), and plans each partition with ``vector_rules`` (numpy over the Arrow columns)
where that is provably the pure planner, else with ``rules`` (see ``_retention_plan``). The
driver never sees a segment: it only reads the partition state and per-partition counts.

Retention writes ``plan/`` straight from its UDF in one Spark job; the per-partition outcome (new
log start offset, counts by reason) comes back through a keyed accumulator, one entry per
partition, and the driver writes ``partitions/`` and the summary from it (it already holds the
partition state, so this is no new driver memory). It used to stage every row (segments,
partitions, no-state counts) in ``_staged/``, then read that back for ``plan/``, ``partitions/``
and a counting aggregation: ~10 s of the 10M-segment bench run on the loaded bench machine
(of ~100 s). Purge still goes through ``_staged/`` (see ``_staged_outputs``).

Outputs (DESIGN.md "Spark job contract"): ``plan/`` (segment_id, cluster, topic, partition, reason,
size_bytes, object_path), ``partitions/`` (cluster, topic, partition, new_log_start_offset,
segments_deleted, bytes_deleted; a row for every partition whose plan deletes something or moves
its log start offset) and ``summary.json``. Without ``--dry-run`` the executors then delete the
planned objects (``deleted/``); with it nothing is deleted.

Segments whose partition has no row in the partition state (no live leader reported it, or the
topic is gone) are counted as ``segments_without_partition_state`` and not judged: there is no
lineage, retention setting or log start offset to judge them by. Retention plans one thing for
them, their DELETE_SEGMENT_STARTED segments (``delete_retry``, see
:func:`_retry_without_state`); purge plans nothing for them.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_tasks import jobkit, rules, vector_rules
from spark_tasks.schema import (
    EPOCH_ENTRY,
    PARTITION_KEY,
    PARTITIONS_OUT_SCHEMA,
    PLAN_SCHEMA,
    PlanReason,
    SegmentState,
    spark_ddl,
)

__all__ = [
    "InvalidInventory",
    "PlanKind",
    "partition_from_row",
    "run_plan_job",
    "segments_from_table",
]


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


class InvalidInventory(ValueError):
    """An input row that is not valid remote-log metadata: the job plans nothing from it."""


def _epochs(
    value: list[dict[str, int]] | None, owner: str, name: object
) -> tuple[tuple[int, int], ...]:
    """A leader-epoch list as ``((epoch, start_offset), ...)``.

    Kafka's leader-epoch maps (a segment's ``segmentLeaderEpochs``, a partition's epoch cache)
    never hold a null; an entry with one is not metadata Kafka could have written, and a plan
    that guessed it (drop the entry? the segment?) could delete what Kafka would keep. So the
    run fails with a message naming the row, instead of a TypeError deep in the planner."""
    try:
        return tuple((int(e["epoch"]), int(e["start_offset"])) for e in value or ())
    except (TypeError, KeyError) as exc:
        raise InvalidInventory(
            f"{owner} {name}: a leader-epoch entry is null or has a null field: {value!r}"
        ) from exc


def segments_from_table(table: pa.Table) -> list[rules.Segment]:
    cols = {name: table.column(name).to_pylist() for name in SEGMENT_COLUMNS}
    return [
        rules.Segment(
            segment_id=cols["segment_id"][i],
            start_offset=cols["start_offset"][i],
            end_offset=cols["end_offset"][i],
            max_timestamp_ms=cols["max_timestamp_ms"][i],
            size_bytes=cols["size_bytes"][i] or 0,
            leader_epochs=_epochs(
                cols["segment_leader_epochs"][i], "segment", cols["segment_id"][i]
            ),
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
        leader_epochs=_epochs(
            row.get("leader_epochs"),
            "partition state of",
            f"{row.get('topic')}-{row.get('partition')} (cluster {row.get('cluster')})",
        ),
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


#: ``state`` as a code through the shuffle (index into this tuple); see _narrow_segment_columns.
STATE_BY_CODE = SegmentState.ALL
_NARROWED = ("state", "segment_leader_epochs")


def _narrow_segment_columns() -> list:
    """``SEGMENT_COLUMNS`` as the retention shuffle carries them: the same values, fewer bytes.

    Measured on the bench's 10M-segment dry run (Spark event logs): with a planner that returns
    nothing, the grouping stage still took 18 of its 29 s in the JVM (shuffle read, sort, rows to
    Arrow), and the stage before it 13.6 s to read, join and write the 414 MB shuffle; both scale
    with the width of the rows. Two columns are wide for what they say: ``state`` is one of four
    ~22-byte strings, and ``segment_leader_epochs`` is an array of structs, nearly always of one
    entry, whose nested layout is the costliest to write to the shuffle and to Arrow. So:

    - ``_state``: the index of ``state`` in ``STATE_BY_CODE`` (a byte); ``_state_raw``: the
      string itself only when it is not one of those four (null otherwise);
    - ``_e0`` / ``_o0``: the epoch and start offset of a one-entry list with no null in it;
      ``_epochs``: the list as JSON (``to_json``) only when it is not such a list (null, empty,
      several entries, or a null inside). Not the list itself: even all null, a list-of-struct
      column tripled the grouping stage's JVM time (1M segments: 6.8 s -> 14.4 s), while a
      null string costs nothing.

    :func:`_restore_segment_columns` rebuilds the original columns in the Python worker before
    planning, so the planners see exactly the inventory's values."""
    from pyspark.sql import functions as F

    state = F.col("state")
    code = F.when(state == STATE_BY_CODE[0], F.lit(0))
    for i, name in enumerate(STATE_BY_CODE[1:], start=1):
        code = code.when(state == name, F.lit(i))
    epochs = F.col("segment_leader_epochs")
    # CASE WHEN evaluates a branch only when its condition holds, so epochs[0] is never read
    # from an empty list (an error under ANSI mode).
    single = F.coalesce(
        F.when(
            F.size(epochs) == 1,
            epochs[0]["epoch"].isNotNull() & epochs[0]["start_offset"].isNotNull(),
        ),
        F.lit(False),
    )
    return [
        *(c for c in SEGMENT_COLUMNS if c not in _NARROWED),
        code.cast("tinyint").alias("_state"),
        F.when(code.isNull(), state).alias("_state_raw"),
        F.when(single, epochs[0]["epoch"]).alias("_e0"),
        F.when(single, epochs[0]["start_offset"]).alias("_o0"),
        F.to_json(F.when(~single, epochs)).alias("_epochs"),
    ]


_VECTOR_REASONS = pa.array(vector_rules.REASONS, pa.string())


def _restore_segment_columns(table: pa.Table) -> pa.Table:
    """The ``state`` and ``segment_leader_epochs`` columns back from their shuffle form (see
    :func:`_narrow_segment_columns`), value for value."""
    codes = table.column("_state").combine_chunks()
    state = pc.if_else(
        pc.is_null(codes),
        table.column("_state_raw").combine_chunks().cast(pa.string()),
        vector_rules.STATE_NAMES.take(codes),
    )
    e0 = table.column("_e0").combine_chunks()
    o0 = table.column("_o0").combine_chunks()
    entry = pa.struct([(EPOCH_ENTRY.field(0).name, e0.type), (EPOCH_ENTRY.field(1).name, o0.type)])
    n = table.num_rows
    if e0.null_count == 0:  # every row a one-entry list: the usual case, built in one go
        epochs = pa.ListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)),
            pa.StructArray.from_arrays([e0, o0], fields=list(entry)),
        )
    else:
        epochs = pa.array(
            [
                [{entry.field(0).name: e, entry.field(1).name: o}]
                if e is not None
                else _epochs_from_json(text)
                for e, o, text in zip(
                    e0.to_pylist(),
                    o0.to_pylist(),
                    table.column("_epochs").to_pylist(),
                    strict=True,
                )
            ],
            pa.list_(entry),
        )
    rest = [c for c in table.column_names if c not in _SHUFFLE_ONLY]
    return pa.Table.from_arrays(
        [*(table.column(c) for c in rest), state, epochs],
        names=[*rest, "state", "segment_leader_epochs"],
    )


_SHUFFLE_ONLY = ("_state", "_state_raw", "_e0", "_o0", "_epochs", "_key")


def _epochs_from_json(text: str | None) -> list[dict[str, int | None] | None] | None:
    """A leader-epoch list from Spark's ``to_json`` (which leaves out null fields)."""
    if text is None:
        return None
    return [
        None if e is None else {f.name: e.get(f.name) for f in EPOCH_ENTRY}
        for e in json.loads(text)
    ]


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


_DSS_CODE = STATE_BY_CODE.index(SegmentState.DELETE_SEGMENT_STARTED)


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


def _partition_rows(spark, path: str) -> list[dict[str, Any]]:
    """The partition state's rows on the driver (one per partition, never a segment), as dicts.

    Read with pyarrow wherever it can (a local path, or a URI it has a filesystem for), else with
    Spark. Spark's schema job and ``collect`` took ~2 s of the bench's 10M-segment dry run for
    1,000 rows; pyarrow reads them in milliseconds. Both read a directory the same way (files
    whose name starts with ``_`` or ``.`` are not data)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError):  # a scheme pyarrow lacks, or a missing path
        return [row.asDict(recursive=True) for row in spark.read.parquet(path).collect()]


def _retention_plan(spark, inv, partitions: str, now_ms: int, in_flight_ms: int):
    """The retention plan without a co-group: ``(plan rows, partition-state rows, outcomes)``.
    The partition state (one row per partition, never a segment) is read on the driver
    (:func:`_partition_rows`) and broadcast, each segment gets its partition's index ``_pid`` by
    a broadcast join, and the segments are hash-partitioned by ``_pid`` and grouped in their
    tasks (:func:`_by_partition`). ``outcomes`` is the accumulator of
    :func:`_retention_planner`; it is filled once the plan rows have been written.

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
                ~F.col("state").eqNullSafe(SegmentState.DELETE_SEGMENT_FINISHED)
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


def _write_driver_rows(rows: list[tuple], schema: pa.Schema, dest: Path) -> None:
    """Rows the driver holds (one per partition, never a segment) as a Parquet directory like
    Spark's (one part file and ``_SUCCESS``), written with pyarrow: a Spark job for the bench's
    760 rows took ~1.1 s. ``dest`` is local: the job's ``--out`` is (``jobkit.prepare_out``)."""
    import pyarrow.parquet as pq

    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    table = pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )
    dest.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, dest / "part-00000.parquet")
    (dest / "_SUCCESS").touch()


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
#: Together with the single-pass outputs (module doc) and ``vector_rules``' scan loop: 10M
#: retention dry run median 95.7 s -> 81.4 s wall (7 and 4 runs, interleaved, load ~4 on 2
#: cores; bare scan median 24.1 s), 1M 51.1 s -> 33.3 s (2 runs each).
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
    is given, the plan is checked against it once it is written, dry run or not: one object
    outside the store fails the job before anything is deleted (``jobkit.ensure_inside_store``),
    so a bad inventory row stops the run at planning time, before the Celery task publishes log
    start offsets or marks segments.
    """
    if not dry_run and not store_root:
        raise ValueError("deleting needs the remote store's root (store_root)")
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
    if dry_run and store_root:
        jobkit.ensure_inside_store(spark, out_dir / "plan", store_root, out_dir)
    if not dry_run:
        timings: dict[str, float] = {}
        summary["deleted"] = jobkit.delete_planned_objects(
            spark, out_dir / "plan", out_dir, store_root=store_root, timings=timings
        )
        summary.update(timings)
    summary["seconds"] = round(time.monotonic() - started, 3)
    jobkit.write_summary(Path(out_dir), summary)
    return summary
