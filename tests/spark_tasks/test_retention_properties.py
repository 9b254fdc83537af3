"""Acceptance 2 (pure planner): hypothesis properties of retention plans."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.rules import (
    PartitionPlan,
    PartitionState,
    Segment,
    filtered_leader_epochs,
    is_within_leader_epochs,
    plan_retention,
)
from spark_tasks.schema import PlanReason


def apply_plan(
    partition: PartitionState, segments: Sequence[Segment], plan: PartitionPlan
) -> tuple[PartitionState, list[Segment]]:
    """What the world looks like after a plan was executed: planned segments are
    DELETE_SEGMENT_FINISHED and the log start offset is the plan's."""
    gone = plan.segment_ids
    after = [
        dataclasses.replace(s, state=RemoteSegmentState.DELETE_SEGMENT_FINISHED)
        if s.segment_id in gone
        else s
        for s in segments
    ]
    return dataclasses.replace(partition, log_start_offset=plan.new_log_start_offset), after


NOW = 1_700_000_000_000
HOUR = 3_600_000


@st.composite
def partitions(draw, wellformed: bool = False):
    """A tiered partition: contiguous segments over a lineage, DSF/DSS at the front, maybe an
    upload in flight at the end. Unless ``wellformed``, also stale uploads, unknown epochs and
    overlaps."""
    n = draw(st.integers(0, 25))
    records = draw(st.integers(1, 50))
    n_epochs = draw(st.integers(1, 4))
    epoch_starts = sorted(draw(st.sets(st.integers(1, max(1, n - 1)), max_size=n_epochs - 1)))
    bounds = [0, *epoch_starts]
    lineage = tuple((e * 2, b * records) for e, b in enumerate(bounds))
    segs = []
    dead = draw(st.integers(0, n))
    retry = draw(st.integers(0, n - dead))
    for i in range(n):
        epoch = max(e for e, b in enumerate(bounds) if b <= i) * 2
        state = RemoteSegmentState.COPY_SEGMENT_FINISHED
        if i < dead:
            state = RemoteSegmentState.DELETE_SEGMENT_FINISHED
        elif i < dead + retry:
            state = RemoteSegmentState.DELETE_SEGMENT_STARTED
        event = NOW - draw(st.integers(0, 3 * HOUR))
        epochs = ((epoch, i * records),)
        start, end = i * records, i * records + records - 1
        if not wellformed and draw(st.booleans()):
            choice = draw(st.integers(0, 2))
            if choice == 0:
                state = RemoteSegmentState.COPY_SEGMENT_STARTED
            elif choice == 1:
                epochs = ((epoch + 1, i * records),)
            else:
                start = max(0, start - records // 2)
        segs.append(
            Segment(
                segment_id=f"s{i}",
                start_offset=start,
                end_offset=end,
                max_timestamp_ms=NOW - (n - i) * draw(st.integers(1, HOUR)),
                size_bytes=draw(st.integers(0, 5000)),
                leader_epochs=epochs,
                state=state,
                event_timestamp_ms=event,
            )
        )
    if n and dead + retry < n and draw(st.booleans()):
        segs[-1] = dataclasses.replace(
            segs[-1], state=RemoteSegmentState.COPY_SEGMENT_STARTED, event_timestamp_ms=NOW - 1000
        )
    lso = (dead + retry) * records
    head = [
        (e, max(b, lso))
        for i, (e, b) in enumerate(lineage)
        if i + 1 == len(lineage) or lineage[i + 1][1] > lso
    ]
    part = PartitionState(
        log_start_offset=lso,
        log_end_offset=n * records + draw(st.integers(0, 100)),
        leader_epochs=tuple(head),
        retention_ms=draw(st.sampled_from([-1, HOUR, 10 * HOUR, 0])),
        retention_bytes=draw(st.one_of(st.just(-1), st.integers(0, 60_000))),
        local_untiered_bytes=draw(st.integers(0, 5000)),
    )
    return part, segs


def _counted(part, segs):
    lineage = filtered_leader_epochs(part.leader_epochs)
    return part.local_untiered_bytes + sum(
        s.size_bytes
        for s in segs
        if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
        and is_within_leader_epochs(s, part.log_end_offset, lineage)
    )


@settings(max_examples=300, deadline=None)
@given(partitions())
def test_never_deletes_what_kafka_keeps(data):
    """Every planned segment has a Kafka reason that holds for it on its own."""
    part, segs = data
    plan = plan_retention(part, segs, NOW)
    lineage = filtered_leader_epochs(part.leader_epochs)
    earliest = min((e for e, _ in part.leader_epochs), default=None)
    for d in plan.deletions:
        s = d.segment
        assert s.state != RemoteSegmentState.DELETE_SEGMENT_FINISHED
        if d.reason == PlanReason.DELETE_RETRY:
            assert s.state == RemoteSegmentState.DELETE_SEGMENT_STARTED
        elif d.reason == PlanReason.RETENTION_TIME:
            # isSegmentBreachedByRetentionTime: maxTimestampMs <= now - retention.ms
            assert part.retention_ms >= 0 and NOW - s.max_timestamp_ms >= part.retention_ms
            assert is_within_leader_epochs(s, part.log_end_offset, lineage)
        elif d.reason == PlanReason.RETENTION_SIZE:
            assert part.retention_bytes >= 0
            assert is_within_leader_epochs(s, part.log_end_offset, lineage)
        elif d.reason == PlanReason.LOG_START_OFFSET:
            assert s.end_offset < part.log_start_offset
            assert all(e <= next(iter(lineage)) for e, _ in s.leader_epochs)
        elif d.reason == PlanReason.UNREFERENCED:
            assert all(e < earliest for e, _ in s.leader_epochs)
        else:
            raise AssertionError(d.reason)
        # An upload in flight is never judged by retention (only the unreferenced sweep may
        # take one, as Kafka's does).
        if d.reason in PlanReason.MOVES_LOG_START:
            assert not (
                s.state == RemoteSegmentState.COPY_SEGMENT_STARTED
                and NOW - s.event_timestamp_ms < 3_600_000
            )
    assert plan.new_log_start_offset >= part.log_start_offset


@settings(max_examples=300, deadline=None)
@given(partitions())
def test_size_deletions_never_go_below_retention_bytes(data):
    part, segs = data
    plan = plan_retention(part, segs, NOW)
    by_size = [d.segment for d in plan.deletions if d.reason == PlanReason.RETENTION_SIZE]
    if not by_size:
        return
    by_time = [d.segment for d in plan.deletions if d.reason == PlanReason.RETENTION_TIME]
    counted = _counted(part, segs)
    remaining = counted - sum(s.size_bytes for s in by_time) - sum(s.size_bytes for s in by_size)
    assert remaining >= part.retention_bytes


@settings(max_examples=300, deadline=None)
@given(partitions(wellformed=True))
def test_second_run_plans_nothing(data):
    """Applying a plan (segments DELETE_SEGMENT_FINISHED, log start offset published) and planning
    again deletes nothing, for the partitions Kafka itself converges on in one pass (contiguous,
    inside the lineage, no dead uploads: see rules.py for the cases Kafka needs two passes)."""
    part, segs = data
    plan = plan_retention(part, segs, NOW)
    after_part, after_segs = apply_plan(part, segs, plan)
    again = plan_retention(after_part, after_segs, NOW)
    assert again.deletions == []
    assert again.new_log_start_offset == plan.new_log_start_offset
