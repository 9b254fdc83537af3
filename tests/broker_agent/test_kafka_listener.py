"""The simulated brokers speak Kafka's protocol (issue #35, read calls and
IncrementalAlterConfigs): kafka-python's KafkaAdminClient and KafkaConsumer against the Kafka
listeners `sim up` starts, answered from each broker's own state with Kafka 3.9's semantics. Single requests to one chosen broker go through
:func:`ask`, encoded and decoded with kafka-python's protocol classes too."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError
from kafka.protocol.admin import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.consumer.offsets import OffsetSpec
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.protocol.schemas.fields.codecs import Int32

from broker_agent.contract.choices import LogDirState

from .conftest import Load, wait_until
from .test_log_dir_failure import _break_dir

pytestmark = pytest.mark.integration

NONE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER = 0, 3, 5, 6
INVALID_CONFIG, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 40, 33, 58
UNKNOWN_TOPIC_ID, UNSUPPORTED_ENDPOINT_TYPE = 100, 115
NOT_COORDINATOR, UNSUPPORTED_VERSION, INVALID_REQUEST, KAFKA_STORAGE_ERROR = 16, 35, 42, 56
FAST = ("--probe-interval", "0.5", "--session-timeout-ms", "2000")


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return buf


def _exchange(s: socket.socket, request, version: int, response_class):
    request.API_VERSION = version
    request.with_header(correlation_id=7, client_id="strata-test")
    s.sendall(bytes(request.encode(header=True, framed=True)))
    size = Int32.decode(io.BytesIO(_recv(s, 4)))
    resp = response_class.decode(_recv(s, size), version=version, header=True)
    assert resp.header.correlation_id == 7
    return resp


def _login(s: socket.socket, password: bytes) -> SaslAuthenticateResponse:
    hand = _exchange(s, SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert (hand.error_code, hand.mechanisms) == (NONE, ["PLAIN"])
    token = b"\0strata\0" + password
    return _exchange(s, SaslAuthenticateRequest(auth_bytes=token), 2, SaslAuthenticateResponse)


def ask(port: int, request, version: int, response_class, *, secret: bytes | None = None):
    """One request to the broker listening on ``port`` (after SASL/PLAIN with ``secret``, the
    cluster's; ``b""``: none); its decoded response."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        if secret != b"":
            assert _login(s, secret or SECRET[port]).error_code == NONE
        return _exchange(s, request, version, response_class)


#: listener port -> its cluster's secret (filled by kafka_ports)
SECRET: dict[int, bytes] = {}


def kafka_ports(sim) -> dict[int, int]:
    ports = {
        int(b): int(addr.rsplit(":", 1)[1])
        for b, addr in zip(
            sorted(sim.urls["brokers"]), sim.urls["kafka_bootstrap"].split(","), strict=True
        )
    }
    SECRET.update(dict.fromkeys(ports.values(), sim.secret))
    return ports


def client_config(sim, password: str | None = None) -> dict:
    """A Kafka client's settings for the simulated cluster: SASL/PLAIN, user ``strata``, the
    cluster secret as password."""
    return {
        "bootstrap_servers": sim.urls["kafka_bootstrap"],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "strata",
        "sasl_plain_password": sim.secret.decode() if password is None else password,
        "request_timeout_ms": 20_000,
    }


@contextlib.contextmanager
def admin(sim):
    kafka_ports(sim)
    client = KafkaAdminClient(**client_config(sim))
    try:
        yield client
    finally:
        client.close()


def _agents_view(sim) -> dict:
    md = sim.controller.metadata()
    return {
        t.name: {
            p.partition: (p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas)
            for p in t.partitions
        }
        for t in md.topics
    }


def _wire_view(topics: list[dict]) -> dict:
    return {
        t["name"]: {
            p["partition_index"]: (
                p["leader_id"],
                p["leader_epoch"],
                p["replica_nodes"],
                p["isr_nodes"],
                p["offline_replicas"],
            )
            for p in t["partitions"]
        }
        for t in topics
    }


def test_metadata_and_describe_cluster_are_each_brokers_metadata_cache_and_list_live_brokers(
    sim_factory,
):
    sim = sim_factory(3, 1, *FAST)
    sim.controller.create_topic("orders", 3, 2)
    sim.controller.create_topic("__consumer_offsets", 1, 3)
    ports = kafka_ports(sim)
    with admin(sim) as a:
        wait_until(
            lambda: _wire_view(a.describe_topics()) == _agents_view(sim), 20, what="same view"
        )
        cluster = a.describe_cluster()
        assert cluster["cluster_id"] == sim.urls["cluster_id"]
        assert {b["broker_id"]: b["port"] for b in cluster["brokers"]} == ports
        assert all(b["rack"] is None for b in cluster["brokers"])
        assert cluster["controller_id"] in ports  # KRaft: a live broker, never the quorum
        internal = {t["name"]: t["is_internal"] for t in a.describe_topics()}
        assert internal == {"orders": False, "__consumer_offsets": True}

    # every broker answers from its own cache: the same topics from each one
    for port in ports.values():
        md = ask(port, MetadataRequest(topics=None), 12, MetadataResponse)
        assert _wire_view([t.to_dict() for t in md.topics]) == _agents_view(sim)
        unknown = ask(
            port,
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")]),
            12,
            MetadataResponse,
        )
        assert [(t.name, t.error_code) for t in unknown.topics] == [
            ("nope", UNKNOWN_TOPIC_OR_PARTITION)
        ]

    # v10+: a topic asked by id; an unknown id is UNKNOWN_TOPIC_ID
    T = MetadataRequest.MetadataRequestTopic
    orders_id = next(t.topic_id for t in md.topics if t.name == "orders")
    assert orders_id.hex.startswith(sim.controller.topic("orders").topic_id)  # its sim id
    by_id = ask(
        ports[1],
        MetadataRequest(
            topics=[T(topic_id=orders_id, name=None), T(topic_id=uuid.uuid4(), name=None)]
        ),
        12,
        MetadataResponse,
    )
    assert [(t.name, t.error_code) for t in by_id.topics] == [
        ("orders", NONE),
        (None, UNKNOWN_TOPIC_ID),
    ]
    # a broker describes the brokers, never the controller quorum (KIP-919's endpoint type 2)
    quorum = ask(ports[1], DescribeClusterRequest(endpoint_type=2), 1, DescribeClusterResponse)
    assert (quorum.error_code, quorum.brokers) == (UNSUPPORTED_ENDPOINT_TYPE, [])

    # a fenced broker leaves Metadata's broker list; its partitions' leaders move
    sim.cli("kill-broker", "3")

    def answer(broker_id: int) -> MetadataResponse:
        return ask(ports[broker_id], MetadataRequest(topics=None), 12, MetadataResponse)

    for b in (1, 2):  # asked directly: a client's cached metadata still names broker 3
        wait_until(
            lambda b=b: {x.node_id for x in answer(b).brokers} == {1, 2}, 20, what="3 fenced"
        )
        wait_until(
            lambda b=b: (
                _wire_view([t.to_dict() for t in answer(b).topics])["orders"]
                == _agents_view(sim)["orders"]
            ),
            20,
            what="leaders moved off broker 3",
        )
        assert all(p.leader_id != 3 for t in answer(b).topics for p in t.partitions)


def test_api_versions_lists_only_what_the_broker_implements_and_anything_else_closes_the_socket(
    sim_factory,
):
    sim = sim_factory(1, 1)
    port = kafka_ports(sim)[1]
    versions = ask(port, ApiVersionsRequest(), 3, ApiVersionsResponse, secret=b"")
    assert versions.error_code == NONE
    assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys} == {
        18: (0, 3),  # ApiVersions
        3: (0, 12),  # Metadata
        60: (0, 1),  # DescribeCluster
        32: (1, 4),  # DescribeConfigs
        35: (1, 4),  # DescribeLogDirs (v4: KIP-827 total / usable bytes)
        2: (1, 9),  # ListOffsets (v9: KIP-1005 latest-tiered)
        44: (0, 1),  # IncrementalAlterConfigs
        17: (1, 1),  # SaslHandshake (v1: tokens in SaslAuthenticate)
        36: (0, 2),  # SaslAuthenticate
        10: (0, 4),  # FindCoordinator
        16: (0, 5),  # ListGroups
        9: (2, 8),  # OffsetFetch
        37: (0, 3),  # CreatePartitions
        43: (0, 2),  # ElectLeaders (v1+: election type)
        34: (1, 2),  # AlterReplicaLogDirs
        45: (0, 0),  # AlterPartitionReassignments (v0: Kafka 3.9)
        46: (0, 0),  # ListPartitionReassignments
        75: (0, 0),  # DescribeTopicPartitions (KIP-966's ELR)
    }
    # KIP-511: an ApiVersions the broker does not know is answered at v0 with the list
    too_new = ask(port, ApiVersionsRequest(), 4, ApiVersionsResponse, secret=b"")
    assert too_new.error_code == UNSUPPORTED_VERSION
    assert {k.api_key for k in too_new.api_keys} == {k.api_key for k in versions.api_keys}
    with pytest.raises(ConnectionError):  # Produce is not implemented: Kafka closes the socket
        ask(port, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 9, ApiVersionsResponse)


