"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), forwarded to the
simulated controller as a KRaft broker forwards them to the active controller; the controller
runs the reassignment (:mod:`broker_agent.simulator.reassignment`: adding replicas, their catch-up, the
removed replicas dropped once the target is in sync).

Per partition, Kafka's answers: INVALID_REPLICA_ASSIGNMENT (an empty target, a broker twice,
an unregistered broker, a cancel that would need an unclean election),
NO_REASSIGNMENT_IN_PROGRESS (cancelling none), UNKNOWN_TOPIC_OR_PARTITION. The list names the
partitions with a reassignment under way, their replicas and the ones being added and removed.
v0 of both, as Kafka 3.9 (v1 of AlterPartitionReassignments, KIP-860's
``allow_replication_factor_change``, came later). A controller that does not answer:
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.api_key import ApiKey

from broker_agent.kafka_wire.api import Api
from broker_agent.kafka_wire.forward import forward, kafka_errno

__all__ = ["APIS"]


def _alter(broker, request, _version):
    body = {
        "partitions": [
            {
                "topic": t.name,
                "partition": p.partition_index,
                "replicas": None if p.replicas is None else list(p.replicas),
            }
            for t in request.topics
            for p in t.partitions
        ]
    }
    code, message, answer = forward(broker, "POST", "/v1/partitions/reassignments", body)
    R = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
    P = R.ReassignablePartitionResponse
    if code:
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=code, error_message=message, responses=[]
        )
    by_topic: dict[str, list] = {}
    for row in answer["results"]:
        by_topic.setdefault(row["topic"], []).append(
            P(
                partition_index=row["partition"],
                error_code=kafka_errno(row["error"]),
                error_message=row["message"],
            )
        )
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        responses=[R(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def _list(broker, request, _version):
    asked = request.topics
    body = {
        "partitions": None
        if asked is None
        else [{"topic": t.name, "partitions": list(t.partition_indexes)} for t in asked]
    }
    code, message, answer = forward(broker, "POST", "/v1/partitions/reassignments/list", body)
    T = ListPartitionReassignmentsResponse.OngoingTopicReassignment
    P = T.OngoingPartitionReassignment
    if code:
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=code, error_message=message, topics=[]
        )
    by_topic: dict[str, list] = {}
    for row in answer["reassignments"]:
        by_topic.setdefault(row["topic"], []).append(
            P(
                partition_index=row["partition"],
                replicas=row["replicas"],
                adding_replicas=row["adding_replicas"],
                removing_replicas=row["removing_replicas"],
            )
        )
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


APIS = {
    ApiKey.AlterPartitionReassignments: Api(
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, 0, 0, _alter
    ),
    ApiKey.ListPartitionReassignments: Api(
        ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0, _list
    ),
}
