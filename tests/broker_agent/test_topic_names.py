"""Kafka's topic-name rule (``Topic.validate``), and a CLI refusal as one clear line."""

from __future__ import annotations

import json

import pytest

from broker_agent.contract.models import TOPIC_NAME_MAX_LENGTH, validate_topic_name


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
    from broker_agent.contract.models import partition_key, partition_keys, split_partition_key

    assert split_partition_key(partition_key("demo.orders", 3)) == ("demo.orders", 3)
    keys = ["demo.orders:3", "x:", "x:y", "nocolon", "a:b:7"]
    assert list(partition_keys(keys)) == [("demo.orders:3", "demo.orders", 3), ("a:b:7", "a:b", 7)]


@pytest.fixture
def controller(tmp_path):
    from broker_agent.contract.models import BrokerHeartbeat
    from broker_agent.simulator.controller import Controller

    c = Controller(str(tmp_path / "controller"), "names-test")
    c.heartbeat(BrokerHeartbeat(broker_id=1, url="http://127.0.0.1:1"))
    return c


def _create(controller, name):
    from broker_agent.contract.models import CreateTopicRequest

    return controller.create_topic(
        CreateTopicRequest(name=name, partitions=1, replication_factor=1)
    )


@pytest.mark.parametrize(("existing", "new"), [("demo.orders", "demo_orders"), ("a_b.c", "a.b_c")])
def test_a_name_that_collides_once_dot_and_underscore_are_alike_is_invalid_topic_exception(
    controller, existing, new
):
    """Kafka's ``Topic.hasCollision`` (``unifyCollisionChars``: ``.`` read as ``_``), refused by
    ``ReplicationControlManager.validateNewTopicNames`` with INVALID_TOPIC_EXCEPTION "Topic '...'
    collides with existing topic: ..."; the exact same name stays TOPIC_ALREADY_EXISTS."""
    from broker_agent.contract.errors import ApiError

    _create(controller, existing)
    with pytest.raises(ApiError) as refused:
        _create(controller, new)
    assert (refused.value.status, refused.value.error) == (400, "INVALID_TOPIC_EXCEPTION")
    assert refused.value.message == f"Topic '{new}' collides with existing topic: {existing}"
    assert new not in controller.topics

    with pytest.raises(ApiError) as again:
        _create(controller, existing)
    assert again.value.error == "TOPIC_ALREADY_EXISTS"

    _create(controller, "demo-orders")  # '-' is not a collision character
    assert "demo-orders" in controller.topics


def test_colliding_topic_names_the_existing_topic_and_ignores_the_same_name():
    from broker_agent.contract.models import colliding_topic

    assert colliding_topic("a.b", ["a_b", "x"]) == "a_b"
    assert colliding_topic("a_b", ["a.b"]) == "a.b"
    assert colliding_topic("a.b", ["a.b"]) is None
    assert colliding_topic("a-b", ["a_b", "a.b"]) is None
    assert colliding_topic("ab", ["a_b"]) is None


def test_creating_the_cluster_metadata_topic_is_invalid_request(controller):
    """``ControllerApis.createTopics`` / ``KafkaApis``: "Creation of internal topic
    __cluster_metadata is prohibited." (INVALID_REQUEST), although the name itself is legal."""
    from broker_agent.contract.errors import ApiError

    assert validate_topic_name("__cluster_metadata") == "__cluster_metadata"
    with pytest.raises(ApiError) as refused:
        _create(controller, "__cluster_metadata")
    assert (refused.value.status, refused.value.error) == (400, "INVALID_REQUEST")
    assert refused.value.message == "Creation of internal topic __cluster_metadata is prohibited."
    assert "__cluster_metadata" not in controller.topics


@pytest.mark.parametrize(
    ("name", "internal"),
    [
        ("__consumer_offsets", True),
        ("__transaction_state", True),
        ("__share_group_state", True),
        ("__cluster_metadata", False),
        ("__consumer_offsets_v2", False),
        ("consumer_offsets", False),
        ("orders", False),
    ],
)
def test_kafka_internal_topics_are_exactly_topic_is_internal(name, internal):
    """Kafka's ``Topic.isInternal``: membership of ``Topic.INTERNAL_TOPICS``, not a ``__``
    prefix."""
    from broker_agent.contract.models import is_internal_topic

    assert is_internal_topic(name) is internal
