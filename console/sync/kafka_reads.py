"""The Kafka protocol calls of a sync of a ``kafka`` cluster, batched and sent concurrently.

:func:`read_cluster` answers everything a sync needs as plain dicts and tuples (a
200,000-partition answer is never a pydantic object per partition); :func:`read_groups` the
consumer groups and their committed offsets. The calls run as coroutines on kafka-python's
network thread: every request of a stage is sent before any answer is awaited, so brokers answer
in parallel. ListOffsets goes as one request per spec to each broker, since Kafka refuses a
partition named twice in one (INVALID_REQUEST); -4 / -5 only for topics that have or had remote
storage (:func:`remote_topics`). A broker whose own calls fail fails alone
(``ClusterRead.broker_errors``); a failed cluster-wide call fails the read.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from base64 import urlsafe_b64encode
from collections import defaultdict

import kafka.errors as Errors
from kafka.future import Future
from kafka.protocol.admin import (
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeTopicPartitionsRequest,
    ListGroupsRequest,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from broker_agent.contract import kafka39
from broker_agent.contract.choices import TieredState

__all__ = [
    "CONFIG_TOPICS_PER_REQUEST",
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "LATEST_TIERED",
    "OFFSET_SPECS",
    "REQUIRED_APIS",
    "BrokerRead",
    "ClusterRead",
    "UnsupportedApi",
    "read_cluster",
    "read_groups",
    "remote_topics",
    "uuid_text",
]

LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -4, -5
#: ListOffsets spec -> the lowest request version that has it (Kafka's ``ListOffsetsRequest``).
OFFSET_SPECS = {EARLIEST: 0, LATEST: 0, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
#: Topics per DescribeConfigs request (a fleet's topics in a few requests, not one each).
CONFIG_TOPICS_PER_REQUEST = 2000
#: Partitions per DescribeTopicPartitions answer: Kafka's ``max.request.partition.size.limit``
#: default, the most a broker answers at once (more follow its ``next_cursor``).
ELR_PARTITIONS_PER_REQUEST = 2000
#: What a sync cannot do without (ApiVersions of the bootstrap broker); DescribeCluster,
#: DescribeLogDirs, ListGroups and OffsetFetch are optional (Metadata stands in for the first;
#: without the second a broker's dirs are not available and its replicas come from Metadata
#: alone, as on Tansu; without the last two there are no groups).
REQUIRED_APIS = {
    ApiKey.Metadata: "Metadata",
    ApiKey.DescribeConfigs: "DescribeConfigs",
    ApiKey.ListOffsets: "ListOffsets",
}
#: The offset specs asked in a second round, after the others are in: a broker that
#: advertises ListOffsets v9 may still drop the connection on them (Tansu 0.6 does), which
#: must not cost the earliest and latest offsets asked on the same connection.
TIERED_SPECS = (EARLIEST_LOCAL, LATEST_TIERED)
TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type codes
DEFAULT_CONFIG = 5  # DescribeConfigsResponse.ConfigSource
READ_UNCOMMITTED = 0


class UnsupportedApi(Exception):
    """The cluster lacks an API (or version) the sync needs: Kafka's UNSUPPORTED_VERSION."""


def uuid_text(value: uuid.UUID | None) -> str:
    """Kafka's text form of a topic id (``Uuid.toString``: URL-safe base64, no padding)."""
    if value is None:
        return ""
    return urlsafe_b64encode(value.bytes).decode().rstrip("=")


@dataclasses.dataclass
class BrokerRead:
    """One broker's own answers: its log dirs, its configs and its leaders' offsets."""

    log_dirs: list | None = dataclasses.field(default_factory=list)
    """DescribeLogDirs results (kafka-python structs); None where the cluster has no
    DescribeLogDirs."""
    configs: dict[str, str] = dataclasses.field(default_factory=dict)
    offsets: dict[tuple[str, int], dict[int, int]] = dataclasses.field(default_factory=dict)
    """(topic, partition) -> spec -> offset, of the partitions this broker leads."""


