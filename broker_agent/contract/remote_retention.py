"""The remote-retention rules that the agent's own expiration and the Spark retention job share.

Kafka's ``RemoteLogManager.RLMExpirationTask`` (``core/src/main/java/kafka/log/remote/
RemoteLogManager.java``) decides, per remote segment, whether it is inside the partition's
leader-epoch lineage and whether retention.ms has run out. Both the agent
(:mod:`broker_agent.simulator.broker.tiering`, internal expiration) and the Spark planners
(``spark_tasks.rules`` and ``spark_tasks.vector_rules``, external expiration) call these
functions, so the two expiration modes cannot drift apart. Standard library only: it ships to the
Spark executors in the job zip (``spark_tasks.submit``, with :mod:`broker_agent.contract.choices`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

from broker_agent.contract.choices import RemoteSegmentState, TopicConfig

__all__ = [
    "epoch_map",
    "expired_by_time",
    "filtered_leader_epochs",
    "plan_expiration",
    "retention_cleanup_until",
    "segment_within_leader_epochs",
    "validate_local_retention",
]


def validate_local_retention(configs: dict[str, str]) -> None:
    """Kafka's ``LogConfig.validateRemoteStorageRetentionSize`` / ``...RetentionTime`` on a
    topic's configs (the topic's own, unset ones at their defaults), applied only when
    ``remote.storage.enable=true``: with ``retention.bytes`` above -1, ``local.retention.bytes``
    may be -2 (use retention.bytes) but not -1 nor more than ``retention.bytes``; with
    ``retention.ms`` not -1, the same for ``local.retention.ms``. Raises ``ValueError`` with
    Kafka's ``ConfigException`` message (the controller answers INVALID_CONFIG)."""

    def value(name: str) -> int:
        return int(configs.get(name, TopicConfig.DEFAULTS[name]))

    if configs.get(TopicConfig.REMOTE_STORAGE_ENABLE, "false") != "true":
        return
    for total, local, unlimited in (
        (TopicConfig.RETENTION_BYTES, TopicConfig.LOCAL_RETENTION_BYTES, False),
        (TopicConfig.RETENTION_MS, TopicConfig.LOCAL_RETENTION_MS, True),
    ):
        limit, local_limit = value(total), value(local)
        applies = limit != -1 if unlimited else limit > -1
        if not applies or local_limit == -2:
            continue
        if local_limit == -1:
            raise ValueError(
                f"Invalid value -1 for configuration {local}: Value must not be -1 as {total} "
                f"value is set as {limit}."
            )
        if local_limit > limit:
            raise ValueError(
                f"Invalid value {local_limit} for configuration {local}: Value must not be more "
                f"than {total} property value: {limit}"
            )


def retention_cleanup_until(now_ms: int, retention_ms: int) -> int | None:
    """Kafka's ``buildRetentionTimeData``: the cut-off ``now - retention.ms``, or ``None`` when
    time retention does not apply (``retention.ms = -1``, or a cut-off before the epoch, which
    Kafka's ``RetentionTimeData`` refuses)."""
    if retention_ms > -1 and now_ms - retention_ms >= 0:
        return now_ms - retention_ms
    return None


def expired_by_time(max_timestamp_ms: Any, cleanup_until: int) -> Any:
    """Kafka's ``RemoteLogRetentionHandler.isSegmentBreachedByRetentionTime``: a remote segment
    has expired when ``maxTimestampMs <= cleanupUntilMs``, i.e. ``now - max_timestamp >=
    retention.ms`` - a segment exactly retention.ms old goes. (Local retention,
    ``UnifiedLog.deleteRetentionMsBreachedSegments``, is strict instead: ``now - largestTimestamp >
    retentionMs``.) Works on an int or, element-wise, on a numpy array of timestamps."""
    return max_timestamp_ms <= cleanup_until


