"""The retention UDF of ``plan_job`` without Spark: its plan rows and its per-partition outcomes.

The job writes ``plan/`` from the UDF's rows and ``partitions/`` plus the summary counts from
the outcomes it adds to a keyed accumulator; both must be what ``rules.plan_retention`` says.
"""

from __future__ import annotations

import pyarrow as pa

from spark_tasks.plan_job import _KeyedOutcomes, _retention_planner
from spark_tasks.rules import plan_retention
from spark_tasks.schema import PLAN_SCHEMA
from tests.spark_tasks.kafka_cases import CASES
from tests.spark_tasks.test_vector_rules import _table

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


def _group(case, pid):
    table = _table(list(case.segments))
    return table.drop_columns(["cluster", "topic", "topic_id", "partition"]).add_column(
        0, "_pid", pa.array([pid] * table.num_rows, pa.int32())
    )


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


def test_retention_udf_counts_segments_without_state():
    acc = _Accumulator()
    udf = _retention_planner(_Broadcast([]), acc, CASES[0].now_ms, 3_600_000)
    group = _group(CASES[0], 0)
    group = group.set_column(0, "_pid", pa.nulls(group.num_rows, pa.int32()))
    assert udf(group).num_rows == 0
    assert acc.value == {None: group.num_rows}


def test_outcomes_are_keyed_so_a_rerun_task_counts_once():
    param = _KeyedOutcomes()
    value = param.zero({})
    for update in ({1: (10, 1, 5, {})}, {None: 3}, {1: (10, 1, 5, {})}, {None: 3}):
        value = param.addInPlace(value, update)
    assert value == {1: (10, 1, 5, {}), None: 3}
