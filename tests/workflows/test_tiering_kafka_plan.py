"""The tiering kinds' plans on a ``kafka`` cluster (#36), from the PostgreSQL inventory alone:
every config change before → after (with the ``local.retention.*`` change Kafka requires for
``remote.log.copy.disable=true``), the statement that there is no tiered epoch and no per-broker
acknowledgement, the delete policy's destructive row, and the steps; the steps against a fake
of the seam's kafka side (once, audited; a change applied but not on record sent again; a topic
changed since the plan; an unreachable cluster). End to end on the simulated cluster's Kafka
listener: test_tiering_kafka."""

from __future__ import annotations

import contextlib

import pytest

from audit.models import AuditEvent
from broker_agent.contract.choices import TieredState
from console.choices import SyncTrigger
from console.models import Cluster, Topic
from console.sync import do_sync_cluster
from tests.console.factories import ClusterBuilder
from workflows.actions import preview_plan
from workflows.kinds import Refusal, get_kind
from workflows.kinds.cluster_access import Unreachable
from workflows.kinds.cluster_writes import KafkaWrites
from workflows.kinds.tiering_kafka import ALTER_CONFIGS, NO_EPOCH, KafkaTieringPlan
from workflows.models import Workflow

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
    assert "deleted" in red.after and "in remote storage only" in red.size
    assert "not available for this cluster" in red.size  # never a size of 0
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


class _Kafka(KafkaWrites):
    """The seam's kafka side without a cluster: a topic's configs, the changes sent to it."""

    def __init__(self, configs: dict[str, str], *, unreachable: bool = False) -> None:
        self.configs, self.unreachable = dict(configs), unreachable
        self.sent: list[dict] = []

    def topic_configs(self, topic: str) -> dict:
        if self.unreachable:
            raise Unreachable("Kafka did not answer: KafkaConnectionError")
        return dict(self.configs)

    def alter_topic_configs(self, topic: str, changes: dict) -> None:
        self.sent.append(changes)
        for k, v in changes.items():
            self.configs[k] = "false" if v is None else v

    def offsets(self, topic: str, partitions: list[int], spec: int) -> dict[int, int]:
        return dict.fromkeys(partitions, 40)


ORDERS_NOW = {
    "remote.storage.enable": "true",
    "remote.log.copy.disable": "false",
    "retention.ms": "86400000",
    "local.retention.ms": "3600000",
}
RETAIN = {"local.retention.ms": "-2", "remote.log.copy.disable": "true"}


def _run_retain(kafka: _Kafka, operator, approver, monkeypatch, settings) -> Workflow:
    from audit.choices import AuditContext
    from tests.workflows.conftest import approve, planned
    from workflows import engine
    from workflows.actions import do_request_workflow
    from workflows.kinds import tiering_kafka

    settings.STRATA_TIER_COPY_QUIET_SECONDS = 0
    monkeypatch.setattr(tiering_kafka, "writes_for", lambda name: contextlib.nullcontext(kafka))
    monkeypatch.setattr(tiering_kafka, "sync_console", lambda ctx: None)
    wf = planned(
        do_request_workflow(
            actor=operator,
            kind="disable_tiering",
            params={"cluster": "prod", "topic": "orders", "policy": "retain"},
            reason="r",
            context=AuditContext.CLI,
        )
    )
    approve(wf, approver)
    engine.run(wf.pk)
    wf.refresh_from_db()
    return wf


def test_the_change_is_sent_once_audited_and_read_back(
    inventory, operator, approver, monkeypatch, settings
):
    kafka = _Kafka(ORDERS_NOW)
    wf = _run_retain(kafka, operator, approver, monkeypatch, settings)
    assert wf.state == "succeeded", (wf.error_code, wf.error_message)
    assert kafka.sent == [RETAIN]
    [event] = AuditEvent.objects.filter(workflow=wf, action=ALTER_CONFIGS)
    assert event.before["configs"] == {
        "local.retention.ms": "3600000",
        "remote.log.copy.disable": "false",
    }
    assert event.after == {"configs": RETAIN}
    assert wf.steps.get(name="verify_copy_stopped").output["latest_tiered"] == {
        "0": 40,
        "1": 40,
        "2": 40,
    }


def test_a_change_applied_but_not_on_record_is_sent_again_so_the_audit_holds_it(
    inventory, operator, approver, monkeypatch, settings
):
    """A worker killed between IncrementalAlterConfigs and its audit: the next run finds the
    topic in the planned state with nothing on record and sends the same change again (a no-op
    for Kafka), audited once."""
    kafka = _Kafka({**ORDERS_NOW, **RETAIN})
    wf = _run_retain(kafka, operator, approver, monkeypatch, settings)
    assert wf.state == "succeeded", (wf.error_code, wf.error_message)
    assert kafka.sent == [RETAIN]
    assert AuditEvent.objects.filter(workflow=wf, action=ALTER_CONFIGS).count() == 1


def test_a_topic_changed_since_the_plan_fails_the_step_and_sends_nothing(
    inventory, operator, approver, monkeypatch, settings
):
    deleted = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    kafka = _Kafka(deleted)
    wf = _run_retain(kafka, operator, approver, monkeypatch, settings)
    assert (wf.state, wf.error_code) == ("failed", "PLAN_CHANGED")
    assert kafka.sent == []


def test_an_unreachable_cluster_makes_the_step_wait_not_fail(
    inventory, operator, approver, monkeypatch, settings
):
    kafka = _Kafka(ORDERS_NOW, unreachable=True)
    wf = _run_retain(kafka, operator, approver, monkeypatch, settings)
    assert wf.state == "waiting"
    assert wf.steps.get(name="alter_tiering_configs").state != "failed"
    assert kafka.sent == []
