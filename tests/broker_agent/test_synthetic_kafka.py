"""The synthetic fleet answers Kafka's read calls (issue #35): kafka-python's KafkaAdminClient
against the listeners `sim up --synthetic-topics` opens, one per synthetic broker, answered from
the same generated state as the synthetic HTTP API - so the two paths describe one cluster."""

from __future__ import annotations

import contextlib
import json
import socket

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.consumer.offsets import OffsetSpec
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker_agent.contract import kafka39
from broker_agent.kafka_wire.synthetic import READ_APIS

from .conftest import Sim, _kill_all, run_cli
from .test_kafka_listener import (
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    _agents_view,
    _offsets,
    _wire_view,
    admin,
    ask,
    kafka_ports,
)

pytestmark = pytest.mark.integration

BROKERS, TOPICS, PARTITIONS, GROUPS = 4, 3, 12, 6


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One small still fleet for the module (tests read it; a churn only moves it on)."""
    data = tmp_path_factory.mktemp("synthetic-kafka") / "sim"
    try:
        out = run_cli(
            data,
            "up",
            "--brokers", str(BROKERS), "--log-dirs", "2",
            "--synthetic-topics", str(TOPICS), "--partitions-per-topic", str(PARTITIONS),
            "--synthetic-groups", str(GROUPS), "--synthetic-tick-interval", "0",
        )  # fmt: skip
        sim = Sim(data, json.loads(out.stdout.strip().splitlines()[-1]))
    except BaseException:
        _kill_all(data)
        raise
    yield sim
    sim.close()
    with contextlib.suppress(Exception):
        run_cli(data, "down", check=False, timeout=60)
    _kill_all(data)


def test_describe_cluster_and_topics_over_kafka_are_the_synthetic_controllers_metadata(fleet):
    ports = kafka_ports(fleet)
    assert sorted(ports) == list(range(1, BROKERS + 1))
    assert len(set(ports.values())) == BROKERS  # each broker its own host:port
    with admin(fleet) as a:
        cluster = a.describe_cluster()
        assert cluster["cluster_id"] == fleet.urls["cluster_id"]
        assert {b["broker_id"]: b["port"] for b in cluster["brokers"]} == ports
        assert cluster["controller_id"] in ports
        md = fleet.controller.metadata()
        assert sorted(a.list_topics()) == sorted(t.name for t in md.topics)
        before = _wire_view(a.describe_topics())
        assert before == _agents_view(fleet)
        # a churn moves leaders and ISRs: both paths answer the new version alike
        fleet.cli("churn", "--fraction", "0.3", "--seed", "5")
        after = _wire_view(a.describe_topics())
        assert after == _agents_view(fleet) != before
        # configs: the topic's tiering as Kafka 3.9 spells it, from the controller's state,
        # also once a KIP-950 disablement has started over HTTP
        disabled = fleet.controller.start_disable(f"synthetic.topic-{TOPICS - 1:04d}", "delete")
        assert disabled.tiered_state == "DISABLING"
        for t in fleet.controller.metadata().topics:
            [configs] = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t.name)])[
                "topic"
            ].values()
            expected = kafka39.configs_for_state(t.tiered_state, t.disable_policy)
            for name in (kafka39.REMOTE_STORAGE_ENABLE, kafka39.REMOTE_LOG_DELETE_ON_DISABLE):
                value = configs.get(name, {"value": "false"})["value"]  # a default: not listed
                assert value == expected.get(name, "false"), (t.name, name)
    # every broker lists the read calls it answers, and only those
    for port in ports.values():
        versions = ask(port, ApiVersionsRequest(), 3, ApiVersionsResponse)
        assert {k.api_key for k in versions.api_keys} == {int(k) for k in READ_APIS}


def test_describe_log_dirs_of_each_broker_is_its_synthetic_snapshot(fleet):
    with admin(fleet) as a:
        described = {r["broker"]: r["log_dirs"] for r in a.describe_log_dirs()}
    assert sorted(described) == list(range(1, BROKERS + 1))
    for b, dirs in described.items():
        snap = fleet.agent(b).snapshot()
        assert {
            d["log_dir"]: (d["error_code"], d["total_bytes"], d["usable_bytes"]) for d in dirs
        } == {d.path: (NONE, d.total_bytes, d.usable_bytes) for d in snap.log_dirs}
        path = {d.name: d.path for d in snap.log_dirs}
        hosted = {
            (t["name"], p["partition_index"]): (d["log_dir"], p["partition_size"], p["offset_lag"])
            for d in dirs
            for t in d["topics"]
            for p in t["partitions"]
        }
        assert hosted == {
            (r.topic, r.partition): (
                path[r.log_dir],
                r.size_bytes,
                r.high_watermark - r.log_end_offset,
            )
            for r in snap.replicas
        }
        assert len(hosted) == TOPICS * PARTITIONS * 3 // BROKERS  # RF 3, round robin


def test_list_offsets_of_a_tiered_partition_are_its_leaders_snapshot(fleet):
    md = fleet.controller.metadata()
    tiered = next(t for t in md.topics if t.tiered_state == "ENABLED")
    plain = next(t for t in md.topics if t.tiered_state == "NONE")
    p = next(x for x in tiered.partitions if x.partition == 0)
    leader = next(
        r
        for r in fleet.agent(p.leader).snapshot().replicas
        if (r.topic, r.partition) == (tiered.name, 0)
    )
    assert leader.is_leader
    with admin(fleet) as a:
        earliest = _offsets(a, tiered.name, OffsetSpec.EARLIEST)
        latest = _offsets(a, tiered.name, OffsetSpec.LATEST)
        local = _offsets(a, tiered.name, OffsetSpec.EARLIEST_LOCAL)
        latest_tiered = _offsets(a, tiered.name, OffsetSpec.LATEST_TIERED)
        assert earliest.offset == leader.log_start_offset > 0
        assert (latest.offset, latest.leader_epoch) == (leader.high_watermark, leader.leader_epoch)
        assert local.offset == leader.local_log_start_offset
        # nothing of a synthetic partition is in remote storage: its snapshot says so too
        assert latest_tiered.offset == leader.remote_log_end_offset == -1
        assert _offsets(a, plain.name, OffsetSpec.LATEST_TIERED).offset == -1
    # only the leader answers (a follower: NOT_LEADER_OR_FOLLOWER)
    ports = kafka_ports(fleet)
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    for b, expect in (
        (next(r for r in p.replicas if r != p.leader), NOT_LEADER_OR_FOLLOWER),
        (p.leader, NONE),
    ):
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=tiered.name,
                    partitions=[part(partition_index=0, current_leader_epoch=-1, timestamp=-4)],
                )
            ],
        )
        resp = ask(ports[b], request, 9, ListOffsetsResponse)
        assert resp.topics[0].partitions[0].error_code == expect


def test_groups_over_kafka_are_the_synthetic_coordinators_and_writes_are_not_served(fleet):
    views = {g.group_id: g for g in fleet.controller.groups()}
    assert len(views) == GROUPS
    with admin(fleet) as a:
        listed = a.list_groups()
        assert sorted(g["group_id"] for g in listed) == sorted(views)
        assert {g["group_state"] for g in listed} == {"Stable"}  # one member each
        some = sorted(views)[1]
        offsets = a.list_group_offsets({some: None})[some]
        assert {(tp.topic, tp.partition): o.offset for tp, o in offsets.items()} == {
            (t, p): o for t, parts in views[some].offsets.items() for p, o in parts.items()
        }
    # a write call is not implemented here: the connection is closed, as for any such request
    port = next(iter(kafka_ports(fleet).values()))
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    alter = IncrementalAlterConfigsRequest(
        resources=[res(resource_type=2, resource_name="synthetic.topic-0000", configs=[])],
        validate_only=True,
    )
    with pytest.raises((ConnectionError, socket.timeout, OSError)):
        ask(port, alter, 1, IncrementalAlterConfigsResponse)