@dataclasses.dataclass
class ClusterRead:
    cluster_id: str
    controller_id: int
    brokers: dict[int, tuple[str, int, str | None]]
    """Live brokers: id -> (host, port, rack)."""
    topics: list
    """Metadata topics (kafka-python structs), by name."""
    topic_configs: dict[str, dict[str, tuple[str, int]]]
    """topic -> config name -> (value, source)."""
    api_versions: dict[int, tuple[int, int]]
    per_broker: dict[int, BrokerRead]
    broker_errors: dict[int, str]
    tiered_offsets_refused: str | None = None
    """Why the -4 / -5 offsets could not be read although ListOffsets advertises them."""
    elr: dict[tuple[str, int], tuple[list[int], list[int]]] | None = None
    """KIP-966: (topic, partition) -> (eligible leader replicas, last known ELR) of the
    partitions with either, from DescribeTopicPartitions; None where the brokers lack it."""


def _error(code: int, message: str | None = None) -> Exception:
    err = Errors.for_code(code)
    return err(message) if message else err()


def _send(manager, request, node_id=None):
    """``manager.send`` whose every failure is a failed future (kafka-python raises for a
    node it has no metadata of instead of failing the future)."""
    try:
        return manager.send(request, node_id=node_id)
    except Exception as exc:  # kept in the future: its broker fails alone
        return Future().failure(exc)


async def _gather(futures: dict) -> dict:
    """Each future's result or the exception it failed with, once all are in."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = await future
        except Exception as exc:  # kept per key; the caller decides what a failure fails
            out[key] = exc
    return out


def _check_apis(api_versions: dict[int, tuple[int, int]]) -> None:
    missing = [name for key, name in REQUIRED_APIS.items() if key not in api_versions]
    if missing:
        raise UnsupportedApi(
            "UNSUPPORTED_VERSION: the bootstrap broker does not support "
            + ", ".join(missing)
            + ", which a sync needs"
        )


async def _cluster(manager, api_versions) -> tuple[str, int, dict]:
    if ApiKey.DescribeCluster in api_versions:
        resp = await manager.send(DescribeClusterRequest(endpoint_type=1))
        if resp.error_code:
            raise _error(resp.error_code, resp.error_message)
        brokers = {b.broker_id: (b.host, b.port, b.rack) for b in resp.brokers}
        return resp.cluster_id, resp.controller_id, brokers
    resp = await manager.send(MetadataRequest(topics=[]))
    brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
    return resp.cluster_id or "", resp.controller_id, brokers


async def _topic_configs(
    manager, names: list[str], broker_ids: list[int]
) -> dict[str, dict[str, tuple[str, int]]]:
    """Topic configs in requests of ``CONFIG_TOPICS_PER_REQUEST`` topics, dealt round the
    brokers (any broker answers for any topic)."""
    chunks = [
        names[i : i + CONFIG_TOPICS_PER_REQUEST]
        for i in range(0, len(names), CONFIG_TOPICS_PER_REQUEST)
    ]
    futures = {
        i: manager.send(
            DescribeConfigsRequest(resources=[(TOPIC, n, None) for n in chunk]),
            node_id=broker_ids[i % len(broker_ids)] if broker_ids else None,
        )
        for i, chunk in enumerate(chunks)
    }
    out: dict[str, dict[str, tuple[str, int]]] = {}
    for resp in (await _gather(futures)).values():
        if isinstance(resp, Exception):
            raise resp
        for result in resp.results:
            if result.error_code:
                # a topic deleted between Metadata and here: it goes with the next sync
                if result.error_code == Errors.UnknownTopicOrPartitionError.errno:
                    continue
                raise _error(result.error_code, result.error_message)
            out[result.resource_name] = {
                c.name: (c.value, _source(c)) for c in result.configs if c.value is not None
            }
    return out


def _source(config) -> int:
    source = getattr(config, "config_source", None)
    if source is None or source < 0:  # v0 has is_default only
        return DEFAULT_CONFIG if getattr(config, "is_default", False) else 1
    return source


def remote_topics(configs: dict[str, dict[str, tuple[str, int]]]) -> set[str]:
    """The topics whose -4 / -5 offsets are asked: those whose configs (``topic -> name ->
    (value, source)``) map to a tiering state other than NONE (:func:`kafka39.from_configs`,
    the one mapping). Kafka 3.9 turns remote storage off only with
    ``remote.log.delete.on.disable``, so a topic read as NONE never had a remote log: its
    earliest-local offset is its earliest and its latest-tiered is -1 (KIP-1005), which is what
    the rows take for an offset not asked."""
    return {
        name
        for name, cfg in configs.items()
        if kafka39.from_configs({k: v for k, (v, _) in cfg.items()}).tiered_state
        != TieredState.NONE
    }


def _partition_rows(version: int, spec: int, partitions: list[int]) -> list[tuple]:
    """A ListOffsets request's partitions asking ``spec``, as the tuples of ``version``'s fields
    in wire order, which kafka-python's compiled encoder takes in place of its struct objects:
    the same bytes without a DataContainer built per partition (a leader is asked 10,000)."""
    head, tail = _partition_fields(version, spec)
    return [(*head, p, *tail) for p in partitions]


@functools.cache
def _partition_fields(version: int, spec: int) -> tuple[tuple, tuple]:
    """The values before and after ``partition_index`` in :func:`_partition_rows`' tuples."""
    names = [f.name for f in _PARTITION._struct.untagged_fields(version)]  # type: ignore[attr-defined]
    values = {"current_leader_epoch": -1, "timestamp": spec, "max_num_offsets": 1}
    at = names.index("partition_index")
    return tuple(values[n] for n in names[:at]), tuple(values[n] for n in names[at + 1 :])