def test_a_dir_failed_the_file_for_dir_way_is_kafka_storage_error_in_describe_log_dirs(
    sim_factory,
):
    sim = sim_factory(2, 2, *FAST)
    sim.controller.create_topic("solo", 2, 1)
    wait_until(
        lambda: all(p.created for p in sim.controller.topic("solo").partitions), 20, what="created"
    )
    with admin(sim) as a:
        before = {r["broker"]: r["log_dirs"] for r in a.describe_log_dirs()}
    snaps = {b: sim.agent(b).snapshot() for b in (1, 2)}
    for b, dirs in before.items():
        assert {d["log_dir"]: d["error_code"] for d in dirs} == {
            d.path: NONE for d in snaps[b].log_dirs
        }
        assert all(d["total_bytes"] > 0 and d["usable_bytes"] >= 0 for d in dirs)
    hosted = {
        (b, t["name"], p["partition_index"]): (d["log_dir"], p["partition_size"], p["offset_lag"])
        for b, dirs in before.items()
        for d in dirs
        for t in d["topics"]
        for p in t["partitions"]
    }
    assert hosted == {
        (b, r.topic, r.partition): (
            next(d.path for d in snaps[b].log_dirs if d.name == r.log_dir),
            r.size_bytes,
            0,
        )
        for b, s in snaps.items()
        for r in s.replicas
    }

    leader = sim.partition("solo", 0).leader
    victim = sim.replica(leader, "solo", 0)
    path = next(d.path for d in sim.agent(leader).snapshot().log_dirs if d.name == victim.log_dir)
    _break_dir(path)  # KIP-112's system test: the folder replaced by a file
    wait_until(
        lambda: (
            {d.name: d.state for d in sim.agent(leader).snapshot().log_dirs}[victim.log_dir]
            == LogDirState.OFFLINE
        ),
        20,
        what="the dir failed on its next I/O",
    )
    with admin(sim) as a:
        [after] = a.describe_log_dirs(brokers=[leader])
        by_path = {d["log_dir"]: d for d in after["log_dirs"]}
        assert by_path[path]["error_code"] == KAFKA_STORAGE_ERROR
        assert by_path[path]["topics"] == []
        others = [d for p, d in by_path.items() if p != path]
        assert [d["error_code"] for d in others] == [NONE]
        # RF 1: no other replica to lead; Metadata names the offline replica
        wait_until(
            lambda: (
                (p := _wire_view(a.describe_topics(["solo"]))["solo"][0])[0] == -1
                and p[4] == [leader]
            ),
            20,
            what="partition 0 leaderless with its replica offline",
        )
        [topic] = a.describe_topics(["solo"])
        assert topic["partitions"][0]["error_code"] == LEADER_NOT_AVAILABLE
    # ListOffsets on the failed replica: the broker cannot read its log
    resp = ask(
        kafka_ports(sim)[leader],
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="solo",
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        )
                    ],
                )
            ],
        ),
        9,
        ListOffsetsResponse,
    )
    assert resp.topics[0].partitions[0].error_code == KAFKA_STORAGE_ERROR


