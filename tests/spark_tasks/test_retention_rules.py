"""Acceptance 1 on the pure planner: each case mirrors a Kafka RemoteLogManager test."""

from __future__ import annotations

import pytest

from spark_tasks.rules import (
    Segment,
    filtered_leader_epochs,
    is_within_leader_epochs,
    plan_retention,
)
from tests.spark_tasks.kafka_cases import CASES

KAFKA_LINEAGE = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 5: 50, 7: 70}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan_agrees_with_kafka(case):
    plan = plan_retention(case.partition, case.segments, case.now_ms)
    got = {d.segment.segment_id: d.reason for d in plan.deletions}
    assert got == case.expected, case.mirrors
    assert plan.new_log_start_offset == case.expected_lso, case.mirrors


def _seg(start, end, epochs):
    return Segment("x", start, end, 0, 1, tuple(epochs.items()))


@pytest.mark.parametrize(
    ("start", "end", "epochs", "within"),
    [
        (15, 35, {1: 15, 2: 20, 3: 30}, True),
        (15, 19, {1: 15}, True),
        (0, 5, {0: 0}, True),
        (70, 75, {7: 70}, True),
        (15, 29, {1: 15, 2: 20}, True),
        (55, 85, {5: 55, 6: 60, 7: 70}, False),
        (15, 45, {1: 15, 2: 20, 4: 40}, False),
        (15, 95, KAFKA_LINEAGE, False),
        (15, 90, KAFKA_LINEAGE, False),
        (5, 25, {1: 5, 2: 20}, False),
        (15, 35, {1: 15, 2: 20}, False),
    ],
)
def test_segment_within_leader_epochs(start, end, epochs, within):
    """Mirrors RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochs (log end offset 90)."""
    assert is_within_leader_epochs(_seg(start, end, epochs), 90, KAFKA_LINEAGE) is within


@pytest.mark.parametrize(
    ("start", "end", "epochs", "within"),
    [
        (14, 150, {5: 14, 7: 15, 9: 100}, True),
        (2, 7, {2: 5, 3: 6}, False),
        (15, 250, {7: 15, 9: 100, 10: 200}, False),
        (75, 100, {8: 75}, False),
        (15, 150, {7: 15, 9: 101}, False),
        (99, 150, {9: 99}, False),
    ],
)
def test_overlapping_segments_within_leader_epochs(start, end, epochs, within):
    """Mirrors RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochsForOverlappingSegments."""
    lineage = {7: 51, 9: 100}
    assert is_within_leader_epochs(_seg(start, end, epochs), 210, lineage) is within


def test_epochs_without_records_are_filtered():
    """Mirrors RemoteLogManagerTest's buildFilteredLeaderEpochMap test: of epochs sharing a start
    offset only the last holds records."""
    entries = [(0, 0), (1, 0), (2, 0), (3, 30), (4, 40), (5, 60), (7, 60), (9, 60)]
    assert filtered_leader_epochs(entries) == {2: 0, 3: 30, 4: 40, 9: 60}


@pytest.mark.parametrize(
    ("age_ms", "expires"), [(3_600_000, True), (3_600_001, True), (3_599_999, False)]
)
def test_a_remote_segment_exactly_retention_ms_old_expires(age_ms, expires):
    """``RemoteLogManager.RemoteLogRetentionHandler.isSegmentBreachedByRetentionTime``:
    ``maxTimestampMs <= now - retention.ms`` (UnifiedLog's local retention is the strict ``>``).
    The row and vector planners share :func:`broker_agent.contract.remote_retention.expired_by_time`."""
    from spark_tasks.rules import PartitionState
    from spark_tasks.vector_rules import plan_retention_columns
    from tests.spark_tasks.test_vector_rules import _table

    now = 1_700_000_000_000
    old = Segment("old", 0, 99, now - age_ms, 10, ((0, 0),))
    young = Segment("young", 100, 199, now, 10, ((0, 100),))
    part = PartitionState(0, 300, ((0, 0),), retention_ms=3_600_000)
    plan = plan_retention(part, [old, young], now)
    assert plan.segment_ids == ({"old"} if expires else set())
    assert plan.new_log_start_offset == (100 if expires else 0)
    vector = plan_retention_columns(part, _table([old, young]), now, 3_600_000)
    assert vector is not None and vector.rows.tolist() == ([0] if expires else [])
