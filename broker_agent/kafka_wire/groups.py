"""Consumer groups over Kafka's protocol: FindCoordinator, ListGroups, OffsetFetch.

Kafka's coordinator leads partition ``abs(groupId.hashCode()) % 50`` of ``__consumer_offsets``;
the simulated cluster has no such topic, so every broker computes the same coordinator from its
metadata (the live broker at ``partition % live brokers``), which answers from the controller's
group store (:mod:`broker_agent.simulator.groups`); any other broker answers NOT_COORDINATOR, as Kafka.
A transaction key is COORDINATOR_NOT_AVAILABLE (no transaction coordinator); ListGroups gives
``Stable`` / ``Empty`` with Kafka's case-insensitive filter (v4+); OffsetFetch gives -1 where
nothing is committed and no error for an unknown group, as Kafka.
"""

from __future__ import annotations

import httpx
import kafka.errors as Errors
from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker_agent.contract.client import AgentError
from broker_agent.kafka_wire.api import Api
from broker_agent.kafka_wire.cluster import live_brokers

__all__ = ["APIS", "OFFSETS_TOPIC_PARTITIONS", "coordinator", "coordinator_among", "java_hash"]

#: Kafka's ``offsets.topic.num.partitions`` default.
OFFSETS_TOPIC_PARTITIONS = 50


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit signed)."""
    h = 0
    for unit in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator(broker, group_id: str) -> tuple[int, str, int] | None:
    """``(id, host, port)`` of the group's coordinator, or ``None`` with no live broker."""
    return coordinator_among(live_brokers(broker), group_id)


def coordinator_among(
    brokers: list[tuple[int, str, int]], group_id: str
) -> tuple[int, str, int] | None:
    """:func:`coordinator` among ``brokers`` (:func:`.cluster.live_brokers`), for a caller that
    places many groups at once (the synthetic fleet's 20,000)."""
    if not brokers:
        return None
    partition = (java_hash(group_id) & 0x7FFFFFFF) % OFFSETS_TOPIC_PARTITIONS
    return brokers[partition % len(brokers)]


def _find_coordinator(broker, request, version):
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    found = []
    for key in keys:
        node, error, message = None, 0, None
        if request.key_type != 0:  # 1: transaction
            error = Errors.CoordinatorNotAvailableError.errno
            message = "no transaction coordinator in the simulated cluster"
        else:
            node = coordinator(broker, key)
            if node is None:
                error = Errors.CoordinatorNotAvailableError.errno
                message = "no live broker"
        found.append((key, node or (-1, "", -1), error, message))
    if version >= 4:
        Co = FindCoordinatorResponse.Coordinator
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                Co(key=k, node_id=n[0], host=n[1], port=n[2], error_code=e, error_message=m)
                for k, n, e, m in found
            ],
        )
    _k, n, e, m = found[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=e, error_message=m, node_id=n[0], host=n[1], port=n[2]
    )


def _groups(broker) -> list | None:
    try:
        return broker.controller.groups()
    except (AgentError, httpx.HTTPError):
        return None


def _list_groups(broker, request, version):
    views = _groups(broker)
    G = ListGroupsResponse.ListedGroup
    if views is None:
        return ListGroupsResponse(
            throttle_time_ms=0, error_code=Errors.CoordinatorNotAvailableError.errno, groups=[]
        )
    states = {s.lower() for s in (getattr(request, "states_filter", None) or [])}
    types = {s.lower() for s in (getattr(request, "types_filter", None) or [])}
    listed = []
    for g in views:
        node = coordinator(broker, g.group_id)
        if node is None or node[0] != broker.broker_id:
            continue
        state = "Stable" if g.members else "Empty"
        if version >= 4 and states and state.lower() not in states:
            continue
        if version >= 5 and types and "classic" not in types:
            continue
        listed.append(
            G(
                group_id=g.group_id,
                protocol_type="consumer",
                group_state=state,
                group_type="classic",
            )
        )
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=listed)


def _committed(broker, group_id: str, topics) -> tuple[int, list[tuple[str, list]]]:
    """``(error_code, [(topic, [(partition, offset)])])`` of one group."""
    node = coordinator(broker, group_id)
    if node is None:
        return Errors.CoordinatorNotAvailableError.errno, []
    if node[0] != broker.broker_id:
        return Errors.NotCoordinatorError.errno, []
    try:
        offsets = broker.controller.group(group_id).offsets
    except AgentError as exc:
        if exc.status != 404:
            return Errors.CoordinatorNotAvailableError.errno, []
        offsets = {}
    except httpx.HTTPError:
        return Errors.CoordinatorNotAvailableError.errno, []
    if topics is None:
        return 0, [(t, sorted(parts.items())) for t, parts in sorted(offsets.items())]
    return 0, [
        (t.name, [(p, offsets.get(t.name, {}).get(p, -1)) for p in t.partition_indexes])
        for t in topics
    ]


def _fetched(topic_cls, partition_cls, topics: list[tuple[str, list]]) -> list:
    """The response's topics; v2-v7 and v8 name their classes differently, same fields."""
    return [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=0,
                )
                for p, o in parts
            ],
        )
        for name, parts in topics
    ]


def _offset_fetch(broker, request, version):
    if version >= 8:
        G = OffsetFetchResponse.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        groups = []
        for g in request.groups:
            error, topics = _committed(broker, g.group_id, g.topics)
            groups.append(
                G(
                    group_id=g.group_id,
                    error_code=error,
                    topics=_fetched(T, T.OffsetFetchResponsePartitions, topics),
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    T = OffsetFetchResponse.OffsetFetchResponseTopic
    error, topics = _committed(broker, request.group_id, request.topics)
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=error,
        topics=_fetched(T, T.OffsetFetchResponsePartition, topics),
    )


APIS = {
    ApiKey.FindCoordinator: Api(
        FindCoordinatorRequest, FindCoordinatorResponse, 0, 4, _find_coordinator
    ),
    ApiKey.ListGroups: Api(ListGroupsRequest, ListGroupsResponse, 0, 5, _list_groups),
    ApiKey.OffsetFetch: Api(OffsetFetchRequest, OffsetFetchResponse, 2, 8, _offset_fetch),
}
