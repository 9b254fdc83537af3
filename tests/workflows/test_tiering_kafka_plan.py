"""The tiering kinds' plans on a ``kafka`` cluster (#36), from the PostgreSQL inventory alone:
every config change before → after (with the ``local.retention.*`` change Kafka requires for
``remote.log.copy.disable=true``), the statement that there is no tiered epoch and no per-broker
acknowledgement, the delete policy's destructive row, and the steps. End to end on the simulated
cluster's Kafka listener: test_tiering_kafka."""

from __future__ import annotations

import pytest

from broker_agent.choices import TieredState
from console.choices import SyncTrigger
from console.models import Cluster, Topic
from console.sync import do_sync_cluster
from tests.console.factories import ClusterBuilder
from workflows.actions import preview_plan
from workflows.kinds import Refusal, get_kind
from workflows.kinds.tiering_kafka import NO_EPOCH, KafkaTieringPlan

pytestmark = pytest.mark.django_db

DISABLE, ENABLE = get_kind("disable_tiering"), get_kind("enable_tiering")


@pytest.fixture
def inventory() -> Cluster:
    """A kafka cluster synced with ``orders`` tiered and a local retention shorter than its
    retention (Kafka refuses copy disable so), ``logs`` tiered at the defaults, ``kept``
    disabled with retain and ``plain`` never tiered."""
    cluster = Cluster.objects.create(
        name="prod",
        backend="kafka",
        kafka_bootstrap="kafka-1:9092",
        backend_features={"api_versions": {"2": [0, 9]}},
    )
    b = ClusterBuilder(brokers=3, log_dirs=1)
    b.add_topic(
        "orders",
        partitions=3,
        tiered=True,
        configs={"retention.ms": "86400000", "local.retention.ms": "3600000"},
    )
    b.add_topic("logs", partitions=2, tiered=True)
    b.add_topic("kept", partitions=2, tiered=True)
    b.add_topic("plain", partitions=1)
    do_sync_cluster(cluster, source=b.source(set()), full=True, trigger=SyncTrigger.BEAT)
    Topic.objects.filter(cluster=cluster, name="kept").update(
        tiered_state=TieredState.DISABLED,
        disable_policy="retain",
        configs={"remote.storage.enable": "true", "remote.log.copy.disable": "true"},
    )
    cluster.refresh_from_db()
    return cluster


def _plan(kind, topic: str, **raw):
    return kind.plan(kind.clean({"cluster": "prod", "topic": topic, **raw}))


def _diff(actions: dict) -> list[tuple]:
    return [(c["config"], c["before"], c["default"], c["after"]) for c in actions["changes"]]


def test_retain_sets_local_retention_to_minus_2_and_stops_copying(inventory):
    plan = _plan(DISABLE, "orders", policy="retain")
    actions = plan.actions.dump()
    assert actions["backend"] == "kafka" and actions["no_epoch"] == NO_EPOCH
    assert _diff(actions) == [
        ("local.retention.ms", "3600000", False, "-2"),
        ("remote.log.copy.disable", "false", True, "true"),
    ]
    assert actions["steps"] == [
        "alter_tiering_configs",
        "verify_tiering_configs",
        "verify_copy_stopped",
    ]
    assert actions["partitions"] == [0, 1, 2]
    rows = DISABLE.review(actions, plan.information)
    assert [(r.target, r.before, r.after) for r in rows[:2]] == [
        ("topic orders: local.retention.ms", "3600000", "-2"),
        ("topic orders: remote.log.copy.disable", "false (default)", "true"),
    ]
    assert any("no per-broker acknowledgement" in r.what for r in rows)
    assert not any(r.destructive for r in rows)
    # at the defaults (local.retention.* -2) copy disable is the only change
    assert _diff(_plan(DISABLE, "logs").actions.dump()) == [
        ("remote.log.copy.disable", "false", True, "true")
    ]


def test_delete_turns_storage_off_with_the_delete_flag_in_red(inventory):
    params = DISABLE.clean({"cluster": "prod", "topic": "orders", "policy": "delete"})
    plan = DISABLE.plan(params)
    actions = plan.actions.dump()
    assert _diff(actions) == [
        ("remote.storage.enable", "true", False, "false"),
        ("remote.log.delete.on.disable", "false", True, "true"),
    ]
    assert actions["steps"][-1] == "verify_log_start"
    [red] = [r for r in DISABLE.review(actions, plan.information) if r.destructive]
    assert "deleted" in red.after and "remote segments" in red.size
    assert DISABLE.approvals_for(params) == 2


def test_re_enable_drops_the_copy_disable_and_verifies_the_configs(inventory):
    plan = _plan(ENABLE, "kept")
    actions = plan.actions.dump()
    assert _diff(actions) == [("remote.log.copy.disable", "true", False, None)]
    assert actions["steps"] == ["alter_tiering_configs", "verify_tiering_configs"]
    rows = ENABLE.review(actions, plan.information)
    assert rows[0].after == "override deleted (Kafka's default)"


def test_a_stored_kafka_plan_reads_back_as_its_model_with_its_steps(inventory):
    actions = _plan(DISABLE, "orders", policy="delete").actions.dump()
    params = DISABLE.read_params({"cluster": "prod", "topic": "orders", "policy": "delete"})
    plan = DISABLE.read_plan(actions)
    assert isinstance(plan, KafkaTieringPlan)
    assert [s.name for s in DISABLE.steps(params, plan)] == actions["steps"]


@pytest.mark.parametrize(
    "kind, topic, code",
    [
        (DISABLE, "kept", "INVALID_STATE_TRANSITION"),  # disabled already
        (DISABLE, "plain", "INVALID_STATE_TRANSITION"),  # never tiered
        (ENABLE, "logs", "INVALID_REQUEST"),  # tiered already
    ],
)
def test_refusals(inventory, kind, topic, code):
    with pytest.raises(Refusal) as refused:
        _plan(kind, topic)
    assert refused.value.code == code


def test_the_tiering_kinds_are_requestable_on_a_kafka_cluster(inventory):
    assert preview_plan("disable_tiering", {"cluster": "prod", "topic": "orders"}).target
    assert preview_plan("enable_tiering", {"cluster": "prod", "topic": "kept"}).target