def _offsets(a, topic: str, spec) -> int:
    return a.list_partition_offsets({TopicPartition(topic, 0): spec})[TopicPartition(topic, 0)]


def test_list_offsets_earliest_local_and_latest_tiered_match_the_leaders_log_under_produce_load(
    sim_factory,
):
    sim = sim_factory(2, 1)
    sim.cli(
        "create-topic", "orders", "--partitions", "1", "--replication-factor", "2", "--tiered",
        "--segment-bytes", "4096", "--config", "local.retention.bytes=8192",
    )  # fmt: skip
    sim.controller.create_topic("plain", 1, 2)
    sim.cli("produce", "--topic", "plain", "--records", "10")
    leader = sim.partition("orders").leader
    with Load(sim, "orders") as load, admin(sim) as a:
        wait_until(
            lambda: (
                (r := sim.replica(leader, "orders")).remote_log_end_offset > 0
                and r.local_log_start_offset > 0
            ),
            60,
            what="segments tiered and local retention run",
        )
        load.wait_acked(100)
        before = sim.replica(leader, "orders")
        earliest = _offsets(a, "orders", OffsetSpec.EARLIEST)
        local = _offsets(a, "orders", OffsetSpec.EARLIEST_LOCAL)
        tiered = _offsets(a, "orders", OffsetSpec.LATEST_TIERED)
        latest = _offsets(a, "orders", OffsetSpec.LATEST)
        after = sim.replica(leader, "orders")
        # the leader's own log, read between two of its snapshots
        assert earliest.offset == before.log_start_offset == after.log_start_offset == 0
        assert before.local_log_start_offset <= local.offset <= after.local_log_start_offset
        assert before.remote_log_end_offset <= tiered.offset <= after.remote_log_end_offset
        assert before.high_watermark <= latest.offset <= after.high_watermark
        # KIP-405: the local log starts where the remote one ends, or before
        assert 0 < local.offset <= tiered.offset + 1
        assert latest.leader_epoch == before.leader_epoch
        # a topic that never tiered has no tiered offset
        assert _offsets(a, "plain", OffsetSpec.LATEST_TIERED).offset == -1
        assert _offsets(a, "plain", OffsetSpec.LATEST).offset == 10
    assert not load.errors

    # by time: the first record at or after the timestamp, from the remote part or the local
    records = sim.consumer().read_topic("orders")[0]
    # below the local start seen before the lookups (local retention kept moving under the
    # load, so a later local start may be well above it): remote, and stays so (expiry: 7 days)
    local_start = before.local_log_start_offset
    remote_one = records[len([x for x in records if x.offset < local_start]) // 2]
    assert remote_one.offset < local_start
    with admin(sim) as a:
        for target in (remote_one.timestamp_ms, records[-1].timestamp_ms):
            first = min((x for x in records if x.timestamp_ms >= target), key=lambda x: x.offset)
            found = _offsets(a, "orders", target)
            assert (found.offset, found.timestamp) == (first.offset, first.timestamp_ms)
        assert _offsets(a, "orders", records[-1].timestamp_ms + 1).offset == -1
        newest = max(x.timestamp_ms for x in records)  # KIP-734: the newest record, locally
        found = _offsets(a, "orders", OffsetSpec.MAX_TIMESTAMP)
        first_newest = min(x.offset for x in records if x.timestamp_ms == newest)
        assert (found.offset, found.timestamp) == (first_newest, newest)

    follower = next(b for b in sim.partition("orders").replicas if b != leader)
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    for b, expect in ((follower, NOT_LEADER_OR_FOLLOWER), (leader, NONE)):
        resp = ask(
            kafka_ports(sim)[b],
            ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name="orders",
                        partitions=[part(partition_index=0, current_leader_epoch=-1, timestamp=-4)],
                    )
                ],
            ),
            8,
            ListOffsetsResponse,
        )
        assert resp.topics[0].partitions[0].error_code == expect


