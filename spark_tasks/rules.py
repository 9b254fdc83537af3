"""Per-partition planning: which remote segments go, and the new log start offset.

Pure Python (no Spark, no Django), so every Kafka rule is unit-testable; the Spark jobs apply
these functions one partition at a time. Retention follows Kafka's
``RemoteLogManager.RLMExpirationTask.cleanupExpiredRemoteLogSegments`` (KIP-405) segment for
segment, as DESIGN.md "Remote retention" states it. Where Kafka cannot help, this code decides:
a COPY_SEGMENT_STARTED segment younger than ``in_flight_ms`` is taken as being copied and stops
the scan (a job cannot see ``segmentIdsBeingCopied``); ties in scan order break by end offset,
then segment id; the unreferenced sweep compares with the *unfiltered* epoch cache's earliest
entry; a segment with an empty leader-epoch map is never planned (errs on keeping data).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.remote_retention import (
    epoch_map,
    expired_by_time,
    filtered_leader_epochs,
    retention_cleanup_until,
    segment_within_leader_epochs,
)
from spark_tasks.schema import PlanReason

__all__ = [
    "DEFAULT_IN_FLIGHT_MS",
    "PartitionPlan",
    "PartitionState",
    "PlannedDeletion",
    "Segment",
    "filtered_leader_epochs",
    "is_within_leader_epochs",
    "plan_purge",
    "plan_retention",
]

DEFAULT_IN_FLIGHT_MS = 3_600_000

EpochEntries = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Segment:
    """One remote segment's metadata (a row of the inventory)."""

    segment_id: str
    start_offset: int
    end_offset: int  # inclusive
    max_timestamp_ms: int
    size_bytes: int
    leader_epochs: EpochEntries  # (epoch, start_offset) pairs
    state: str = RemoteSegmentState.COPY_SEGMENT_FINISHED
    event_timestamp_ms: int = 0
    tiered_epoch: int = 0
    object_path: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's state (a row of the partition-state input)."""

    log_start_offset: int
    log_end_offset: int
    leader_epochs: EpochEntries
    retention_ms: int = -1
    retention_bytes: int = -1
    local_untiered_bytes: int = 0
    local_log_start_offset: int = 0
    disable_policy: str | None = None
    purge_below_tiered_epoch: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedDeletion:
    segment: Segment
    reason: str


@dataclasses.dataclass(slots=True)
class PartitionPlan:
    deletions: list[PlannedDeletion]
    new_log_start_offset: int

    @property
    def segment_ids(self) -> set[str]:
        return {d.segment.segment_id for d in self.deletions}

    @property
    def bytes_deleted(self) -> int:
        return sum(d.segment.size_bytes for d in self.deletions)


_as_map = epoch_map  # kept for vector_rules


def is_within_leader_epochs(segment: Segment, log_end_offset: int, lineage: dict[int, int]) -> bool:
    """Kafka's ``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs`` on a filtered lineage: the
    one rule the agent's own expiration applies too
    (:func:`broker_agent.contract.remote_retention.segment_within_leader_epochs`)."""
    return segment_within_leader_epochs(
        segment.leader_epochs, segment.end_offset, log_end_offset, lineage
    )


