"""The planning jobs' data in Arrow: what they read, the shuffle form, what the driver writes.

Owns the inventory and partition state as ``rules``' types (``SEGMENT_COLUMNS``,
:func:`segments_from_table`, :func:`partition_from_row`; a null in a leader-epoch entry is
:class:`InvalidInventory`), retention's narrow shuffle form and its restoration, the driver's
Parquet I/O, and ``PlanKind``. Underscored names are the package's own, not an API. The UDFs
import this module on the executors from the ``spark_tasks`` zip ``submit`` ships.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks import rules, vector_rules
from spark_tasks.schema import EPOCH_ENTRY

__all__ = [
    "SEGMENT_COLUMNS",
    "STATE_BY_CODE",
    "InvalidInventory",
    "PlanKind",
    "partition_from_row",
    "segments_from_table",
]


class PlanKind:
    RETENTION = "retention"
    PURGE = "purge"


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


#: ``state`` as a code through the shuffle (index into this tuple); see _narrow_segment_columns.
STATE_BY_CODE = RemoteSegmentState.ALL
_NARROWED = ("state", "segment_leader_epochs")


def _narrow_segment_columns() -> list:
    """``SEGMENT_COLUMNS`` as the retention shuffle carries them: the same values, fewer bytes.

    The shuffle's JVM time scales with row width (bench, 10M segments: 18 of 29 s in the grouping
    stage). ``state`` becomes ``_state``, a byte index into ``STATE_BY_CODE`` (``_state_raw`` keeps
    an unknown string); a one-entry, null-free ``segment_leader_epochs`` becomes ``_e0`` / ``_o0``,
    any other list ``_epochs`` as JSON — a string, because even an all-null list-of-struct column
    doubled the grouping stage. :func:`_restore_segment_columns` rebuilds the original columns in
    the Python worker, so the planners see exactly the inventory's values.
    """
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
