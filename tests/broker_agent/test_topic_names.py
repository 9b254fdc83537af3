"""Kafka's topic-name rule (``Topic.validate``), and a CLI refusal as one clear line."""

from __future__ import annotations

import json

import pytest

from broker_agent.models import TOPIC_NAME_MAX_LENGTH, validate_topic_name


@pytest.mark.parametrize(
    "name", ["orders-v2", "a", "demo.orders", "my_topic", "A-Z.0_9", "x" * TOPIC_NAME_MAX_LENGTH]
)
def test_kafka_legal_topic_names_are_accepted(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * (TOPIC_NAME_MAX_LENGTH + 1), "at most 249"),
        ("orders v2", "illegal"),
        ("orders/v2", "illegal"),
        ("orders:v2", "illegal"),
        ("ördres", "illegal"),
        ("orders\n", "illegal"),
    ],
)
def test_illegal_topic_names_are_refused_saying_why(name, says):
    with pytest.raises(ValueError, match=says):
        validate_topic_name(name)


def test_cli_creates_a_dashed_topic_and_refuses_an_illegal_one_in_one_line(sim_factory):
    sim = sim_factory(1, 1)
    made = sim.cli("create-topic", "orders-v2", "--partitions", "2", "--replication-factor", "1")
    assert json.loads(made.stdout)["name"] == "orders-v2"
    assert sim.partition("orders-v2", 1).leader == 1

    bad = sim.cli(
        "create-topic", "orders/v2", "--partitions", "1", "--replication-factor", "1", check=False
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "error: INVALID_TOPIC_EXCEPTION: topic name 'orders/v2' is illegal: it may hold only "
        "ASCII letters, digits, '.', '_' and '-'"
    ]
    assert "Traceback" not in bad.stderr

    again = sim.cli(
        "create-topic", "orders-v2", "--partitions", "1", "--replication-factor", "1", check=False
    )
    assert again.returncode == 1
    assert again.stderr.startswith("error: TOPIC_ALREADY_EXISTS: ")
    assert len(again.stderr.strip().splitlines()) == 1


def test_partition_keys_from_a_request_skip_what_is_not_topic_colon_number():
    """A heartbeat's keys come from the network: one that names no partition is skipped, never a
    500 (schemathesis sent ``x:`` and ``x:y``)."""
    from broker_agent.models import partition_key, partition_keys, split_partition_key

    assert split_partition_key(partition_key("demo.orders", 3)) == ("demo.orders", 3)
    keys = ["demo.orders:3", "x:", "x:y", "nocolon", "a:b:7"]
    assert list(partition_keys(keys)) == [("demo.orders:3", "demo.orders", 3), ("a:b:7", "a:b", 7)]
