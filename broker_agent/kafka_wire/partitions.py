"""CreatePartitions and ElectLeaders: forwarded, as a KRaft broker does, to the (simulated)
controller, whose verdict is answered in Kafka's error codes.

CreatePartitions follows Kafka 3.9's ``ReplicationControlManager.createPartitions``: a name
given twice INVALID_REQUEST, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, a count that does not
grow (or a topic still draining a KIP-253 shrink) INVALID_PARTITIONS, too few live brokers
INVALID_REPLICATION_FACTOR, manual ``assignments`` INVALID_REQUEST (the controller places new
partitions itself), ``validate_only`` changes nothing. The simulated expansion is KIP-253's
(keys keep their order); a client sees the same new count as on Kafka. ElectLeaders (PREFERRED,
UNCLEAN) answers per partition as ``electLeaders`` does (:mod:`broker_agent.simulator.elections`); a
controller that does not answer: REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import urllib.parse

import kafka.errors as Errors
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from kafka.protocol.api_key import ApiKey

from broker_agent.kafka_wire.api import Api
from broker_agent.kafka_wire.forward import forward, kafka_errno

__all__ = ["APIS"]


def _create_one(broker, topic, validate_only: bool) -> tuple[int, str | None]:
    if topic.assignments is not None:
        return (
            Errors.InvalidRequestError.errno,
            "the simulated controller places new partitions itself: manual assignments are "
            "not supported",
        )
    code, message, _ = forward(
        broker,
        "POST",
        f"/v1/topics/{urllib.parse.quote(topic.name, safe='')}/partition-count",
        {
            "undeleted_partition_count": topic.count,
            "increase_only": True,
            "validate_only": validate_only,
        },
    )
    if code == Errors.UnknownTopicOrPartitionError.errno:
        message = None  # Kafka answers an unknown topic without a message
    return code, message


def _create_partitions(broker, request, _version):
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    names = [t.name for t in request.topics]
    results = []
    for topic in request.topics:
        if names.count(topic.name) > 1:
            code, message = Errors.InvalidRequestError.errno, "Duplicate topic name."
        elif not 1 <= topic.count <= 100_000:
            code = Errors.InvalidPartitionsError.errno
            message = f"The topic {topic.name} cannot have {topic.count} partition(s)."
        else:
            code, message = _create_one(broker, topic, bool(request.validate_only))
        results.append(R(name=topic.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def _elect_leaders(broker, request, version):
    asked = request.topic_partitions
    body = {
        "election_type": "UNCLEAN" if version >= 1 and request.election_type == 1 else "PREFERRED",
        "partitions": None
        if asked is None
        else [{"topic": t.topic, "partitions": list(t.partitions)} for t in asked],
    }
    code, message, answer = forward(broker, "POST", "/v1/partitions/elect-leaders", body)
    T = ElectLeadersResponse.ReplicaElectionResult
    P = T.PartitionResult
    if code:  # the controller refused the request or did not answer: every partition says so
        results = [
            T(
                topic=t.topic,
                partition_result=[
                    P(partition_id=p, error_code=code, error_message=message) for p in t.partitions
                ],
            )
            for t in asked or []
        ]
    else:
        results = [
            T(
                topic=t["topic"],
                partition_result=[
                    P(
                        partition_id=p["partition"],
                        error_code=kafka_errno(p["error"]),
                        error_message=p["message"],
                    )
                    for p in t["partitions"]
                ],
            )
            for t in answer["results"]
        ]
    top = code if code and asked is None else 0  # no partition to carry the error on
    return ElectLeadersResponse(
        throttle_time_ms=0, error_code=top, replica_election_results=results
    )


APIS = {
    ApiKey.CreatePartitions: Api(
        CreatePartitionsRequest, CreatePartitionsResponse, 0, 3, _create_partitions
    ),
    ApiKey.ElectLeaders: Api(ElectLeadersRequest, ElectLeadersResponse, 0, 2, _elect_leaders),
}
