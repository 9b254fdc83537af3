"""Partition I/O on the leader: produce (with KIP-253's undeleted_partition_count check), fetch
(local, or from the remote tier below the local log start), the high watermark, roll, and
OffsetsForLeaderEpoch.

Also the leader's log start offset, advanced by DeleteRecords or by the Spark retention job.

:class:`PartitionIO` is a part of :class:`broker_agent.simulator.broker.Broker`.
"""

from __future__ import annotations

import time

from broker_agent.contract.choices import ErrorCode, TopicConfig
from broker_agent.contract.errors import ApiError
from broker_agent.simulator.broker.state import (
    BrokerCore,
    Replica,
    _now_ms,
    _storage_error,
    update_high_watermark,
)
from broker_agent.simulator.broker.tiering import Tiering
from broker_agent.simulator.remote import RemoteStorageError, RemoteStore, is_readable
from broker_agent.simulator.storage import Batch, StorageError, decode_batches, encode_batch

__all__ = ["PartitionIO"]


class PartitionIO:
    """Produce, fetch and the other leader-side partition calls of one broker (module
    docstring). It keeps no state of its own: it reads the broker's ``core`` (replicas,
    topics), the ``remote`` store below the local log start, and ``tiering`` for the epoch
    below which remote segments are fenced."""

    def __init__(self, core: BrokerCore, *, remote: RemoteStore, tiering: Tiering):
        self.core = core
        self.remote = remote
        self.tiering = tiering

    def _leader(self, topic: str, partition: int) -> Replica:
        r = self.core.replicas.get((topic, partition))
        if r is None:
            if topic not in self.core.topics:
                raise ApiError(
                    404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
                )
            raise ApiError(
                409,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.core.broker_id} has no replica",
            )
        if r.log is None:
            raise ApiError(
                503, ErrorCode.KAFKA_STORAGE_ERROR, "replica is offline (log dir failed)"
            )
        if r.leader != self.core.broker_id:
            raise ApiError(
                409,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leader of {topic}-{partition} is {r.leader}",
            )
        return r

    def produce(self, req) -> dict:
        """Leader append. acks=all waits until the ISR has the batch (HW past it). Idempotent:
        a batch whose (producer_id, base_sequence) is already in the log is not appended again.
        KIP-253 (:meth:`_check_partition_count`, under the replica's lock so the batch carries the
        leader epoch of the count it was checked against): on a topic with ordered delivery a
        produce must name the undeleted_partition_count and it must be the leader's; a partition
        marked for deletion (or >= the count) accepts nothing, whatever the topic's setting."""
        r = self._leader(req.topic, req.partition)
        t = self.core.topics.get(req.topic, {})
        configs = t.get("configs", {})
        min_isr = int(configs.get(TopicConfig.MIN_INSYNC_REPLICAS, "1"))
        if req.acks == -1 and len(r.isr) < min_isr:
            raise ApiError(
                503, ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR {r.isr} < min.insync {min_isr}"
            )
        now = _now_ms()
        plog = r.log
        duplicate = False
        with r.cond:
            self._check_partition_count(r, req.undeleted_partition_count, producing=True)
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
                update_high_watermark(r, self.core.broker_id)
        self.core.notify_data()
        if req.acks == -1:
            deadline = time.monotonic() + req.timeout_ms / 1000
            with r.cond:
                while True:
                    if r.log is not plog or r.leader != self.core.broker_id:
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

    @staticmethod
    def _check_partition_count(r: Replica, count: int | None, *, producing: bool) -> None:
        """KIP-253 "Changes in how broker handles ProduceRequest" and consumer step 6.

        - Producing into a partition marked for deletion, or at or above the count, is refused
          with INVALID_PARTITION_METADATA whatever ``enable.ordered.delivery`` says: a partition
          waiting to be drained must not grow (decided here; the seed only has producers stop
          hashing to it).
        - With ordered delivery, a count that is not the leader's is INVALID_PARTITION_METADATA
          (the client refreshes metadata and retries), and a produce without a count is
          INVALID_REQUEST: the leader could not tell which leader epoch its records belong to.
        - A fetch or OffsetsForLeaderEpoch that names a count is checked the same way, so a
          consumer's answer comes from a leader that has applied the same partition change.
        """
        u = r.undeleted_partition_count
        if producing and (r.marked_for_deletion or (u is not None and r.partition >= u)):
            raise ApiError(
                409,
                ErrorCode.INVALID_PARTITION_METADATA,
                f"{r.topic}-{r.partition} is marked for deletion and accepts no records "
                "(KIP-253): refresh metadata and retry",
            )
        if not r.ordered_delivery:
            return
        if count is None:
            if producing:
                raise ApiError(
                    400,
                    ErrorCode.INVALID_REQUEST,
                    f"{r.topic} has enable.ordered.delivery=true: a produce must send "
                    "undeleted_partition_count (KIP-253)",
                )
            return
        if count != u:
            raise ApiError(
                409,
                ErrorCode.INVALID_PARTITION_METADATA,
                f"undeleted_partition_count {count} != the leader's {u}: refresh metadata and "
                "retry",
            )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        undeleted_partition_count: int | None = None,
    ) -> dict:
        """Consumer fetch from the leader, up to the high watermark. Below the local log start
        offset it reads readable remote segments (KIP-405); below the log start offset it is
        OFFSET_OUT_OF_RANGE. A count, when given, must be the leader's (KIP-253 consumer step 6)."""
        r = self._leader(topic, partition)
        with r.cond:
            self._check_partition_count(r, undeleted_partition_count, producing=False)
        plog = r.log
        hw = plog.high_watermark
        leo = plog.log_end_offset
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
            "log_end_offset": leo,
            "log_start_offset": lso,
            "local_log_start_offset": local_start,
            "remote_records": remote_records,
        }

    def _read_remote(self, r: Replica, offset: int) -> list[Batch]:
        purge = self.tiering.purge_below_tiered_epoch(r.topic)
        try:
            segments = self.remote.segments(r.topic, r.topic_id, r.partition)
        except RemoteStorageError as exc:
            raise ApiError(503, ErrorCode.KAFKA_STORAGE_ERROR, f"remote store: {exc}") from None
        for seg in segments:
            if seg["start_offset"] <= offset <= seg["end_offset"]:
                if not is_readable(seg, purge, r.log.log_start_offset):
                    continue
                try:
                    data = self.remote.read_object(seg)
                except FileNotFoundError:
                    continue
                except RemoteStorageError as exc:
                    raise ApiError(
                        503, ErrorCode.KAFKA_STORAGE_ERROR, f"remote store: {exc}"
                    ) from None
                return [b for _, b in decode_batches(data) if b.last_offset >= offset]
        raise ApiError(
            416,
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is below the local log start and no readable remote segment holds it",
            log_start_offset=r.log.log_start_offset,
        )

    def offsets_for_leader_epoch(
        self, topic: str, partition: int, epoch: int, undeleted_partition_count: int | None = None
    ) -> dict:
        """OffsetsForLeaderEpoch: the largest epoch <= ``epoch`` and its end offset. With a count
        (KIP-253 consumers), the leader must hold that count, so an expansion's or a shrink's
        epoch bump is already in its epoch cache and the answer is final."""
        r = self._leader(topic, partition)
        with r.cond:
            self._check_partition_count(r, undeleted_partition_count, producing=False)
            e, end = r.log.end_offset_for_epoch(epoch)
        return {"leader_epoch": e, "end_offset": end}

    def roll(self, topic: str, partition: int) -> dict:
        r = self._leader(topic, partition)
        r.log.maybe_roll()
        return {"topic": topic, "partition": partition, "segments": len(r.log.segments)}

    def publish_log_start_offset(self, topic: str, partition: int, offset: int) -> dict:
        """Advance the log start offset (DeleteRecords / the Spark retention job publishing
        before deleting). Never beyond the high watermark; never backwards (no-op)."""
        r = self._leader(topic, partition)
        plog = r.log
        if offset > plog.high_watermark:
            raise ApiError(
                416,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{offset} is above the high watermark {plog.high_watermark}",
            )
        plog.advance_log_start_offset(offset)
        return {"topic": topic, "partition": partition, "log_start_offset": plog.log_start_offset}
