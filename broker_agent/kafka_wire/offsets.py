"""ListOffsets, answered by the partition's leader from its own log (Kafka's
``ReplicaManager.fetchOffset`` / ``UnifiedLog.fetchOffsetByTimestamp``, 3.9 semantics).

Checks in Kafka's order: unknown partition, replica on a failed dir (KAFKA_STORAGE_ERROR), not
the leader (NOT_LEADER_OR_FOLLOWER: only the leader serves a consumer's ListOffsets), leader
epoch (FENCED / UNKNOWN_LEADER_EPOCH). Specs: -2 log start (remote included), -1 high watermark
(no transactions here, so read_committed is the same), -4 local log start (KIP-405), -5 highest
offset in remote storage (KIP-1005; -1 when none or remote storage is off); a timestamp or -3
goes to :mod:`.timestamps`. Each answer carries the leader epoch of its offset.
"""

from __future__ import annotations

import kafka.errors as Errors
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from broker_agent.contract import kafka39
from broker_agent.contract.choices import TieredState
from broker_agent.kafka_wire import timestamps
from broker_agent.kafka_wire.api import Api, row_of
from broker_agent.simulator.remote import RemoteStorageError
from broker_agent.simulator.storage import StorageError

__all__ = ["APIS", "EARLIEST", "EARLIEST_LOCAL", "LATEST", "LATEST_TIERED", "epoch_for_offset"]

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5

T = ListOffsetsResponse.ListOffsetsTopicResponse
P = T.ListOffsetsPartitionResponse
#: A partition's answer as :func:`_partition` makes it, a topic's as :func:`_list_offsets`
#: does (:func:`~.api.row_of`'s names).
P_ROW = ("partition_index", "error_code", "timestamp", "offset", "leader_epoch")
T_ROW = ("name", "partitions")


def epoch_for_offset(leader_epochs: list[tuple[int, int]], offset: int) -> int:
    """The leader epoch whose range holds ``offset`` (Kafka's ``epochForOffset``): the last
    ``(epoch, start_offset)`` entry starting at or below it; -1 when none does."""
    epoch = -1
    for e, start in leader_epochs:
        if start > offset:
            break
        epoch = e
    return epoch


def _remote_enabled(broker, topic: str) -> bool:
    t = broker.topics.get(topic, {})
    tier = broker.tiering.states.get(topic, {})
    state = tier.get("state", t.get("tiered_state", TieredState.NONE))
    policy = tier.get("policy", t.get("disable_policy"))
    cfg = kafka39.configs_for_state(state, policy)
    return cfg[kafka39.REMOTE_STORAGE_ENABLE] == "true"


class _Topic:
    """What a request's topic needs of the broker's metadata, read once for all its requested
    partitions (a leader is asked for thousands of partitions of one topic at once): its
    partitions, and whether its remote storage is enabled, read when a spec first needs it.
    A metadata view that knows its partition numbers without building its entries has them as
    ``numbers`` (the synthetic fleet's)."""

    __slots__ = ("_broker", "_numbers", "_remote", "name", "partitions")

    def __init__(self, broker, name: str):
        self._broker, self.name = broker, name
        with broker.lock:
            t = broker.topics.get(name)
            self.partitions = None if t is None else t["partitions"]
            self._numbers = getattr(self.partitions, "numbers", None)
        self._remote: bool | None = None

    def has(self, partition: int) -> bool:
        """Whether the metadata lists ``partition``."""
        if self._numbers is not None:
            return partition in self._numbers
        return self.partitions is not None and _has_partition(self.partitions, partition)

    def remote_enabled(self) -> bool:
        if self._remote is None:
            self._remote = _remote_enabled(self._broker, self.name)
        return self._remote


def _offset(broker, r, spec: int, topic: _Topic) -> tuple[int, int, int, int]:
    """``(error_code, timestamp, offset, leader_epoch)`` of one partition's leader replica."""
    if spec >= 0:
        return timestamps.offset_for_timestamp(broker, r, spec, topic.remote_enabled())
    if spec == MAX_TIMESTAMP:
        return timestamps.max_timestamp(r)
    plog = r.log
    with plog.lock:
        if spec == LATEST:
            return 0, -1, plog.high_watermark, r.leader_epoch
        if spec == EARLIEST:
            offset = plog.log_start_offset
        elif spec == EARLIEST_LOCAL:
            offset = plog.local_log_start_offset
        elif spec == LATEST_TIERED:
            if not topic.remote_enabled():
                return 0, -1, -1, -1
            offset = None
        else:  # no other negative spec exists in Kafka 3.9
            return Errors.InvalidRequestError.errno, -1, -1, -1
        epochs = list(plog.leader_epochs)
    if offset is None:
        try:
            offset = broker.tiering.remote_log_end_offset(r)
        except RemoteStorageError:
            return Errors.KafkaStorageError.errno, -1, -1, -1
        if offset < 0:
            return 0, -1, -1, -1
    return 0, -1, offset, epoch_for_offset(epochs, offset)


def _has_partition(partitions, partition: int) -> bool:
    """Whether the metadata lists ``partition``. They are listed in partition order, so it is
    found at its own index first: a scan per requested partition would be quadratic in a
    10,000-partition topic (the synthetic fleet's) asked for all its offsets."""
    if 0 <= partition < len(partitions) and partitions[partition]["partition"] == partition:
        return True
    return any(p["partition"] == partition for p in partitions)


def _partition(broker, topic: _Topic, req) -> tuple[int, int, int, int, int]:
    """The partition's answer, as :data:`P_ROW`."""
    index = req.partition_index
    error, timestamp, offset, epoch = 0, -1, -1, -1
    with broker.lock:
        known = topic.has(index)
        r = broker.replicas.get((topic.name, index))
    if not known:
        error = Errors.UnknownTopicOrPartitionError.errno
    elif r is not None and r.log is None:
        error = Errors.KafkaStorageError.errno
    elif r is None or r.leader != broker.broker_id:
        error = Errors.NotLeaderForPartitionError.errno
    else:
        current = getattr(req, "current_leader_epoch", -1)
        leader_epoch = r.leader_epoch
        if current is not None and current >= 0 and current != leader_epoch:
            error = (
                Errors.FencedLeaderEpochError.errno
                if current < leader_epoch
                else Errors.UnknownLeaderEpochError.errno
            )
        else:
            try:
                error, timestamp, offset, epoch = _offset(broker, r, req.timestamp, topic)
            except (AttributeError, StorageError):  # the log's dir failed between the checks
                error = Errors.KafkaStorageError.errno
    return index, error, timestamp, offset, epoch


def _list_offsets(broker, request, version):
    row, topic_row = row_of(P, version, P_ROW), row_of(T, version, T_ROW)
    # A broker may answer a topic's partitions at once (the synthetic fleet's, whose leaders
    # are asked 400,000 partitions a first sync): the same checks and answers as
    # :func:`_partition`'s, or None to leave them to it.
    bulk = getattr(broker, "list_offsets", None)
    answers = []
    for t in request.topics:
        topic = _Topic(broker, t.name)
        rows = bulk(topic, t.partitions) if bulk is not None else None
        if rows is None:
            rows = [_partition(broker, topic, p) for p in t.partitions]
        answers.append(topic_row((t.name, [row(r) for r in rows])))
    return ListOffsetsResponse(throttle_time_ms=0, topics=answers)


APIS = {ApiKey.ListOffsets: Api(ListOffsetsRequest, ListOffsetsResponse, 1, 9, _list_offsets)}