_PARTITION = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
#: The ListOffsets version asked per spec, pinned so that the partitions' tuples
#: (:func:`_partition_rows`) are that version's; a broker's older maximum is used as is. -2 / -1
#: at v5, the newest before the flexible encoding (v6): the same fields without a tagged-field
#: section per partition, which kafka-python encodes and decodes in Python, on both sides of a
#: fleet's first sync (400,000 partitions); -4 / -5 at v9 (KIP-1005's -5).
LIST_OFFSETS_VERSIONS = {EARLIEST: 5, LATEST: 5, EARLIEST_LOCAL: 9, LATEST_TIERED: 9}


def _offsets_requests(
    led: list[tuple[str, int]], high: int, specs: tuple[int, ...]
) -> dict[int, ListOffsetsRequest]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, p in led:
        by_topic[topic].append(p)
    out = {}
    for spec in specs:
        version = min(high, LIST_OFFSETS_VERSIONS[spec])
        if OFFSET_SPECS[spec] > version:  # the broker predates the spec: its offset stays unknown
            continue
        out[spec] = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=READ_UNCOMMITTED,
            topics=[(t, _partition_rows(version, spec, ps)) for t, ps in by_topic.items()],
            min_version=version,
            max_version=version,
        )
    return out


def _own_calls(manager, broker_ids, api_versions) -> dict:
    """Every broker's DescribeLogDirs and DescribeConfigs, sent now: they need no topic
    metadata, so they go while the cluster answers Metadata (200,000 partitions to build,
    send and decode)."""
    futures = {}
    for bid in broker_ids:
        if ApiKey.DescribeLogDirs in api_versions:
            futures[(bid, "dirs")] = _send(manager, DescribeLogDirsRequest(topics=None), bid)
        futures[(bid, "configs")] = _send(
            manager, DescribeConfigsRequest(resources=[(BROKER, str(bid), None)]), bid
        )
    return futures


async def _broker_reads(manager, broker_ids, leaders, api_versions, own: dict, configs_f):
    """Every broker's ListOffsets -2 / -1, all sent at once beside its own calls (``own``:
    :func:`_own_calls`' futures); then each broker's -4 / -5 offsets (:data:`TIERED_SPECS`) of
    the partitions of :func:`remote_topics` it leads (``configs_f``: the topic configs'
    future) as soon as its own first answers are in, not once every broker's are: a broker is
    not left idle meanwhile, nor the whole cluster waiting for its slowest broker twice. A
    broker that leads none of those is still asked them for one partition, so that a broker
    that refuses them is known (``tiered_offsets_refused``)."""
    high = api_versions[ApiKey.ListOffsets][1]
    has_dirs = ApiKey.DescribeLogDirs in api_versions

    async def remote() -> set[str]:
        return remote_topics(await configs_f)

    remote_f = manager.call_soon(remote)

    async def broker(bid: int) -> tuple[BrokerRead, str | None]:
        first = {key: own[key] for key in ((bid, "dirs"), (bid, "configs")) if key in own}
        led = leaders.get(bid, [])
        if led:
            for spec, req in _offsets_requests(led, high, (EARLIEST, LATEST)).items():
                first[(bid, spec)] = _send(manager, req, bid)
        read = _broker_read(bid, await _gather(first), has_dirs)  # raises: this broker fails
        refused = None
        names = await remote_f
        led_remote = [tp for tp in led if tp[0] in names] or led[:1]
        tiered = _offsets_requests(led_remote, high, TIERED_SPECS) if led_remote else {}
        second = await _gather({spec: _send(manager, req, bid) for spec, req in tiered.items()})
        for spec, resp in second.items():
            if isinstance(resp, Exception):
                refused = f"broker {bid} failed ListOffsets {spec}: {type(resp).__name__}: {resp}"
                continue
            _take_offsets(read, spec, resp)
        return read, refused

    answers = await _gather({bid: manager.call_soon(broker, bid) for bid in broker_ids})
    reads: dict[int, BrokerRead] = {}
    errors: dict[int, str] = {}
    refused = None
    for bid in broker_ids:
        answer = answers[bid]
        if isinstance(answer, Exception):  # it fails alone, as an agent that does not answer
            errors[bid] = f"{type(answer).__name__}: {answer}"
            continue
        reads[bid], refused_here = answer
        refused = refused_here or refused
    return reads, errors, refused


