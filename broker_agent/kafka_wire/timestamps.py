"""ListOffsets by time (Kafka 3.9's ``UnifiedLog.fetchOffsetByTimestamp``), on the leader's
own log:

- a timestamp ``t >= 0``: the first record (offset at or above the log start) whose timestamp is
  ``>= t``, with that record's timestamp and its batch's leader epoch. A tiered topic's remote
  segments are searched first (``RemoteLogManager.findOffsetByTimestamp``: the first readable
  segment whose max timestamp is ``>= t``, read from the store), then the local log. Nothing
  found, or only at or above the high watermark (a consumer may not see it yet): offset -1,
  timestamp -1.
- ``-3`` MAX_TIMESTAMP (KIP-734): the record with the highest timestamp in the local log (the
  first such record), with the latest leader epoch.

Returns ``(error_code, timestamp, offset, leader_epoch)``.
"""

from __future__ import annotations

import kafka.errors as Errors

from broker_agent.simulator.remote import RemoteStorageError, is_readable
from broker_agent.simulator.storage import decode_batches

__all__ = ["max_timestamp", "offset_for_timestamp"]

NOT_FOUND = (0, -1, -1, -1)


def _first_at_or_after(batches, target: int, floor: int, hw: int):
    for b in batches:
        if b.max_timestamp_ms < target:
            continue
        for rec in b.records():
            if rec.offset < floor or rec.timestamp_ms < target:
                continue
            if rec.offset >= hw:
                return NOT_FOUND
            return 0, rec.timestamp_ms, rec.offset, b.leader_epoch
    return None


def _remote(broker, r, target: int, lso: int, hw: int):
    purge = broker.tiering.purge_below_tiered_epoch(r.topic)
    segments = broker.remote.segments(r.topic, r.topic_id, r.partition)
    for seg in sorted(segments, key=lambda s: s["start_offset"]):
        if seg["max_timestamp_ms"] < target or not is_readable(seg, purge, lso):
            continue
        try:
            data = broker.remote.read_object(seg)
        except FileNotFoundError:  # expired meanwhile
            continue
        found = _first_at_or_after(
            (b for _, b in decode_batches(data)), target, max(lso, seg["start_offset"]), hw
        )
        if found is not None:
            return found
    return None


def offset_for_timestamp(broker, r, target: int, remote_enabled: bool):
    plog = r.log
    with plog.lock:
        lso, hw = plog.log_start_offset, plog.high_watermark
        entries = [e for s in plog.segments for e in s.entries]
    if remote_enabled:
        try:
            found = _remote(broker, r, target, lso, hw)
        except RemoteStorageError:
            return Errors.KafkaStorageError.errno, -1, -1, -1
        if found is not None:
            return found
    for e in entries:
        if e.max_timestamp_ms < target or e.last_offset < lso:
            continue
        found = _first_at_or_after(plog.read(e.base_offset, 1, upper=hw), target, lso, hw)
        if found is not None:
            return found
    return NOT_FOUND


def max_timestamp(r):
    plog = r.log
    with plog.lock:
        entries = [e for s in plog.segments for e in s.entries]
        epoch = plog.latest_epoch
    if not entries:
        return NOT_FOUND
    best = max(entries, key=lambda e: e.max_timestamp_ms)  # max() keeps the first of equals
    for b in plog.read(best.base_offset, 1):
        for rec in b.records():
            if rec.timestamp_ms == best.max_timestamp_ms:
                return 0, rec.timestamp_ms, rec.offset, epoch
    return NOT_FOUND