def test_describe_configs_tells_a_topic_override_from_a_default_and_maps_tiering_as_kafka_39(
    sim_factory,
):
    sim = sim_factory(1, 1)
    sim.controller.create_topic(
        "orders", 1, 1, {"remote.storage.enable": "true", "retention.ms": "3600000"}
    )
    with admin(sim) as a:
        got = a.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "orders")], config_filter="all"
        )["topic"]["orders"]
        assert (got["retention.ms"]["value"], got["retention.ms"]["config_source"]) == (
            "3600000",
            "DYNAMIC_TOPIC_CONFIG",
        )
        assert (got["retention.bytes"]["value"], got["retention.bytes"]["config_source"]) == (
            "-1",
            "DEFAULT_CONFIG",
        )
        assert got["remote.storage.enable"]["value"] == "true"
        assert got["remote.log.copy.disable"]["value"] == "false"
        assert "remote.log.disable.policy" not in got  # KIP-950's name; 3.9 has none

        sim.cli("disable-tiering", "orders", "--policy", "retain")
        wait_until(
            lambda: (
                a.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "orders")], config_filter="all"
                )["topic"]["orders"]["remote.log.copy.disable"]["value"]
                == "true"
            ),
            20,
            what="retain shown as Kafka 3.9's remote.log.copy.disable=true",
        )
        broker = a.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )["broker"]["1"]
        assert broker["broker.id"]["value"] == "1"
        assert broker["broker.id"]["config_source"] == "STATIC_BROKER_CONFIG"
        cordoned = broker["cordoned.log.dirs"]  # KIP-1066: present, empty by default
        assert (cordoned["value"], cordoned["config_source"]) == ("", "DEFAULT_CONFIG")
        info = sim.agent(1).cordon_log_dir(next(iter(sim.agent(1).snapshot().log_dirs)).name)
        broker = a.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )["broker"]["1"]
        cordoned = broker["cordoned.log.dirs"]
        assert (cordoned["value"], cordoned["config_source"]) == (
            os.path.abspath(info.path),
            "DYNAMIC_BROKER_CONFIG",
        )
    res = DescribeConfigsRequest.DescribeConfigsResource
    answer = ask(
        kafka_ports(sim)[1],
        DescribeConfigsRequest(
            resources=[
                res(resource_type=2, resource_name="nope", configuration_keys=None),
                res(resource_type=4, resource_name="2", configuration_keys=None),
            ]
        ),
        4,
        DescribeConfigsResponse,
    )
    assert [(r.resource_name, r.error_code) for r in answer.results] == [
        ("nope", UNKNOWN_TOPIC_OR_PARTITION),
        ("2", INVALID_REQUEST),  # a broker describes only its own configs
    ]


