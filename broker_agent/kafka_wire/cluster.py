"""Metadata and DescribeCluster, answered from the broker's metadata cache (what it applied
last from the controller), as a Kafka broker answers from its ``MetadataCache``: a broker that
has not caught up answers what it knows.

Kafka 3.9 (KRaft) rules: only live brokers with the listener are listed (rack ``null``); the
controller id is a live broker id (KRaft hides the quorum; here the lowest, stable between
calls); topics are never auto-created (UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID); a
partition without a live leader is LEADER_NOT_AVAILABLE with leader -1. A sim topic id (22 hex
digits) is on the wire the UUID those digits start, zero-filled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import kafka.errors as Errors
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from broker_agent.contract.models import is_internal_topic
from broker_agent.kafka_wire.api import Api, row_of

__all__ = ["APIS", "controller_id", "live_brokers", "topic_uuid"]


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The wire topic id of a sim topic id (22 hex digits, zero-filled to 128 bits)."""
    try:
        return uuid.UUID(hex=(topic_id + "0" * 32)[:32])
    except ValueError:
        return uuid.UUID(int=0)


def live_brokers(broker) -> list[tuple[int, str, int]]:
    """``(id, host, port)`` of the live brokers with a Kafka listener, by id."""
    out = []
    for b in broker.cluster_brokers:
        listener = b.get("kafka_listener")
        if b.get("alive") and listener:
            host, _, port = listener.rpartition(":")
            out.append((b["broker_id"], host, int(port)))
    return sorted(out)


def controller_id(brokers: list[tuple[int, str, int]]) -> int:
    return brokers[0][0] if brokers else -1


P = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
#: A partition's answer as :func:`_partition` makes it (:func:`~.api.row_of`'s names).
P_ROW = (
    *("error_code", "partition_index", "leader_id", "leader_epoch"),
    *("replica_nodes", "isr_nodes", "offline_replicas"),
)


def _partition(part: dict, live: set[int]) -> tuple:
    """The partition's answer, as :data:`P_ROW`."""
    leader = part["leader"]
    error = 0
    if leader < 0 or leader not in live:
        leader, error = -1, Errors.LeaderNotAvailableError.errno
    return (
        *(error, part["partition"], leader, part["leader_epoch"]),
        *(list(part["replicas"]), list(part["isr"]), list(part.get("offline_replicas", []))),
    )


def _topic(
    t: dict | None,
    name: str | None,
    tid: uuid.UUID | None,
    live: set[int],
    row: Callable[[tuple], tuple],
    error=0,
):
    T = MetadataResponse.MetadataResponseTopic
    if t is None:
        return T(
            error_code=error,
            name=name,
            topic_id=tid,
            is_internal=False,
            partitions=[],
        )
    return T(
        error_code=0,
        name=t["name"],
        topic_id=topic_uuid(t["topic_id"]),
        is_internal=is_internal_topic(t["name"]),
        partitions=[row(_partition(p, live)) for p in t["partitions"]],
    )


def _metadata(broker, request, version):
    with broker.lock:
        topics = dict(broker.topics)
        brokers = live_brokers(broker)
    live = {b[0] for b in brokers}
    row = row_of(P, version, P_ROW)
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        answer = [_topic(t, None, None, live, row) for _, t in sorted(topics.items())]
    else:
        by_id = {topic_uuid(t["topic_id"]): t for t in topics.values()}
        answer = []
        for w in wanted:
            tid = getattr(w, "topic_id", None)
            if w.name is None and tid is not None and tid.int != 0:
                t = by_id.get(tid)
                err = Errors.UnknownTopicIdError.errno
                answer.append(_topic(t, None, tid, live, row, err))
            else:
                t = topics.get(w.name)
                err = Errors.UnknownTopicOrPartitionError.errno
                answer.append(_topic(t, w.name, None, live, row, err))
    B = MetadataResponse.MetadataResponseBroker
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[B(node_id=i, host=h, port=p, rack=None) for i, h, p in brokers],
        cluster_id=broker.cluster_id,
        controller_id=controller_id(brokers),
        topics=answer,
    )


def _describe_cluster(broker, request, version):
    with broker.lock:
        brokers = live_brokers(broker)
    error, message = 0, None
    if version >= 1 and request.endpoint_type != 1:  # 1 = BROKER, 2 = CONTROLLER
        error = Errors.UnsupportedEndpointTypeError.errno
        message = "The target broker only supports broker endpoint type"
    B = DescribeClusterResponse.DescribeClusterBroker
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=controller_id(brokers),
        brokers=[] if error else [B(broker_id=i, host=h, port=p, rack=None) for i, h, p in brokers],
    )


APIS = {
    ApiKey.Metadata: Api(MetadataRequest, MetadataResponse, 0, 12, _metadata),
    ApiKey.DescribeCluster: Api(
        DescribeClusterRequest, DescribeClusterResponse, 0, 1, _describe_cluster
    ),
}
