"""Retention cases built from Kafka's own RemoteLogManager tests (each names the test it mirrors).

Used twice: against the pure planner (``test_retention_rules.py``) and, all at once, one partition
per case, against a real ``spark-submit`` of ``retention --dry-run``
(``test_retention_spark.py``).
"""

from __future__ import annotations

import dataclasses

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.rules import PartitionState, Segment
from spark_tasks.schema import PlanReason

NOW = 1_700_000_000_000
HOUR = 3_600_000
R = PlanReason
S = RemoteSegmentState


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    mirrors: str
    partition: PartitionState
    segments: tuple[Segment, ...]
    expected: dict[str, str]  # segment_id -> reason
    expected_lso: int
    now_ms: int = NOW


def truncated_epochs(lineage, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """Kafka's test helper ``truncateAndGetLeaderEpochs``: the lineage entries covering
    [start, end], the first one moved up to ``start``."""
    out: list[tuple[int, int]] = []
    for i, (epoch, offset) in enumerate(lineage):
        nxt = lineage[i + 1][1] if i + 1 < len(lineage) else None
        if offset > end or (nxt is not None and nxt <= start):
            continue
        out.append((epoch, max(offset, start)))
    return tuple(out)


def kafka_segments(
    count, records, size, lineage, ts=NOW, prefix="s", state=S.COPY_SEGMENT_FINISHED
):
    """Kafka's test helper ``listRemoteLogSegmentMetadata``: ``count`` contiguous segments."""
    return [
        Segment(
            segment_id=f"{prefix}{i:03d}",
            start_offset=i * records,
            end_offset=i * records + records - 1,
            max_timestamp_ms=ts,
            size_bytes=size,
            leader_epochs=truncated_epochs(lineage, i * records, i * records + records - 1),
            state=state,
            event_timestamp_ms=ts,
        )
        for i in range(count)
    ]


KAFKA_LINEAGE = ((0, 0), (1, 20), (3, 50), (4, 100))


def _size_breach(deletable: int) -> Case:
    segs = kafka_segments(50, 100, 1024, KAFKA_LINEAGE)
    part = PartitionState(
        log_start_offset=0,
        log_end_offset=50 * 100 + 1,
        leader_epochs=KAFKA_LINEAGE,
        retention_ms=-1,
        retention_bytes=(50 - deletable) * 1024 + 512,
        local_untiered_bytes=512,
    )
    return Case(
        f"size_breach_{deletable}",
        f"RemoteLogManagerTest.testDeleteLogSegmentDueToRetentionSizeBreach(50, {deletable})",
        part,
        tuple(segs),
        {s.segment_id: R.RETENTION_SIZE for s in segs[:deletable]},
        deletable * 100 if deletable else 0,
    )


def _time_breach(deletable: int) -> Case:
    """As Kafka's test: retention.ms = 1, the deletable segments 1 ms old (``maxTimestampMs <=
    now - retention.ms`` holds with equality), the others 0 ms old."""
    segs = [
        dataclasses.replace(s, max_timestamp_ms=NOW - 1) if i < deletable else s
        for i, s in enumerate(kafka_segments(50, 100, 1024, KAFKA_LINEAGE))
    ]
    part = PartitionState(
        log_start_offset=0,
        log_end_offset=50 * 100 + 1,
        leader_epochs=KAFKA_LINEAGE,
        retention_ms=1,
        retention_bytes=-1,
        local_untiered_bytes=512,
    )
    return Case(
        f"time_breach_{deletable}",
        f"RemoteLogManagerTest.testDeleteLogSegmentDueToRetentionTimeBreach(50, {deletable})",
        part,
        tuple(segs),
        {s.segment_id: R.RETENTION_TIME for s in segs[:deletable]},
        deletable * 100 if deletable else 0,
    )


def build_cases() -> list[Case]:
    cases = [_size_breach(d) for d in (0, 1, 23, 50)]
    cases += [_time_breach(d) for d in (0, 1, 23, 50)]

    e0 = ((0, 0),)
    # Kafka's segments carry time.milliseconds(): with retention.ms = 0 they expire at once,
    # because a remote segment goes when maxTimestampMs <= now - retention.ms.
    two = kafka_segments(2, 100, 1024, e0, ts=NOW)
    for size, ms in ((0, -1), (-1, 0)):
        reason = R.RETENTION_SIZE if size == 0 else R.RETENTION_TIME
        cases.append(
            Case(
                f"breached_bytes{size}_ms{ms}".replace("-", "m"),
                f"RemoteLogManagerTest.testDeletionOnRetentionBreachedSegments({size}, {ms})",
                PartitionState(0, 200, e0, retention_ms=ms, retention_bytes=size),
                tuple(two),
                {s.segment_id: reason for s in two},
                200,
            )
        )

    # Cancelled delete: the first segment went through, the new leader deletes the second.
    first, second = kafka_segments(2, 100, 1024, e0, ts=NOW)
    cases.append(
        Case(
            "cancelled_delete",
            "RemoteLogManagerTest.testDeleteRetentionMsBeingCancelledBeforeSecondDelete",
            PartitionState(100, 200, e0, retention_ms=0),
            (dataclasses.replace(first, state=S.DELETE_SEGMENT_FINISHED), second),
            {second.segment_id: R.RETENTION_TIME},
            200,
        )
    )

    # Failed delete: a DELETE_SEGMENT_STARTED left behind is deleted again, scan goes on.
    segs = kafka_segments(3, 100, 1024, e0)
    segs[0] = dataclasses.replace(segs[0], state=S.DELETE_SEGMENT_STARTED)
    segs[1] = dataclasses.replace(segs[1], max_timestamp_ms=NOW - 2 * HOUR)
    cases.append(
        Case(
            "failed_delete_retry",
            "RemoteLogManager.cleanupExpiredRemoteLogSegments: DELETE_SEGMENT_STARTED retry "
            "path (RemoteLogManagerTest failed-delete cases)",
            PartitionState(100, 400, e0, retention_ms=HOUR),
            tuple(segs),
            {segs[0].segment_id: R.DELETE_RETRY, segs[1].segment_id: R.RETENTION_TIME},
            200,
        )
    )

    # Already deleted: DELETE_SEGMENT_FINISHED neither planned nor counted for size.
    segs = kafka_segments(4, 100, 1000, e0)
    segs[0] = dataclasses.replace(segs[0], state=S.DELETE_SEGMENT_FINISHED)
    segs[1] = dataclasses.replace(segs[1], state=S.DELETE_SEGMENT_FINISHED)
    cases.append(
        Case(
            "already_deleted_ignored",
            "RemoteLogManagerTest.testStopPartitionsWithDeletion (DELETE_SEGMENT_FINISHED "
            "listings) / RemoteLogMetadataCache drops finished deletes",
            PartitionState(0, 500, e0, retention_bytes=2000),
            tuple(segs),
            {},
            0,
        )
    )

    # Copy-started filtering: COPY_SEGMENT_STARTED never counts toward the size.
    segs = kafka_segments(3, 100, 1000, e0)
    segs[2] = dataclasses.replace(
        segs[2], state=S.COPY_SEGMENT_STARTED, event_timestamp_ms=NOW - 2 * HOUR
    )
    cases.append(
        Case(
            "copy_started_not_counted",
            "RemoteLogManager.calculateMetadataAndSize / buildRetentionSizeData: only "
            "COPY_SEGMENT_FINISHED counts (RemoteLogManagerTest remote-size cases)",
            PartitionState(0, 400, e0, retention_bytes=2000),
            tuple(segs),
            {},
            0,
        )
    )

    # Segments being copied: an upload in flight stops the scan.
    segs = kafka_segments(3, 100, 1024, e0, ts=NOW - 2 * HOUR)
    segs[1] = dataclasses.replace(
        segs[1], state=S.COPY_SEGMENT_STARTED, event_timestamp_ms=NOW - 60_000
    )
    cases.append(
        Case(
            "segment_being_copied_stops_scan",
            "RemoteLogManagerTest deletion skipped for segmentIdsBeingCopied",
            PartitionState(0, 400, e0, retention_ms=HOUR),
            tuple(segs),
            {segs[0].segment_id: R.RETENTION_TIME},
            100,
        )
    )
    # ... and an old COPY_SEGMENT_STARTED (a dead upload) is judged like a finished one.
    segs2 = [dataclasses.replace(s, segment_id="o" + s.segment_id) for s in segs]
    segs2[1] = dataclasses.replace(segs2[1], event_timestamp_ms=NOW - 2 * HOUR)
    cases.append(
        Case(
            "stale_copy_started_judged",
            "RemoteLogManager.cleanupExpiredRemoteLogSegments (not in segmentIdsBeingCopied)",
            PartitionState(0, 400, e0, retention_ms=HOUR),
            tuple(segs2),
            {s.segment_id: R.RETENTION_TIME for s in segs2},
            300,
        )
    )

    # Overlapping segments after a leader election (Kafka's own example).
    lineage = ((7, 51), (9, 100))
    seg1 = Segment("ov1", 14, 150, NOW - 2 * HOUR, 1024, ((5, 14), (7, 15), (9, 100)))
    seg5 = Segment("ov5", 151, 180, NOW, 1024, ((9, 151),))
    cases.append(
        Case(
            "overlapping_segments",
            "RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochsForOverlappingSegments",
            PartitionState(51, 210, lineage, retention_ms=HOUR),
            (seg1, seg5),
            {"ov1": R.RETENTION_TIME},
            151,
        )
    )

    # Outside the lineage: skipped without stopping the scan.
    lin = ((0, 0), (1, 100), (2, 200))
    a = Segment("in0", 0, 99, NOW - 2 * HOUR, 10, ((0, 0),))
    x = Segment("out", 50, 120, NOW - 2 * HOUR, 10, ((0, 50), (5, 60)))
    b = Segment("in1", 100, 199, NOW - 2 * HOUR, 10, ((1, 100),))
    c = Segment("in2", 200, 299, NOW, 10, ((2, 200),))
    cases.append(
        Case(
            "outside_lineage_skipped",
            "RemoteLogManagerTest.testRemoteSegmentWithinLeaderEpochs (segmentEpochs6: epoch "
            "missing from the lineage) in the expiration scan",
            PartitionState(0, 300, lin, retention_ms=HOUR),
            (a, x, b, c),
            {"in0": R.RETENTION_TIME, "in1": R.RETENTION_TIME},
            200,
        )
    )

    # Log start offset breach after DeleteRecords: the epoch cache is truncated at 150.
    d0 = Segment("d0", 0, 99, NOW, 10, ((0, 0),))
    d1 = Segment("d1", 100, 199, NOW, 10, ((0, 100),))
    cases.append(
        Case(
            "log_start_offset_breach",
            "DeleteSegmentsDueToLogStartOffsetBreachTest (tiered-storage integration) / "
            "RemoteLogRetentionHandler.isSegmentBreachByLogStartOffset",
            PartitionState(150, 300, ((0, 150),)),
            (d0, d1),
            {"d0": R.LOG_START_OFFSET},
            150,
        )
    )

    # Unclean leader election: remote epochs below the leader's earliest epoch are swept.
    u0 = Segment("u0", 0, 99, NOW, 10, ((1, 0),))
    u1 = Segment("u1", 100, 199, NOW, 10, ((3, 100),))
    cases.append(
        Case(
            "unreferenced_sweep",
            "RemoteLogRetentionHandler.deleteLogSegmentsDueToLeaderEpochCacheTruncation",
            PartitionState(100, 300, ((3, 100),)),
            (u0, u1),
            {"u0": R.UNREFERENCED},
            100,
        )
    )
    return cases


CASES = build_cases()
