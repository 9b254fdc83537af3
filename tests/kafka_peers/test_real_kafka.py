"""The calls Strata's Kafka backend reads with (kafka-python 3.0.12) against a real Apache Kafka
>= 3.9 with tiered storage (KIP-405) enabled: describe cluster, describe log dirs with KIP-827's
total / usable bytes, ListOffsets earliest (-2), earliest-local (-4, KIP-405), latest-tiered
(-5, KIP-1005) and latest (-1) on a tiered topic, topic and broker configs with their sources,
and a config round trip. Every expectation is Kafka 3.9's behaviour as its sources state it
(cited per test).

No Kafka broker can be installed on the machines the suite usually runs on, so these tests run
only when ``STRATA_TEST_KAFKA_BOOTSTRAP=host:port[,host:port...]`` names one, and are skipped
with that reason otherwise. ``STRATA_TEST_KAFKA_CLIENT_CONFIG`` may name the client settings
file, in the format ``manage.py register_cluster --client-config`` takes (README, "Point Strata
at your Kafka"): ``key=value`` lines or JSON, with ``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password.ref`` (``env:NAME`` or a file path: the password by
reference, never in the file), ``ssl.cafile``, ``ssl.certfile``, ``ssl.keyfile``.

The suite creates topics named ``strata-test-<random>`` (deleted at the end) and writes a few
MiB to them; it changes no broker or existing topic.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer.offsets import OffsetSpec

from broker_agent.contract.signing import read_secret, read_secret_file
from tests.broker_agent.conftest import wait_until

BOOTSTRAP_ENV = "STRATA_TEST_KAFKA_BOOTSTRAP"
CLIENT_CONFIG_ENV = "STRATA_TEST_KAFKA_CLIENT_CONFIG"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.environ.get(BOOTSTRAP_ENV),
        reason=f"{BOOTSTRAP_ENV} is not set: no real Kafka (>= 3.9, tiered storage) to test",
    ),
]

#: the client settings file's keys (dots or underscores) -> kafka-python's argument names
SETTINGS = {
    "security_protocol": "security_protocol",
    "sasl_mechanism": "sasl_mechanism",
    "sasl_username": "sasl_plain_username",
    "ssl_cafile": "ssl_cafile",
    "ssl_certfile": "ssl_certfile",
    "ssl_keyfile": "ssl_keyfile",
}
TOPIC_SOURCE = "DYNAMIC_TOPIC_CONFIG"
BROKER_SOURCES = {
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
}
MIB = 1024 * 1024


def read_password(ref: str) -> str:
    """The password a reference names: ``env:NAME`` (``$NAME``, else the file ``$NAME_FILE``)
    or a file path, read by Strata's one secret reader (:mod:`broker_agent.contract.signing`)."""
    value = read_secret(ref[4:]) if ref.startswith("env:") else read_secret_file(ref)
    if value is None:
        raise ValueError(f"sasl.password.ref {ref}: empty")
    return value


def read_client_config(path: Path) -> dict:
    """kafka-python settings from a client settings file (``key=value`` lines, ``#`` comments,
    or JSON). A literal password or an unknown key is an error, not something to ignore."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        raw = json.loads(text)
    else:
        raw = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: not key=value: {line!r}")
            raw[key.strip()] = value.strip()
    settings = {}
    for key, value in raw.items():
        name = key.replace(".", "_")
        if name == "sasl_password":
            raise ValueError(f"{path}: a literal password; name it with sasl.password.ref")
        if name == "sasl_password_ref":
            settings["sasl_plain_password"] = read_password(value)
        elif name in SETTINGS:
            settings[SETTINGS[name]] = value
        else:
            raise ValueError(f"{path}: unknown client setting {key!r}")
    return settings


@pytest.fixture(scope="module")
def kafka() -> dict:
    """kafka-python's settings for the Kafka under test (bootstrap plus the settings file)."""
    config = os.environ.get(CLIENT_CONFIG_ENV)
    return {
        "bootstrap_servers": os.environ[BOOTSTRAP_ENV].split(","),
        "client_id": "strata-test",
        "request_timeout_ms": 30_000,
        **(read_client_config(Path(config)) if config else {}),
    }