def _take_offsets(read: BrokerRead, spec: int, resp) -> None:
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:  # e.g. leadership moved since Metadata: unknown this sync
                continue
            read.offsets.setdefault((t.name, p.partition_index), {})[spec] = p.offset


def _broker_read(bid: int, answers: dict, has_dirs: bool) -> BrokerRead:
    read = BrokerRead()
    if has_dirs:
        dirs = answers[(bid, "dirs")]
        if isinstance(dirs, Exception):
            raise dirs
        if getattr(dirs, "error_code", 0):
            raise _error(dirs.error_code)
        read.log_dirs = list(dirs.results)
    else:
        read.log_dirs = None
    configs = answers[(bid, "configs")]
    if isinstance(configs, Exception):
        raise configs
    for result in configs.results:
        if not result.error_code:
            read.configs = {c.name: c.value for c in result.configs if c.value is not None}
    for (b, spec), resp in answers.items():
        if b != bid or not isinstance(spec, int):
            continue
        if isinstance(resp, Exception):
            raise resp
        _take_offsets(read, spec, resp)
    return read


async def _elr(manager, topics: list, broker_ids: list[int]) -> dict:
    """The ELR of every partition that has one (:attr:`ClusterRead.elr`): DescribeTopicPartitions
    of ``ELR_PARTITIONS_PER_REQUEST`` partitions' worth of topics each, all sent at once and
    dealt round the brokers (any broker answers from its metadata), each followed by its
    cursor. Only partitions with an ELR or a last known ELR are kept."""
    T = DescribeTopicPartitionsRequest.TopicRequest
    chunks: list[list[str]] = [[]]
    size = 0
    for t in topics:
        if chunks[-1] and size + len(t.partitions) > ELR_PARTITIONS_PER_REQUEST:
            chunks.append([])
            size = 0
        chunks[-1].append(t.name)
        size += len(t.partitions)

    async def chunk(i: int, names: list[str]) -> dict:
        node = broker_ids[i % len(broker_ids)] if broker_ids else None
        out: dict = {}
        cursor = None
        while True:
            request = DescribeTopicPartitionsRequest(
                topics=[T(name=n) for n in names],
                response_partition_limit=ELR_PARTITIONS_PER_REQUEST,
                cursor=cursor,
            )
            resp = await _send(manager, request, node)
            for t in resp.topics:
                if t.error_code == Errors.UnknownTopicOrPartitionError.errno:
                    continue  # deleted since Metadata: it goes with the next sync
                if t.error_code:
                    raise _error(t.error_code, f"DescribeTopicPartitions of topic {t.name}")
                for p in t.partitions:
                    elr, known = p.eligible_leader_replicas or [], p.last_known_elr or []
                    if elr or known:
                        out[(t.name, p.partition_index)] = (list(elr), list(known))
            if resp.next_cursor is None:
                return out
            C = DescribeTopicPartitionsRequest.Cursor
            cursor = C(
                topic_name=resp.next_cursor.topic_name,
                partition_index=resp.next_cursor.partition_index,
            )

    names = [c for c in chunks if c]
    answers = await _gather({i: manager.call_soon(chunk, i, c) for i, c in enumerate(names)})
    elr: dict = {}
    for answer in answers.values():
        if isinstance(answer, Exception):
            raise answer
        elr.update(answer)
    return elr


