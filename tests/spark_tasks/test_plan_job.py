"""The retention UDF of ``plan_job`` without Spark: its plan rows and its per-partition outcomes.

The job writes ``plan/`` from the UDF's rows and ``partitions/`` plus the summary counts from
the outcomes it adds to a keyed accumulator; both must be what ``rules.plan_retention`` says.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.plan_io import (
    STATE_BY_CODE,
    InvalidInventory,
    _restore_segment_columns,
    partition_from_row,
    segments_from_table,
)
from spark_tasks.plan_retention import _KeyedOutcomes, _retention_planner
from spark_tasks.rules import plan_retention
from spark_tasks.schema import PLAN_SCHEMA, PlanReason
from tests.spark_tasks.kafka_cases import CASES
from tests.spark_tasks.test_retention_properties import HOUR, NOW
from tests.spark_tasks.test_vector_rules import _table, stressed

KEY = ("c", "t", 0)


class _Broadcast:
    def __init__(self, value):
        self.value = value


class _Accumulator:
    def __init__(self):
        self.param = _KeyedOutcomes()
        self.value = self.param.zero({})

    def add(self, update):
        self.value = self.param.addInPlace(self.value, update)


def narrow(table: pa.Table) -> pa.Table:
    """What ``_narrow_segment_columns`` makes of ``table`` in Spark, row by row in Python
    (tests/spark_tasks/test_narrow_columns.py checks that Spark agrees)."""
    states = table.column("state").to_pylist()
    epochs = table.column("segment_leader_epochs").to_pylist()
    single = [
        e is not None
        and len(e) == 1
        and e[0] is not None
        and None not in (e[0]["epoch"], e[0]["start_offset"])
        for e in epochs
    ]
    codes = [STATE_BY_CODE.index(s) if s in STATE_BY_CODE else None for s in states]
    keep = [c for c in table.column_names if c not in ("state", "segment_leader_epochs")]
    return pa.table(
        {
            **{c: table.column(c) for c in keep},
            "_state": pa.array(codes, pa.int8()),
            "_state_raw": pa.array(
                [s if c is None else None for s, c in zip(states, codes, strict=True)]
            ),
            "_e0": pa.array(
                [e[0]["epoch"] if one else None for e, one in zip(epochs, single, strict=True)],
                pa.int32(),
            ),
            "_o0": pa.array(
                [
                    e[0]["start_offset"] if one else None
                    for e, one in zip(epochs, single, strict=True)
                ],
                pa.int64(),
            ),
            "_epochs": pa.array(
                [
                    None if one or e is None else _to_json(e)
                    for e, one in zip(epochs, single, strict=True)
                ],
                pa.string(),
            ),
        }
    )


def _to_json(epochs: list) -> str:
    """Spark's ``to_json`` of a leader-epoch list: compact, null fields left out."""
    return json.dumps(
        [None if e is None else {k: v for k, v in e.items() if v is not None} for e in epochs],
        separators=(",", ":"),
    )


def _group(case, pid):
    table = narrow(_table(list(case.segments)))
    return table.drop_columns(["cluster", "topic", "topic_id", "partition"]).add_column(
        0, "_pid", pa.array([pid] * table.num_rows, pa.int32())
    )


def odd_rows() -> pa.Table:
    """Segments whose state or leader epochs the shuffle form must carry as they are."""
    base = _table([CASES[0].segments[0]]).to_pylist()[0]
    epochs = [
        [{"epoch": 3, "start_offset": 10}],
        None,
        [],
        [{"epoch": 1, "start_offset": 0}, {"epoch": 2, "start_offset": 5}],
        [{"epoch": None, "start_offset": 7}],
        [{"epoch": 4, "start_offset": None}],
        [None],
    ]
    states = [*STATE_BY_CODE, None, "SOMETHING_NEW", ""]
    rows = [
        {**base, "segment_id": f"s{i}", "segment_leader_epochs": e, "state": st}
        for i, (e, st) in enumerate((e, st) for e in epochs for st in states)
    ]
    return pa.Table.from_pylist(rows, schema=_table([]).schema)