@pytest.fixture(scope="module")
def admin(kafka) -> Iterator[KafkaAdminClient]:
    """An admin client for the module; fails at once (not one test at a time) when the cluster
    is older than 3.9 or has no tiered storage."""
    client = KafkaAdminClient(**kafka)
    try:
        listoffsets = client.api_versions().get(int(ApiKey.ListOffsets), (0, 0))
        if listoffsets[1] < 9:
            pytest.fail(f"not Kafka >= 3.9: ListOffsets v{listoffsets[1]} < v9 (KIP-1005)")
        broker = str(client.describe_cluster()["brokers"][0]["broker_id"])
        if broker_config(client, broker, "remote.log.storage.system.enable")["value"] != "true":
            pytest.fail(f"broker {broker} has no tiered storage (remote.log.storage.system.enable)")
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def new_topic(admin) -> Iterator:
    """Creates a one-partition topic with the broker's default replication factor (-1,
    KIP-464) and the given configs; returns its name. The module's topics are deleted at its
    end."""
    created: list[str] = []

    def create(**configs: str) -> str:
        name = f"strata-test-{uuid.uuid4().hex[:10]}"
        spec = {"num_partitions": 1, "replication_factor": -1, "configs": configs}
        admin.create_topics({name: spec}, wait_for_metadata=True)
        created.append(name)
        return name

    yield create
    if created:
        admin.delete_topics(created, raise_errors=False)


def broker_config(admin: KafkaAdminClient, broker: str, key: str) -> dict:
    resource = ConfigResource(ConfigResourceType.BROKER, broker)
    return admin.describe_configs([resource], config_filter="all")["broker"][broker][key]


def topic_configs(admin: KafkaAdminClient, topic: str) -> dict[str, dict]:
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    described = admin.describe_configs([resource], config_filter="all", include_synonyms=True)
    return described["topic"][topic]


def produce(kafka: dict, topic: str, count: int, size: int = 100) -> None:
    """``count`` records of ``size`` bytes to partition 0, each acknowledged by every in-sync
    replica (acks=all): the high watermark is at ``count`` when this returns."""
    producer = KafkaProducer(acks="all", **kafka)
    try:
        futures = [producer.send(topic, value=os.urandom(size), partition=0) for _ in range(count)]
        producer.flush(timeout=120)
        assert [f.get(timeout=60).offset for f in futures] == list(range(count))
    finally:
        producer.close(timeout=30)


SPECS = {
    "earliest": OffsetSpec.EARLIEST,
    "earliest_local": OffsetSpec.EARLIEST_LOCAL,
    "latest_tiered": OffsetSpec.LATEST_TIERED,
    "latest": OffsetSpec.LATEST,
}


def offsets(admin: KafkaAdminClient, topic: str) -> dict[str, int]:
    """Partition 0's offsets for -2, -4, -5 and -1, asked of its leader one spec at a time
    (Kafka answers one timestamp per partition per request)."""
    tp = TopicPartition(topic, 0)
    return {
        name: admin.list_partition_offsets({tp: spec})[tp].offset for name, spec in SPECS.items()
    }


def test_describe_cluster_lists_the_live_brokers_and_names_one_of_them_controller(admin):
    cluster = admin.describe_cluster()
    ids = [b["broker_id"] for b in cluster["brokers"]]
    assert cluster["cluster_id"]
    assert ids and len(set(ids)) == len(ids)
    assert all(b["host"] and b["port"] > 0 for b in cluster["brokers"])
    # ZooKeeper mode: the controller (a broker). KRaft (KafkaApis.handleDescribeCluster): the
    # quorum is not reachable from clients, so a random alive broker is named instead.
    assert cluster["controller_id"] in ids


def test_every_broker_reports_its_log_dirs_with_kip827_total_and_usable_bytes(admin, new_topic):
    topic = new_topic()
    brokers = {b["broker_id"] for b in admin.describe_cluster()["brokers"]}
    [described] = admin.describe_topics([topic])
    replicas = set(described["partitions"][0]["replica_nodes"])

    answers = {a["broker"]: a["log_dirs"] for a in admin.describe_log_dirs({topic: [0]})}
    assert set(answers) == brokers
    for broker, dirs in answers.items():
        online = [d for d in dirs if d["error_code"] == 0]
        assert online, f"broker {broker} has no online log dir"
        # DescribeLogDirs v4 (KIP-827, Kafka 3.3): the volume's total and usable bytes
        for d in online:
            assert d["total_bytes"] > 0, d
            assert 0 <= d["usable_bytes"] <= d["total_bytes"], d
        holding = [
            p for d in online for t in d["topics"] if t["name"] == topic for p in t["partitions"]
        ]
        if broker in replicas:  # exactly one dir holds the replica, and not as a future one
            [p] = holding
            assert (p["partition_index"], p["is_future_key"]) == (0, False)
            assert p["partition_size"] >= 0
        else:
            assert holding == []


def test_a_new_tiered_topic_lists_its_offsets_all_local_and_nothing_tiered(admin, kafka, new_topic):
    # a segment that cannot roll during the test (100 MiB, 7 days), whatever the broker's
    # log.segment.bytes / log.roll.ms
    topic = new_topic(
        **{
            "remote.storage.enable": "true",
            "segment.bytes": str(100 * MIB),
            "segment.ms": str(7 * 24 * 3600 * 1000),
        }
    )
    produce(kafka, topic, 100)
    # UnifiedLog.fetchOffsetByTimestamp (3.9): -2 the log start offset, -4 the local log start
    # offset, -1 the log end (the high watermark for a consumer's read_uncommitted), -5
    # highestOffsetInRemoteStorage: -1 until a segment is copied, and RemoteLogManager never
    # copies the active segment
    assert offsets(admin, topic) == {
        "earliest": 0,
        "earliest_local": 0,
        "latest_tiered": -1,
        "latest": 100,
    }