def epoch_map(entries: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Epoch -> start offset, sorted by epoch; a repeated epoch keeps its last offset (TreeMap.put)."""
    out: dict[int, int] = {}
    for epoch, offset in entries:
        out[int(epoch)] = int(offset)
    return dict(sorted(out.items()))


def filtered_leader_epochs(entries: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Kafka's ``buildFilteredLeaderEpochMap``: drop epochs that hold no records.

    Of consecutive epochs sharing a start offset, only the last one holds records.
    """
    items = list(epoch_map(entries).items())
    out: dict[int, int] = {}
    for i, (epoch, offset) in enumerate(items):
        if i + 1 < len(items) and items[i + 1][1] == offset:
            continue
        out[epoch] = offset
    return out


def segment_within_leader_epochs(
    leader_epochs: Iterable[tuple[int, int]],
    end_offset: int,
    log_end_offset: int,
    lineage: dict[int, int],
) -> bool:
    """Kafka's ``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs`` on a filtered lineage
    (:func:`filtered_leader_epochs` of the partition's leader-epoch cache).

    The segment's (filtered) epochs from the first one at or after the lineage's first epoch must
    be lineage epochs; that first one may not start before its lineage offset unless it is the
    lineage's first epoch; every epoch but the segment's last must be followed by the same (epoch,
    offset) entry in both maps; the segment may not run past the start of the lineage epoch after
    its last; and its end offset must be below the log end offset.
    """
    if not lineage:
        return False
    seg = filtered_leader_epochs(leader_epochs)
    if not seg:
        return False
    lin_epochs = list(lineage)
    seg_epochs = list(seg)
    first_lineage, last_lineage = lin_epochs[0], lin_epochs[-1]
    seg_last = seg_epochs[-1]
    if seg_last < first_lineage or seg_last > last_lineage:
        return False
    idx = bisect.bisect_left(seg_epochs, first_lineage)
    if idx == len(seg_epochs):
        return False
    seg_first = seg_epochs[idx]
    for pos in range(idx, len(seg_epochs)):
        epoch = seg_epochs[pos]
        offset = seg[epoch]
        if epoch not in lineage:
            return False
        lpos = bisect.bisect_left(lin_epochs, epoch)
        if epoch == seg_first and lpos > 0 and offset < lineage[epoch]:
            return False
        if epoch == seg_last:
            if lpos + 1 < len(lin_epochs):
                next_start = lineage[lin_epochs[lpos + 1]]
                if end_offset > next_start - 1:
                    return False
        else:
            lin_next = lin_epochs[lpos + 1]
            seg_next = seg_epochs[pos + 1]
            if lin_next != seg_next or lineage[lin_next] != seg[seg_next]:
                return False
    return end_offset < log_end_offset


def _epochs(seg: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    return tuple((e["epoch"], e["start_offset"]) for e in seg["segment_leader_epochs"])


def plan_expiration(
    segments: Sequence[dict[str, Any]],
    *,
    log_start_offset: int,
    log_end_offset: int,
    leader_epochs: Iterable[tuple[int, int]],
    retention_ms: int,
    retention_bytes: int,
    local_untiered_bytes: int,
    now_ms: int,
    purge_below_tiered_epoch: int = 0,
) -> list[dict[str, Any]]:
    """The agent's own expiration pass (internal mode): the remote segments (metadata records)
    it deletes now, oldest first - Kafka's ``RLMExpirationTask.cleanupExpiredRemoteLogSegments``
    with the rules the Spark planner applies (``spark_tasks.rules``, DESIGN "Remote retention").

    Only segments at or above the delete-policy fence count (fenced ones are the purge's). A
    COPY_SEGMENT_STARTED segment is being copied and stops the scan; otherwise the log start offset,
    lineage (:func:`segment_within_leader_epochs`), time (:func:`expired_by_time`) and size rules
    apply in DESIGN's order, and the first segment kept stops the scan. An empty lineage plans
    nothing, as in Kafka. The caller publishes the new log start offset before deleting anything.
    """
    lineage = filtered_leader_epochs(leader_epochs)
    if not lineage:
        return []
    first_epoch = next(iter(lineage))
    live = sorted(
        (
            s
            for s in segments
            if s["tiered_epoch"] >= purge_below_tiered_epoch
            and s["state"]
            in (RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED)
        ),
        key=lambda s: (s["start_offset"], s["end_offset"], s["segment_id"]),
    )
    valid = {
        s["segment_id"]: s["state"] == RemoteSegmentState.COPY_SEGMENT_FINISHED
        and segment_within_leader_epochs(_epochs(s), s["end_offset"], log_end_offset, lineage)
        for s in live
    }
    breach = 0
    if retention_bytes >= 0:
        counted = local_untiered_bytes + sum(
            s["size_bytes"] for s in live if valid[s["segment_id"]]
        )
        breach = max(0, counted - retention_bytes)
    cleanup_until = retention_cleanup_until(now_ms, retention_ms)
    doomed: list[dict[str, Any]] = []
    for seg in live:
        if seg["state"] == RemoteSegmentState.COPY_SEGMENT_STARTED:
            break
        if seg["end_offset"] < log_start_offset and all(e <= first_epoch for e, _ in _epochs(seg)):
            doomed.append(seg)
        elif not valid[seg["segment_id"]]:
            continue
        elif cleanup_until is not None and expired_by_time(seg["max_timestamp_ms"], cleanup_until):
            doomed.append(seg)
            breach = max(0, breach - seg["size_bytes"])
        elif breach > 0 and breach - seg["size_bytes"] >= 0:
            doomed.append(seg)
            breach -= seg["size_bytes"]
        else:
            break
    return doomed
