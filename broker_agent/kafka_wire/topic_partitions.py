"""DescribeTopicPartitions (KIP-966, api key 75), answered from the broker's metadata cache as
Kafka 4.x's ``DescribeTopicPartitionsRequestHandler``: no topic named means every topic; topics
by name from the cursor on, at most ``min(response_partition_limit, 2000)`` partitions (Kafka's
``max.request.partition.size.limit``) with ``next_cursor`` at the first one left out; an
unknown named topic UNKNOWN_TOPIC_OR_PARTITION; a cursor topic the list lacks, or a negative
cursor partition, INVALID_REQUEST. Leaders, ISR and offline replicas are Metadata's.

ELR: the simulated controller keeps no eligible leader replicas. KIP-966 makes a replica
eligible when the ISR shrinks below ``min.insync.replicas`` while it was still in sync, and
drops it on an unclean shutdown; that needs each ISR change recorded with its cause, which the
controller does not keep (it only knows the current ISR, not who left it while in sync). So
the sim answers as a Kafka 4.x cluster with ``eligible.leader.replicas.version=0`` (4.0's
default): ELR and last known ELR empty for every partition, never invented from the ISR.
"""

from __future__ import annotations

import logging

import kafka.errors as Errors
from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kafka.protocol.api_key import ApiKey

from broker_agent.contract.models import is_internal_topic
from broker_agent.kafka_wire.api import Api
from broker_agent.kafka_wire.cluster import live_brokers, topic_uuid

__all__ = ["APIS", "MAX_PARTITIONS"]

log = logging.getLogger("broker_agent.kafka_wire")

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one answer holds.
MAX_PARTITIONS = 2000
#: ``topic_authorized_operations`` without an authorizer (Kafka answers every TOPIC operation
#: it supports): READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
#: as bits of their ``AclOperation`` codes 3-8, 10, 11.
TOPIC_OPERATIONS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))

R = DescribeTopicPartitionsResponse
T = R.DescribeTopicPartitionsResponseTopic
P = T.DescribeTopicPartitionsResponsePartition


def _partition(part: dict, live: set[int]):
    leader, error = part["leader"], 0
    if leader < 0 or leader not in live:
        leader, error = -1, Errors.LeaderNotAvailableError.errno
    return P(
        error_code=error,
        partition_index=part["partition"],
        leader_id=leader,
        leader_epoch=part["leader_epoch"],
        replica_nodes=list(part["replicas"]),
        isr_nodes=list(part["isr"]),
        eligible_leader_replicas=[],
        last_known_elr=[],
        offline_replicas=list(part.get("offline_replicas", [])),
    )


def _describe_topic_partitions(broker, request, _version):
    with broker.lock:
        topics = dict(broker.topics)
        live = {b[0] for b in live_brokers(broker)}
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    if cursor is not None and cursor.partition_index < 0:
        return _error_answer(request, f"cursor partition must be valid: {cursor}")
    named = [t.name for t in request.topics or []]
    if named:
        wanted = sorted({n for n in named if n >= start_topic})
        if cursor is not None and start_topic not in wanted:
            return _error_answer(
                request, f"topic list should contain the cursor topic: {start_topic}"
            )
    else:
        wanted = sorted(n for n in topics if n >= start_topic)
    limit = max(0, min(request.response_partition_limit, MAX_PARTITIONS))
    answer: list = []
    next_cursor = None
    for name in wanted:
        t = topics.get(name)
        if t is None:
            answer.append(
                T(
                    error_code=Errors.UnknownTopicOrPartitionError.errno,
                    name=name,
                    topic_id=topic_uuid(""),
                    is_internal=False,
                    partitions=[],
                    topic_authorized_operations=TOPIC_OPERATIONS,
                )
            )
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        parts = sorted(
            (p for p in t["partitions"] if p["partition"] >= first), key=lambda p: p["partition"]
        )
        if limit == 0 and parts:  # the answer is full: the next one starts at this topic
            next_cursor = (name, parts[0]["partition"])
            break
        taken = parts[:limit]
        limit -= len(taken)
        answer.append(
            T(
                error_code=0,
                name=name,
                topic_id=topic_uuid(t["topic_id"]),
                is_internal=is_internal_topic(name),
                partitions=[_partition(p, live) for p in taken],
                topic_authorized_operations=TOPIC_OPERATIONS,
            )
        )
        if len(parts) > len(taken):
            next_cursor = (name, parts[len(taken)]["partition"])
            break
    return R(
        throttle_time_ms=0,
        topics=answer,
        next_cursor=None
        if next_cursor is None
        else R.Cursor(topic_name=next_cursor[0], partition_index=next_cursor[1]),
    )


def _error_answer(request, message: str):
    """Kafka answers an invalid request (a bad cursor) with INVALID_REQUEST for each topic
    named, as ``AbstractRequest.getErrorResponse`` does; the message goes to its log only."""
    log.info("DescribeTopicPartitions refused: %s", message)
    return R(
        throttle_time_ms=0,
        topics=[
            T(
                error_code=Errors.InvalidRequestError.errno,
                name=t.name,
                topic_id=topic_uuid(""),
                is_internal=False,
                partitions=[],
                topic_authorized_operations=TOPIC_OPERATIONS,
            )
            for t in request.topics or []
        ],
        next_cursor=None,
    )


APIS = {
    ApiKey.DescribeTopicPartitions: Api(
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
        0,
        0,
        _describe_topic_partitions,
    ),
}
