"""``vector_rules.plan_retention_columns`` is ``rules.plan_retention`` (or declines, ``None``).

Random partitions from the property tests' generator, plus shapes that stress the vector path:
unreferenced segments below the epoch cache, ties in start offset, stale uploads, a fence, nulls,
and segments outside the single-epoch domain (multi-epoch, empty epoch list, duplicate ids),
where the vector planner must decline.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.plan_job import segments_from_table
from spark_tasks.rules import PartitionState, Segment, plan_retention
from spark_tasks.schema import INVENTORY_SCHEMA
from spark_tasks.vector_rules import plan_retention_columns
from tests.spark_tasks.kafka_cases import CASES
from tests.spark_tasks.test_retention_properties import HOUR, NOW, partitions


def _table(segs: list[Segment]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "cluster": "c",
                "topic": "t",
                "topic_id": "x",
                "partition": 0,
                "segment_id": s.segment_id,
                "start_offset": s.start_offset,
                "end_offset": s.end_offset,
                "max_timestamp_ms": s.max_timestamp_ms,
                "size_bytes": s.size_bytes,
                "segment_leader_epochs": [
                    {"epoch": e, "start_offset": o} for e, o in s.leader_epochs
                ],
                "tiered_epoch": s.tiered_epoch,
                "state": s.state,
                "object_path": s.object_path,
                "event_timestamp_ms": s.event_timestamp_ms,
            }
            for s in segs
        ],
        schema=INVENTORY_SCHEMA,
    )


def _check(part: PartitionState, segs: list[Segment], in_flight_ms: int = HOUR) -> bool:
    """Assert equality when the vector planner answers; return whether it did."""
    table = _table(segs)
    expected = plan_retention(part, segments_from_table(table), NOW, in_flight_ms)
    got = plan_retention_columns(part, table, NOW, in_flight_ms)
    if got is None:
        return False
    ids = table.column("segment_id").to_pylist()
    assert [(ids[i], r) for i, r in zip(got.rows, got.reasons, strict=True)] == [
        (d.segment.segment_id, d.reason) for d in expected.deletions
    ]
    assert got.new_log_start_offset == expected.new_log_start_offset
    return True


@st.composite
def stressed(draw):
    part, segs = draw(partitions())
    segs = list(segs)
    lineage = part.leader_epochs
    if draw(st.booleans()) and lineage:
        # Unclean election: older epochs below the cache's earliest, some DSS among them.
        low = lineage[0][0] - draw(st.integers(1, 3))
        for j in range(draw(st.integers(1, 4))):
            segs.append(
                Segment(
                    segment_id=f"u{j}",
                    start_offset=draw(st.integers(0, 200)),
                    end_offset=draw(st.integers(200, 400)),
                    max_timestamp_ms=NOW - draw(st.integers(0, 20 * HOUR)),
                    size_bytes=draw(st.integers(0, 5000)),
                    leader_epochs=((low - draw(st.integers(0, 2)), 0),),
                    state=draw(st.sampled_from(RemoteSegmentState.ALL)),
                    event_timestamp_ms=NOW - draw(st.integers(0, 3 * HOUR)),
                )
            )
    if segs and draw(st.booleans()):
        # Ties: a copy of a segment with the same offsets and another id.
        src = draw(st.sampled_from(segs))
        segs.append(dataclasses.replace(src, segment_id=src.segment_id + "-b"))
    if segs and draw(st.booleans()):
        # A fence: some segments tiered below it.
        part = dataclasses.replace(part, purge_below_tiered_epoch=1)
        segs = [dataclasses.replace(s, tiered_epoch=draw(st.integers(0, 2))) for s in segs]
    draw(st.randoms()).shuffle(segs)
    return part, segs


@settings(max_examples=400, deadline=None)
@given(stressed(), st.sampled_from([0, HOUR, 10 * HOUR]))
def test_vector_planner_equals_pure_planner(data, in_flight_ms):
    part, segs = data
    _check(part, segs, in_flight_ms)


@settings(max_examples=100, deadline=None)
@given(partitions(wellformed=True))
def test_vector_planner_answers_wellformed_partitions(data):
    part, segs = data
    assert _check(part, segs) or not part.leader_epochs


def test_vector_planner_on_kafka_cases():
    for case in CASES:
        _check(case.partition, list(case.segments))


def test_vector_planner_declines_outside_its_domain():
    part = PartitionState(log_start_offset=0, log_end_offset=1000, leader_epochs=((0, 0), (1, 500)))
    one = Segment("a", 0, 99, NOW, 10, ((0, 0),))
    assert _check(part, [one])
    two_epochs = Segment("b", 400, 599, NOW, 10, ((0, 400), (1, 500)))
    assert not _check(part, [one, two_epochs])
    no_epochs = Segment("c", 100, 199, NOW, 10, ())
    assert not _check(part, [one, no_epochs])
    assert not _check(part, [one, dataclasses.replace(one, start_offset=100)])  # duplicate id
    assert not _check(dataclasses.replace(part, leader_epochs=()), [one])
    # Outside the domain only among DELETE_SEGMENT_FINISHED segments: still answered.
    dead = dataclasses.replace(two_epochs, state=RemoteSegmentState.DELETE_SEGMENT_FINISHED)
    assert _check(part, [one, dead])


def test_vector_planner_maps_nulls_like_segments_from_table():
    part = PartitionState(
        log_start_offset=0,
        log_end_offset=1000,
        leader_epochs=((0, 0),),
        retention_bytes=0,
    )
    table = _table(
        [Segment("a", 0, 99, NOW, 10, ((0, 0),)), Segment("b", 100, 199, NOW, 7, ((0, 100),))]
    )
    for name in ("size_bytes", "event_timestamp_ms", "tiered_epoch", "object_path"):
        i = table.schema.get_field_index(name)
        nulled = table.set_column(i, name, pa.nulls(2, table.schema.field(name).type))
        expected = plan_retention(part, segments_from_table(nulled), NOW)
        got = plan_retention_columns(part, nulled, NOW)
        assert got is not None
        assert [nulled["segment_id"][i].as_py() for i in got.rows] == [
            d.segment.segment_id for d in expected.deletions
        ]
        assert got.new_log_start_offset == expected.new_log_start_offset
    nulled = table.set_column(
        table.schema.get_field_index("start_offset"),
        "start_offset",
        pa.array([0, None], pa.int64()),
    )
    assert plan_retention_columns(part, nulled, NOW) is None