def plan_retention(
    partition: PartitionState,
    segments: Sequence[Segment],
    now_ms: int,
    in_flight_ms: int = DEFAULT_IN_FLIGHT_MS,
) -> PartitionPlan:
    """Plan one partition's remote retention as Kafka's RLMExpirationTask would (see module doc)."""
    lso = partition.log_start_offset
    # Segments fenced by a delete-policy disablement (tiered_epoch below the fence) are the purge
    # job's: unreadable, never counted for size, never moving the log start offset here.
    fence = partition.purge_below_tiered_epoch or 0
    live = [
        s
        for s in segments
        if s.state != RemoteSegmentState.DELETE_SEGMENT_FINISHED and s.tiered_epoch >= fence
    ]
    if not live:
        return PartitionPlan([], lso)

    lineage = filtered_leader_epochs(partition.leader_epochs)
    raw_epochs = _as_map(partition.leader_epochs)

    # listRemoteLogSegments(tp, epoch): segments whose epoch map holds ``epoch``, by start offset.
    by_epoch: dict[int, list[Segment]] = {}
    for seg in live:
        for epoch in {int(e) for e, _ in seg.leader_epochs}:
            by_epoch.setdefault(epoch, []).append(seg)
    for listed in by_epoch.values():
        listed.sort(key=lambda s: (s.start_offset, s.end_offset, s.segment_id))

    valid_cache: dict[str, bool] = {}

    def valid(seg: Segment) -> bool:
        hit = valid_cache.get(seg.segment_id)
        if hit is None:
            hit = is_within_leader_epochs(seg, partition.log_end_offset, lineage)
            valid_cache[seg.segment_id] = hit
        return hit

    # Size data (buildRetentionSizeData).
    breach: int | None = None
    if partition.retention_bytes >= 0 and lineage:
        finished = [s for s in live if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED]
        estimate = partition.local_untiered_bytes + sum(s.size_bytes for s in finished)
        if estimate > partition.retention_bytes:
            seen: set[str] = set()
            remote = 0
            for epoch in lineage:
                for seg in by_epoch.get(epoch, ()):
                    if (
                        seg.state != RemoteSegmentState.COPY_SEGMENT_FINISHED
                        or seg.segment_id in seen
                    ):
                        continue
                    seen.add(seg.segment_id)
                    if valid(seg):
                        remote += seg.size_bytes
            total = partition.local_untiered_bytes + remote
            if total > partition.retention_bytes:
                breach = total - partition.retention_bytes

    # Time data (buildRetentionTimeData).
    cleanup_until = retention_cleanup_until(now_ms, partition.retention_ms)

    remaining = breach if breach is not None else 0
    planned: dict[str, PlannedDeletion] = {}
    new_lso: int | None = None
    first_epoch = next(iter(lineage)) if lineage else None

    def plan(seg: Segment, reason: str) -> None:
        nonlocal new_lso
        planned.setdefault(seg.segment_id, PlannedDeletion(seg, reason))
        if reason in PlanReason.MOVES_LOG_START:
            candidate = seg.end_offset + 1
            new_lso = candidate if new_lso is None else max(new_lso, candidate)

    can_process = True
    for epoch in lineage:
        if not can_process:
            break
        for seg in by_epoch.get(epoch, ()):
            if not can_process:
                break
            if (
                seg.state == RemoteSegmentState.COPY_SEGMENT_STARTED
                and now_ms - seg.event_timestamp_ms < in_flight_ms
            ):
                can_process = False
                continue
            if seg.state == RemoteSegmentState.DELETE_SEGMENT_STARTED:
                plan(seg, PlanReason.DELETE_RETRY)
                continue
            if seg.segment_id in planned:
                continue
            delete = all(int(e) <= first_epoch for e, _ in seg.leader_epochs) and (
                seg.end_offset < partition.log_start_offset
            )
            is_valid = False
            if delete:
                plan(seg, PlanReason.LOG_START_OFFSET)
            else:
                is_valid = valid(seg)
                if is_valid:
                    if cleanup_until is not None and expired_by_time(
                        seg.max_timestamp_ms, cleanup_until
                    ):
                        delete = True
                        remaining = max(0, remaining - seg.size_bytes)
                        plan(seg, PlanReason.RETENTION_TIME)
                    elif breach is not None and remaining > 0 and remaining >= seg.size_bytes:
                        remaining -= seg.size_bytes
                        delete = True
                        plan(seg, PlanReason.RETENTION_SIZE)
            can_process = delete or not is_valid

    # Unreferenced sweep (deleteLogSegmentsDueToLeaderEpochCacheTruncation).
    if raw_epochs:
        earliest = next(iter(raw_epochs))
        for epoch in sorted(e for e in by_epoch if e < earliest):
            for seg in by_epoch[epoch]:
                if seg.segment_id in planned:
                    continue
                if all(int(e) < earliest for e, _ in seg.leader_epochs):
                    reason = (
                        PlanReason.DELETE_RETRY
                        if seg.state == RemoteSegmentState.DELETE_SEGMENT_STARTED
                        else PlanReason.UNREFERENCED
                    )
                    planned[seg.segment_id] = PlannedDeletion(seg, reason)

    final_lso = lso if new_lso is None else max(lso, new_lso)
    return PartitionPlan(list(planned.values()), final_lso)


def plan_purge(partition: PartitionState, segments: Sequence[Segment]) -> PartitionPlan:
    """KIP-950 ``delete`` policy: purge every segment tiered before the disablement's epoch.

    Applies to every partition with a ``purge_below_tiered_epoch`` above 0, whatever its current
    ``disable_policy``: the fence is set by a delete-policy disablement and outlives it — a
    re-enable (policy back to none) or a later retain-policy disablement does not make the fenced
    segments readable again, so they must still be purged (the simulated agents keep the epoch
    and clear the policy on re-enable). Every segment with ``tiered_epoch < purge_below_tiered_epoch``
    that is not DELETE_SEGMENT_FINISHED is planned (``purge_disabled``), whatever its state —
    KIP-950 makes them unreadable at once, so an upload in flight below the epoch is garbage too.
    Segments of the current epoch or later are never touched. The new log start offset is at least
    the local log start offset (KIP-950: the log start offset moves to the local log start), or
    the first COPY_SEGMENT_FINISHED segment at or above the fence when that is lower.
    """
    lso = partition.log_start_offset
    below = partition.purge_below_tiered_epoch
    if not below or below <= 0:
        return PartitionPlan([], lso)
    deletions = [
        PlannedDeletion(s, PlanReason.PURGE_DISABLED)
        for s in segments
        if s.tiered_epoch < below and s.state != RemoteSegmentState.DELETE_SEGMENT_FINISHED
    ]
    # The log start offset moves up to the local log start (KIP-950), but never past a readable
    # segment tiered at or after the fence (a purge after a re-enable must not cut those off).
    floor = partition.local_log_start_offset
    for s in segments:
        if s.tiered_epoch >= below and s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED:
            floor = min(floor, s.start_offset)
    return PartitionPlan(deletions, max(lso, floor))
