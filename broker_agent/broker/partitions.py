"""Partition I/O on the leader: produce (with KIP-253's undeleted_partition_count check), fetch
(local, or from the remote tier below the local log start), the high watermark, roll, and
OffsetsForLeaderEpoch.

A mixin of :class:`broker_agent.broker.Broker`; it uses the broker's ``replicas``, ``topics``,
``lock``, ``data_cond`` and ``remote``.
"""

from __future__ import annotations

import time

from broker_agent.broker.state import (
    Replica,
    _now_ms,
    _storage_error,
)
from broker_agent.choices import (
    ErrorCode,
    TopicConfig,
)
from broker_agent.remote import is_readable
from broker_agent.storage import (
    Batch,
    StorageError,
    decode_batches,
    encode_batch,
)
from broker_agent.web import ApiError

__all__ = ["PartitionIOMixin"]


class PartitionIOMixin:
    """Part of :class:`broker_agent.broker.Broker` (see the module docstring)."""

    def _leader(self, topic: str, partition: int) -> Replica:
        r = self.replicas.get((topic, partition))
        if r is None:
            if topic not in self.topics:
                raise ApiError(
                    404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
                )
            raise ApiError(
                409, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} has no replica"
            )
        if r.log is None:
            raise ApiError(
                503, ErrorCode.KAFKA_STORAGE_ERROR, "replica is offline (log dir failed)"
            )
        if r.leader != self.broker_id:
            raise ApiError(
                409,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leader of {topic}-{partition} is {r.leader}",
            )
        return r

    def _update_hw(self, r: Replica) -> None:
        """HW = min LEO over the ISR (monotonic); wakes acks=all producers."""
        plog = r.log
        if plog is None:
            return
        with r.cond:
            leo = plog.log_end_offset
            others = [r.follower_leo.get(b, 0) for b in r.isr if b != self.broker_id]
            hw = min([leo, *others])
            if hw > plog.high_watermark:
                plog.high_watermark = hw
                r.cond.notify_all()

    def produce(self, req) -> dict:
        """Leader append. acks=all waits until the ISR has the batch (HW past it). Idempotent:
        a batch whose (producer_id, base_sequence) is already in the log is not appended again.
        KIP-253: a producer whose undeleted_partition_count differs from the leader's is refused
        with INVALID_PARTITION_METADATA (unless enable.ordered.delivery=false)."""
        r = self._leader(req.topic, req.partition)
        t = self.topics.get(req.topic, {})
        configs = t.get("configs", {})
        ordered = configs.get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"
        if (
            ordered
            and req.undeleted_partition_count is not None
            and req.undeleted_partition_count != t.get("undeleted_partition_count")
        ):
            raise ApiError(
                409,
                ErrorCode.INVALID_PARTITION_METADATA,
                f"producer's undeleted_partition_count {req.undeleted_partition_count} != "
                f"{t.get('undeleted_partition_count')}: refresh metadata and retry",
            )
        min_isr = int(configs.get(TopicConfig.MIN_INSYNC_REPLICAS, "1"))
        if req.acks == -1 and len(r.isr) < min_isr:
            raise ApiError(
                503, ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR {r.isr} < min.insync {min_isr}"
            )
        now = _now_ms()
        plog = r.log
        duplicate = False
        with r.cond:
            dup = (
                plog.find_duplicate(req.producer_id, req.base_sequence)
                if req.producer_id >= 0
                else None
            )
            if dup is not None:
                base, last = dup
                duplicate = True
            else:
                batch = encode_batch(
                    [
                        (
                            None if x.key is None else x.key.encode(),
                            x.value.encode(),
                            x.timestamp_ms or now,
                        )
                        for x in req.records
                    ],
                    leader_epoch=r.leader_epoch,
                    producer_id=req.producer_id,
                    base_sequence=req.base_sequence,
                )
                try:
                    plog.append(batch, assign_offsets=True)
                except StorageError as exc:
                    raise _storage_error(exc, req.topic, req.partition) from None
                base, last = batch.base_offset, batch.last_offset
                self._update_hw(r)
        with self.data_cond:
            self.data_cond.notify_all()
        if req.acks == -1:
            deadline = time.monotonic() + req.timeout_ms / 1000
            with r.cond:
                while True:
                    if r.log is not plog or r.leader != self.broker_id:
                        raise ApiError(409, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership moved")
                    if plog.high_watermark > last:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ApiError(504, ErrorCode.REQUEST_TIMED_OUT, "ISR did not acknowledge")
                    r.cond.wait(min(remaining, 0.5))
        return {
            "topic": req.topic,
            "partition": req.partition,
            "base_offset": base,
            "log_end_offset": plog.log_end_offset,
            "high_watermark": plog.high_watermark,
            "duplicate": duplicate,
        }

    def fetch(self, topic: str, partition: int, offset: int, max_records: int) -> dict:
        """Consumer fetch from the leader, up to the high watermark. Below the local log start
        offset it reads readable remote segments (KIP-405); below the log start offset it is
        OFFSET_OUT_OF_RANGE."""
        r = self._leader(topic, partition)
        plog = r.log
        hw = plog.high_watermark
        lso, local_start = plog.log_start_offset, plog.local_log_start_offset
        if offset < lso or offset > hw:
            raise ApiError(
                416,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [{lso}, {hw}]",
                log_start_offset=lso,
                high_watermark=hw,
            )
        records: list[dict] = []
        remote_records = 0
        if offset < local_start:
            batches = self._read_remote(r, offset)
            remote_records = -1
        else:
            try:
                batches = plog.read(offset, 1 << 20, upper=hw)
            except StorageError as exc:
                raise _storage_error(exc, topic, partition) from None
        for b in batches:
            for rec in b.records():
                if rec.offset < offset or rec.offset >= hw:
                    continue
                records.append(
                    {
                        "offset": rec.offset,
                        "timestamp_ms": rec.timestamp_ms,
                        "key": None if rec.key is None else rec.key.decode(errors="replace"),
                        "value": rec.value.decode(errors="replace"),
                    }
                )
                if len(records) >= max_records:
                    break
            if len(records) >= max_records:
                break
        if remote_records == -1:
            remote_records = len(records)
        nxt = records[-1]["offset"] + 1 if records else offset
        return {
            "topic": topic,
            "partition": partition,
            "records": records,
            "next_offset": nxt,
            "high_watermark": hw,
            "log_start_offset": lso,
            "local_log_start_offset": local_start,
            "remote_records": remote_records,
        }

    def _read_remote(self, r: Replica, offset: int) -> list[Batch]:
        tier = self.tiering.get(r.topic, {})
        purge = tier.get("purge_below_tiered_epoch", 0)
        for seg in self.remote.segments(r.topic, r.topic_id, r.partition):
            if seg["start_offset"] <= offset <= seg["end_offset"]:
                if not is_readable(seg, purge, r.log.log_start_offset):
                    continue
                try:
                    data = self.remote.read_object(seg)
                except FileNotFoundError:
                    continue
                return [b for _, b in decode_batches(data) if b.last_offset >= offset]
        raise ApiError(
            416,
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is below the local log start and no readable remote segment holds it",
            log_start_offset=r.log.log_start_offset,
        )

    def offsets_for_leader_epoch(self, topic: str, partition: int, epoch: int) -> dict:
        r = self._leader(topic, partition)
        e, end = r.log.end_offset_for_epoch(epoch)
        return {"leader_epoch": e, "end_offset": end}

    def roll(self, topic: str, partition: int) -> dict:
        r = self._leader(topic, partition)
        r.log.maybe_roll()
        return {"topic": topic, "partition": partition, "segments": len(r.log.segments)}