def test_a_null_inside_a_leader_epoch_list_fails_with_the_row_named():
    rows = odd_rows()
    bad = rows.filter(pa.array([i == 4 * 7 for i in range(rows.num_rows)]))  # [{epoch: None}]
    assert bad.column("segment_leader_epochs").to_pylist() == [[{"epoch": None, "start_offset": 7}]]
    with pytest.raises(InvalidInventory, match="segment s28: a leader-epoch entry is null"):
        segments_from_table(bad)
    with pytest.raises(InvalidInventory, match="partition state of t-0"):
        partition_from_row({"topic": "t", "partition": 0, "leader_epochs": [None]})


def test_restore_gives_back_the_columns_it_was_narrowed_from():
    table = odd_rows()
    restored = _restore_segment_columns(narrow(table))
    for name in ("state", "segment_leader_epochs", "segment_id", "object_path"):
        assert restored.column(name).to_pylist() == table.column(name).to_pylist(), name

    single = _table(list(CASES[0].segments))  # every row a one-entry list: the fast path
    restored = _restore_segment_columns(narrow(single))
    assert restored.column("segment_leader_epochs").to_pylist() == (
        single.column("segment_leader_epochs").to_pylist()
    )
    assert restored.column("state").to_pylist() == single.column("state").to_pylist()


def test_retention_udf_rows_and_outcomes_match_the_pure_planner():
    states = _Broadcast([(KEY, case.partition) for case in CASES])
    for pid, case in enumerate(CASES):
        acc = _Accumulator()
        udf = _retention_planner(states, acc, case.now_ms, 3_600_000)
        out = udf(_group(case, pid))
        expected = plan_retention(case.partition, list(case.segments), case.now_ms, 3_600_000)
        assert out.schema == PLAN_SCHEMA
        assert out.column("segment_id").to_pylist() == [
            d.segment.segment_id for d in expected.deletions
        ], case.name
        assert out.column("reason").to_pylist() == [d.reason for d in expected.deletions]
        changed = expected.deletions or (
            expected.new_log_start_offset != case.partition.log_start_offset
        )
        if not changed:
            assert acc.value == {} and out.num_rows == 0, case.name
            continue
        by_reason: dict[str, tuple[int, int]] = {}
        for d in expected.deletions:
            n, b = by_reason.get(d.reason, (0, 0))
            by_reason[d.reason] = (n + 1, b + d.segment.size_bytes)
        assert acc.value == {
            pid: (
                expected.new_log_start_offset,
                len(expected.deletions),
                expected.bytes_deleted,
                by_reason,
            )
        }, case.name


@settings(max_examples=300, deadline=None)
@given(stressed(), st.sampled_from([0, HOUR, 10 * HOUR]), st.booleans())
def test_retention_udf_on_shuffle_groups_equals_the_pure_planner(data, in_flight_ms, odd):
    """Whichever way the UDF takes (the narrow columns as they are, restored columns, or the pure
    planner when the partition is outside the vector domain), its rows are the pure plan's."""
    part, segs = data
    table = _table(list(segs))
    if odd:  # rows the shuffle carries as they are: the group cannot take the narrow path
        # (only those the pure planner reads: a null inside an epoch list it cannot)
        odd_table = odd_rows()
        extra = odd_table.filter(
            pa.array(
                [
                    e is None or all(x is not None and None not in x.values() for x in e)
                    for e in odd_table.column("segment_leader_epochs").to_pylist()
                ]
            )
        )
        table = pa.concat_tables([table, extra])
    expected = plan_retention(part, segments_from_table(table), NOW, in_flight_ms)
    acc = _Accumulator()
    group = narrow(table).add_column(0, "_pid", pa.array([0] * table.num_rows, pa.int32()))
    group = group.drop_columns(["cluster", "topic", "topic_id", "partition"])
    out = _retention_planner(_Broadcast([(KEY, part)]), acc, NOW, in_flight_ms)(group)
    got = zip(out.column("segment_id").to_pylist(), out.column("reason").to_pylist(), strict=True)
    assert list(got) == [(d.segment.segment_id, d.reason) for d in expected.deletions]
    if out.num_rows or expected.new_log_start_offset != part.log_start_offset:
        assert acc.value[0][:3] == (
            expected.new_log_start_offset,
            len(expected.deletions),
            expected.bytes_deleted,
        )
    else:
        assert acc.value == {}