def test_group_offsets_are_answered_by_the_groups_coordinator_only(sim_factory):
    sim = sim_factory(2, 1)
    sim.controller.create_topic("orders", 2, 1)
    sim.cli("produce", "--topic", "orders", "--records", "30", "--keyed")
    sim.cli("consume", "--topic", "orders", "--group", "billing")
    committed = sim.controller.group("billing").offsets["orders"]
    assert sum(committed.values()) == 30
    with admin(sim) as a:
        listed = a.list_groups()
        assert [(g["group_id"], g["protocol_type"]) for g in listed] == [("billing", "consumer")]
        offsets = a.list_group_offsets({"billing": None})["billing"]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == committed
    # a consumer of the group sees its positions and the log ends the same way
    consumer = KafkaConsumer(group_id="billing", enable_auto_commit=False, **client_config(sim))
    try:
        tps = [TopicPartition("orders", p) for p in (0, 1)]
        assert {tp.partition: consumer.committed(tp) for tp in tps} == committed
        assert consumer.end_offsets(tps) == {tp: committed[tp.partition] for tp in tps}
    finally:
        consumer.close()
    found = ask(
        kafka_ports(sim)[1],
        FindCoordinatorRequest(key_type=0, coordinator_keys=["billing"]),
        4,
        FindCoordinatorResponse,
    ).coordinators
    assert [(c.key, c.error_code) for c in found] == [("billing", NONE)]
    coordinator = found[0].node_id
    assert found[0].port == kafka_ports(sim)[coordinator]
    other = next(b for b in (1, 2) if b != coordinator)
    fetch = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="billing", topics=None)],
        require_stable=False,
    )
    groups = ask(kafka_ports(sim)[other], fetch, 8, OffsetFetchResponse).groups
    assert [(g.group_id, g.error_code) for g in groups] == [("billing", NOT_COORDINATOR)]
    # ListGroups: each broker lists only the groups it coordinates
    assert ask(kafka_ports(sim)[other], ListGroupsRequest(), 4, ListGroupsResponse).groups == []