async def read_cluster(admin) -> ClusterRead:
    """Everything a sync reads, from the cluster ``admin`` (a bootstrapped KafkaAdminClient)
    is connected to. Runs on the admin client's network thread (``_manager.run``)."""
    manager = admin._manager
    api_versions = dict(manager.broker_version_data.api_versions)
    _check_apis(api_versions)
    cluster_f = manager.call_soon(_cluster, manager, api_versions)
    brokers_f = manager.send(MetadataRequest(topics=[]))
    metadata_f = manager.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
    cluster_id, controller_id, brokers = await cluster_f
    # The client connects to a broker it has metadata of: the brokers as of now, not as of
    # its bootstrap (a broker that came back since would be unknown to it).
    manager.cluster.update_metadata(await brokers_f)
    own = _own_calls(manager, sorted(brokers), api_versions)
    metadata = await metadata_f
    topics = sorted((t for t in metadata.topics if t.name), key=lambda t: t.name)
    bad = [
        t for t in topics if t.error_code and t.error_code != Errors.LeaderNotAvailableError.errno
    ]
    if bad:
        raise _error(bad[0].error_code, f"Metadata of topic {bad[0].name}")
    leaders: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for t in topics:
        for p in t.partitions:
            if p.leader_id >= 0:
                leaders[p.leader_id].append((t.name, p.partition_index))
    configs_f = manager.call_soon(
        _topic_configs, manager, [t.name for t in topics], sorted(brokers)
    )
    elr_f = None
    if ApiKey.DescribeTopicPartitions in api_versions:
        elr_f = manager.call_soon(_elr, manager, topics, sorted(brokers))
    per_broker, errors, refused = await _broker_reads(
        manager, sorted(brokers), leaders, api_versions, own, configs_f
    )
    topic_configs = await configs_f
    elr = await elr_f if elr_f is not None else None
    return ClusterRead(
        cluster_id=cluster_id or metadata.cluster_id or "",
        controller_id=controller_id,
        brokers=brokers,
        topics=topics,
        topic_configs=topic_configs,
        api_versions=api_versions,
        per_broker=per_broker,
        broker_errors=errors,
        tiered_offsets_refused=refused,
        elr=elr,
    )


async def read_groups(admin, broker_ids: list[int]) -> dict[str, tuple[str, dict]]:
    """group id -> (state, {(topic, partition): committed offset}) of the consumer groups
    (protocol type ``consumer`` or none): ListGroups to every broker (each lists the groups
    it coordinates), then the committed offsets by coordinator. Empty when the cluster has no
    ListGroups or OffsetFetch."""
    manager = admin._manager
    versions = manager.broker_version_data.api_versions
    if ApiKey.ListGroups not in versions or ApiKey.OffsetFetch not in versions:
        return {}
    listed = await _gather(
        {bid: manager.send(ListGroupsRequest(), node_id=bid) for bid in broker_ids}
    )
    states: dict[str, str] = {}
    for resp in listed.values():
        if isinstance(resp, Exception):
            raise resp
        if resp.error_code:
            raise _error(resp.error_code, "ListGroups")
        for g in resp.groups:
            if g.protocol_type in ("consumer", ""):
                states[g.group_id] = getattr(g, "group_state", None) or ""
    if not states:
        return {}
    coordinators = await admin._find_coordinator_ids(sorted(states))
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for group_id, node in coordinators.items():
        by_coordinator[node].append(group_id)
    futures = {}
    for node, group_ids in by_coordinator.items():
        specs = dict.fromkeys(group_ids)
        for group_id, request in admin._list_group_offsets_requests(specs):
            futures[(node, group_id)] = manager.send(request, node_id=node)
    out: dict[str, tuple[str, dict]] = {}
    for (_node, group_id), resp in (await _gather(futures)).items():
        if isinstance(resp, Exception):
            raise resp
        parsed = admin._list_group_offsets_process_response(resp, group_id=group_id)
        for gid, offsets in parsed.items():
            committed = {
                (tp.topic, tp.partition): om.offset for tp, om in offsets.items() if om.offset >= 0
            }
            out[gid] = (states.get(gid, ""), committed)
    return out