def test_retention_udf_retries_only_started_deletes_of_segments_without_state():
    acc = _Accumulator()
    udf = _retention_planner(_Broadcast([]), acc, CASES[0].now_ms, 3_600_000)
    table = odd_rows()  # every state, odd ones included
    group = narrow(table)
    group = group.add_column(0, "_pid", pa.nulls(group.num_rows, pa.int32()))
    keys = [
        json.dumps({"cluster": "c", "topic": f"t{i % 2}", "partition": i % 3})
        for i in range(group.num_rows)
    ]
    group = group.append_column("_key", pa.array(keys, pa.string()))
    out = udf(group)
    started = [
        (i, r)
        for i, r in enumerate(table.to_pylist())
        if r["state"] == RemoteSegmentState.DELETE_SEGMENT_STARTED
    ]
    assert started
    assert out.schema == PLAN_SCHEMA
    assert out.to_pylist() == [
        {
            "segment_id": r["segment_id"],
            "cluster": "c",
            "topic": f"t{i % 2}",
            "partition": i % 3,
            "reason": PlanReason.DELETE_RETRY,
            "size_bytes": r["size_bytes"],
            "object_path": r["object_path"],
        }
        for i, r in started
    ]
    retried = sum(r["size_bytes"] for _, r in started)
    assert acc.value == {None: (group.num_rows, len(started), retried)}


def test_retention_udf_counts_segments_without_state():
    acc = _Accumulator()
    udf = _retention_planner(_Broadcast([]), acc, CASES[0].now_ms, 3_600_000)
    group = _group(CASES[0], 0)
    group = group.set_column(0, "_pid", pa.nulls(group.num_rows, pa.int32()))
    group = group.append_column("_key", pa.nulls(group.num_rows, pa.string()))
    out = udf(group)
    assert not any(
        s.state == RemoteSegmentState.DELETE_SEGMENT_STARTED for s in CASES[0].segments
    ), "the case has no started delete"
    assert out.num_rows == 0
    assert acc.value == {None: (group.num_rows, 0, 0)}


def test_outcomes_are_keyed_so_a_rerun_task_counts_once():
    param = _KeyedOutcomes()
    value = param.zero({})
    for update in ({1: (10, 1, 5, {})}, {None: 3}, {1: (10, 1, 5, {})}, {None: 3}):
        value = param.addInPlace(value, update)
    assert value == {1: (10, 1, 5, {}), None: 3}


def test_by_partition_plans_each_partition_once_with_all_its_rows():
    from spark_tasks.plan_retention import _by_partition
    from spark_tasks.schema import PLAN_SCHEMA as plan_schema

    seen: list[tuple[int | None, list[int]]] = []

    def plan_group(table: pa.Table) -> pa.Table:
        seen.append((table.column("_pid")[0].as_py(), sorted(table.column("n").to_pylist())))
        return plan_schema.empty_table()

    pids = [2, None, 0, 2, 1, 0, None, 2]
    batches = [
        pa.record_batch({"_pid": pa.array(pids[i : i + 3], pa.int32()), "n": list(range(i, i + 3))})
        for i in range(0, 6, 3)
    ] + [pa.record_batch({"_pid": pa.array(pids[6:], pa.int32()), "n": [6, 7]})]
    assert list(_by_partition(plan_group)(iter(batches))) == []
    assert seen == [(None, [1, 6]), (0, [2, 5]), (1, [4]), (2, [0, 3, 7])]
    assert list(_by_partition(plan_group)(iter([]))) == []