def _alter(port: int, name: str, ops, *, validate_only=False, resource_type=2):
    """IncrementalAlterConfigs of one resource; its ``(error_code, error_message)``."""
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(
        resources=[
            res(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    res.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )
    [answer] = ask(port, req, 1, IncrementalAlterConfigsResponse).responses
    return answer.error_code, answer.error_message


def test_incremental_alter_configs_applies_valid_changes_and_refuses_what_kafka_39_refuses(
    sim_factory,
):
    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
    sim = sim_factory(1, 1)
    sim.controller.create_topic("orders", 1, 1)
    port = kafka_ports(sim)[1]

    def described(key):
        with admin(sim) as a:
            return a.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "orders")], config_filter="all"
            )["topic"]["orders"][key]["value"]

    with admin(sim) as a:
        a.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "orders", {"retention.ms": "3600000"})],
            incremental=True,
            raise_on_unknown=False,
        )
    assert sim.controller.topic("orders").configs["retention.ms"] == "3600000"
    wait_until(lambda: described("retention.ms") == "3600000", 10, what="the broker's cache")

    refused = {
        "unknown key": _alter(port, "orders", [("bogus.key", SET, "1")]),
        "KIP-950 key": _alter(port, "orders", [("remote.log.disable.policy", SET, "delete")]),
        "not a number": _alter(port, "orders", [("retention.ms", SET, "abc")]),
        "append to a long": _alter(port, "orders", [("retention.ms", APPEND, "1")]),
        "duplicate keys": _alter(
            port, "orders", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]
        ),
        "unknown topic": _alter(port, "nope", [("retention.ms", SET, "1")]),
        "static broker config": _alter(
            port, "1", [("log.segment.bytes", SET, "4096")], resource_type=4
        ),
    }
    assert {k: code for k, (code, _m) in refused.items()} == {
        "unknown key": INVALID_CONFIG,
        "KIP-950 key": INVALID_CONFIG,
        "not a number": INVALID_CONFIG,
        "append to a long": INVALID_REQUEST,
        "duplicate keys": INVALID_REQUEST,
        "unknown topic": UNKNOWN_TOPIC_OR_PARTITION,
        "static broker config": INVALID_REQUEST,
    }
    assert refused["unknown key"][1] == "Unknown topic config name: bogus.key"
    # validate_only checks and changes nothing
    assert _alter(port, "orders", [("retention.ms", SET, "7200000")], validate_only=True) == (
        NONE,
        None,
    )
    bad = [("segment.bytes", SET, "100")]  # below Kafka's minimum segment size
    assert _alter(port, "orders", bad, validate_only=True)[0] == INVALID_CONFIG
    assert sim.controller.topic("orders").configs["retention.ms"] == "3600000"

    # a list config takes APPEND / SUBTRACT; a compacted topic cannot be tiered
    assert _alter(port, "orders", [("cleanup.policy", APPEND, "compact")])[0] == NONE
    assert sim.controller.topic("orders").configs["cleanup.policy"] == "delete,compact"
    wait_until(lambda: described("cleanup.policy") == "delete,compact", 10, what="cache")
    assert _alter(port, "orders", [("remote.storage.enable", SET, "true")])[0] == INVALID_CONFIG
    assert _alter(port, "orders", [("cleanup.policy", SUBTRACT, "compact")])[0] == NONE
    wait_until(lambda: described("cleanup.policy") == "delete", 10, what="cache")
    assert _alter(port, "orders", [("remote.storage.enable", SET, "true")]) == (NONE, None)
    assert sim.controller.topic("orders").tiered_state == "ENABLED"
    # a tiered topic keeps its local retention within its total retention (KIP-405)
    wait_until(lambda: described("remote.storage.enable") == "true", 10, what="cache")
    local_above_total = [("retention.bytes", SET, "1024"), ("local.retention.bytes", SET, "2048")]
    assert _alter(port, "orders", local_above_total)[0] == INVALID_CONFIG
    # Kafka 3.9's disablement rules: copy disable needs local.retention.* at -2 or equal to
    # retention.*; remote.storage.enable=false needs the delete flag
    assert _alter(port, "orders", [("local.retention.ms", SET, "60000")]) == (NONE, None)
    wait_until(lambda: described("local.retention.ms") == "60000", 10, what="cache")
    code, message = _alter(port, "orders", [("remote.log.copy.disable", SET, "true")])
    assert code == INVALID_CONFIG and "local.retention.ms" in message
    assert _alter(port, "orders", [("remote.storage.enable", SET, "false")])[0] == INVALID_CONFIG
    assert sim.controller.topic("orders").tiered_state == "ENABLED"
    # with local retention back at -2 a copy disable is one config change; the simulated
    # controller drives KIP-950's steps itself (no acknowledgement for anyone to wait for)
    retain = [("local.retention.ms", DELETE, None), ("remote.log.copy.disable", SET, "true")]
    assert _alter(port, "orders", retain) == (NONE, None)
    wait_until(
        lambda: sim.controller.topic("orders").tiered_state == "DISABLED", 30, what="DISABLED"
    )
    assert sim.controller.topic("orders").disable_policy == "retain"
    wait_until(lambda: described("remote.log.copy.disable") == "true", 10, what="cache")
    to_delete = [
        ("remote.storage.enable", SET, "false"),
        ("remote.log.delete.on.disable", SET, "true"),
    ]
    assert _alter(port, "orders", to_delete)[0] == INVALID_REQUEST  # the sim: re-enable first
    assert _alter(port, "orders", [("remote.log.copy.disable", DELETE, None)]) == (NONE, None)
    assert sim.controller.topic("orders").tiered_state == "ENABLED"


