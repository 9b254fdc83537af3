"""The replication quotas kafka-reassign-partitions --throttle sets, as Kafka 3.9 takes them over
IncrementalAlterConfigs: the topic lists ``leader/follower.replication.throttled.replicas``
(``*`` or ``partition:broker`` entries, APPEND / SUBTRACT as any list config) and the broker
rates ``leader/follower.replication.throttled.rate`` (longs >= 0, on the broker's own id), each
refused as Kafka refuses it and read back by DescribeConfigs."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from .conftest import wait_until
from .test_kafka_listener import FAST, _alter, admin, kafka_ports

pytestmark = pytest.mark.integration

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
NONE, INVALID_CONFIG, INVALID_REQUEST = 0, 40, 42
BROKER = 4
LEADER = "leader.replication.throttled.replicas"
FOLLOWER = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


def test_throttled_replicas_are_list_configs_and_the_rates_are_dynamic_broker_longs(sim_factory):
    sim = sim_factory(2, 1, *FAST)
    sim.controller.create_topic("orders", 2, 2)
    port = kafka_ports(sim)[1]

    def topic_config(key: str) -> str:
        with admin(sim) as a:
            got = a.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "orders")], config_filter="all"
            )
        return got["topic"]["orders"][key]["value"]

    def broker_configs() -> dict[str, str]:
        with admin(sim) as a:
            got = a.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
            )
        return {k: c["value"] for k, c in got["broker"]["1"].items()}

    assert topic_config(LEADER) == ""  # Kafka's default: no replica throttled
    assert _alter(port, "orders", [(LEADER, APPEND, "0:1,0:2"), (FOLLOWER, SET, "1:2")]) == (
        NONE,
        None,
    )
    wait_until(lambda: topic_config(LEADER) == "0:1,0:2", 10, what="the broker's cache")
    assert topic_config(FOLLOWER) == "1:2"
    assert _alter(port, "orders", [(LEADER, APPEND, "0:1")])[0] == NONE  # listed once
    assert _alter(port, "orders", [(LEADER, SUBTRACT, "0:1")])[0] == NONE
    wait_until(lambda: topic_config(LEADER) == "0:2", 10, what="subtracted")
    code, message = _alter(port, "orders", [(LEADER, SET, "0:x")])
    assert code == INVALID_CONFIG
    assert message == (
        f"Invalid value 0:x for configuration {LEADER}: must be the literal '*' or a list of "
        "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )
    assert _alter(port, "orders", [(FOLLOWER, SET, "*")])[0] == NONE
    assert _alter(port, "orders", [(FOLLOWER, APPEND, "0:1")])[0] == INVALID_CONFIG  # "*,0:1"
    assert _alter(port, "orders", [(LEADER, DELETE, None), (FOLLOWER, DELETE, None)])[0] == NONE
    wait_until(lambda: topic_config(LEADER) == topic_config(FOLLOWER) == "", 10, what="deleted")

    rates = [(LEADER_RATE, SET, "1048576"), (FOLLOWER_RATE, SET, "1048576")]
    assert _alter(port, "1", rates, resource_type=BROKER) == (NONE, None)
    got = broker_configs()
    assert (got[LEADER_RATE], got[FOLLOWER_RATE]) == ("1048576", "1048576")
    code, message = _alter(port, "1", [(LEADER_RATE, SET, "-1")], resource_type=BROKER)
    assert (code, message) == (
        INVALID_CONFIG,
        f"Invalid value -1 for configuration {LEADER_RATE}: Value must be at least 0",
    )
    assert _alter(port, "1", [(LEADER_RATE, APPEND, "1")], resource_type=BROKER)[0] == (
        INVALID_REQUEST
    )
    assert _alter(port, "2", rates, resource_type=BROKER)[0] == INVALID_REQUEST  # not its id
    assert broker_configs()[LEADER_RATE] == "1048576"  # the refusals changed nothing
    deleted = [(LEADER_RATE, DELETE, None), (FOLLOWER_RATE, DELETE, None)]
    assert _alter(port, "1", deleted, resource_type=BROKER)[0] == NONE
    assert LEADER_RATE not in broker_configs() and FOLLOWER_RATE not in broker_configs()