def test_latest_tiered_advances_once_a_rolled_segment_is_copied_to_remote_storage(
    admin, kafka, new_topic
):
    # 1 MiB segments (the smallest Kafka 4.x accepts) and 3 MiB written: at least two roll
    topic = new_topic(
        **{"remote.storage.enable": "true", "segment.bytes": str(MIB), "retention.ms": "-1"}
    )
    count = 3 * 1024
    produce(kafka, topic, count, size=1024)

    def once_tiered() -> dict[str, int] | None:
        seen = offsets(admin, topic)
        return seen if seen["latest_tiered"] >= 0 else None

    # RemoteLogManager's copy task runs every remote.log.manager.task.interval.ms (30 s)
    seen = wait_until(once_tiered, timeout=300, interval=2, what="ListOffsets -5 >= 0")
    assert seen["earliest"] == 0  # infinite retention: nothing deleted, remote or local
    assert seen["latest"] == count
    assert seen["latest_tiered"] < count  # the active segment stays local
    # the tiers leave no gap (KIP-405): what is not in remote storage is still on local disk
    assert seen["earliest"] <= seen["earliest_local"] <= seen["latest_tiered"] + 1


def test_topic_configs_are_described_with_their_sources_and_broker_synonyms(admin, new_topic):
    topic = new_topic(**{"remote.storage.enable": "true", "retention.ms": "86400000"})

    def described() -> dict | None:
        configs = topic_configs(admin, topic)
        return configs if "retention.ms" in configs else None

    # DescribeConfigs is answered from the metadata of whichever broker is asked: wait for the
    # new topic to reach it
    configs = wait_until(described, what="the new topic's configs")
    remote = configs["remote.storage.enable"]
    assert (remote["value"], remote["config_source"]) == ("true", TOPIC_SOURCE)
    # ConfigHelper.createTopicConfigEntry (3.9): a key set on the topic is its own first
    # synonym, followed by the broker-level ones (log.retention.*) that have a value
    retention = configs["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("86400000", TOPIC_SOURCE)
    first, *broker_level = retention["synonyms"]
    assert (first["name"], first["value"], first["source"]) == (
        "retention.ms",
        "86400000",
        TOPIC_SOURCE,
    )
    assert all(s["name"].startswith("log.retention.") for s in broker_level)
    assert all(s["source"] in BROKER_SOURCES for s in broker_level)
    # a key the topic does not set: its first broker synonym's source, else DEFAULT_CONFIG
    assert configs["retention.bytes"]["config_source"] in BROKER_SOURCES

    # tiered storage is a static broker setting (server.properties), not dynamically alterable
    broker = str(admin.describe_cluster()["brokers"][0]["broker_id"])
    system = broker_config(admin, broker, "remote.log.storage.system.enable")
    assert (system["value"], system["read_only"], system["config_source"]) == (
        "true",
        True,
        "STATIC_BROKER_CONFIG",
    )


def test_a_topic_config_set_then_deleted_round_trips_and_kafka_refuses_an_unknown_key(
    admin, new_topic
):
    topic = new_topic()

    def retention() -> tuple[str, str] | None:
        entry = topic_configs(admin, topic).get("retention.ms")
        return (entry["value"], entry["config_source"]) if entry else None

    before = wait_until(retention, what="the new topic's configs")
    assert before[1] in BROKER_SOURCES

    # IncrementalAlterConfigs is applied by the controller and reaches the answering broker
    # with the metadata: each change is waited for, not assumed
    set_op = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})
    assert admin.alter_configs([set_op], incremental=True) == {"topic": {topic: "OK"}}
    wait_until(lambda: retention() == ("3600000", TOPIC_SOURCE), what="retention.ms set")

    delete_op = ConfigResource(
        ConfigResourceType.TOPIC, topic, configs={"retention.ms": ("DELETE", None)}
    )
    assert admin.alter_configs([delete_op], incremental=True) == {"topic": {topic: "OK"}}
    wait_until(lambda: retention() == before, what="retention.ms back to the broker's")

    # LogConfig.validateNames (on the controller): INVALID_CONFIG (40), nothing applied;
    # raise_on_unknown=False so the key reaches Kafka instead of kafka-python's own check
    bogus = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"bogus.key": "1"})
    result = admin.alter_configs([bogus], incremental=True, raise_on_unknown=False)
    assert result["topic"][topic].startswith("[Error 40] InvalidConfigurationError")
    assert "bogus.key" not in topic_configs(admin, topic)