def test_a_cluster_made_before_the_listeners_gets_them_at_its_next_sim_up(sim_factory):
    sim = sim_factory(1, 1)
    sim.cli("down")
    manifest = sim.data / "cluster.json"
    c = json.loads(manifest.read_text())
    for b in c["brokers"].values():
        del b["kafka_port"]
    manifest.write_text(json.dumps(c))
    urls = json.loads(sim.cli("up").stdout.strip().splitlines()[-1])
    port = int(urls["kafka_bootstrap"].rsplit(":", 1)[1])
    assert json.loads(manifest.read_text())["brokers"]["1"]["kafka_port"] == port
    md = ask(port, MetadataRequest(topics=None), 12, MetadataResponse, secret=sim.secret)
    assert [(b.node_id, b.port) for b in md.brokers] == [(1, port)]


def test_only_sasl_plain_with_the_cluster_secret_opens_the_kafka_listener(sim_factory):
    sim = sim_factory(1, 1)
    port = kafka_ports(sim)[1]
    metadata = MetadataRequest(topics=None)
    with pytest.raises(ConnectionError):  # nothing but ApiVersions before authentication
        ask(port, metadata, 12, MetadataResponse, secret=b"")
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        wrong = _login(s, b"not-the-secret")
        assert wrong.error_code == SASL_AUTHENTICATION_FAILED
        with pytest.raises(ConnectionError):  # Kafka closes after a failed authentication
            _exchange(s, metadata, 12, MetadataResponse)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        hand = _exchange(
            s, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse
        )
        assert (hand.error_code, hand.mechanisms) == (UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
    assert ask(port, metadata, 12, MetadataResponse).cluster_id == sim.urls["cluster_id"]
    with pytest.raises(KafkaError):
        KafkaAdminClient(**client_config(sim, "not-the-secret"), bootstrap_timeout_ms=5000)
