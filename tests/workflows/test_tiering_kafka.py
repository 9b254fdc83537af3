"""``disable_tiering`` (retain, then delete) and ``enable_tiering`` (after each) end to end on
a ``kafka`` cluster (#36): the simulated cluster registered through its brokers' Kafka listeners (SASL/PLAIN,
as ``make run``'s ``local-kafka``), under a produce load, with a real Celery worker. Each
workflow is requested, planned from the synced inventory, approved and run; its one
IncrementalAlterConfigs is audited and the outcome read back over Kafka's protocol (configs,
ListOffsets -2 / -4 / -5), independently of the steps' own reads."""

from __future__ import annotations

import contextlib

import pytest

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.client import Consumer, Producer
from console.choices import ClusterBackend
from console.models import Cluster, Topic
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import WorkflowState
from workflows.kinds.tiering_kafka import ALTER_CONFIGS
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOPIC = "events"
PARTITIONS = 3


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-tier-kafka"), brokers=3, log_dirs=1) as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    # latest-tiered must stand still this long (the simulated copier runs every 0.5 s)
    return workflow_worker(STRATA_TIER_COPY_QUIET_SECONDS="3")


class _Loaded:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def producer(self) -> Producer:
        return Producer(self.sim.controller, self.sim.secret)

    def consumer(self) -> Consumer:
        return Consumer(self.sim.controller, self.sim.secret)


def _register(sim: Sim) -> Cluster:
    return Cluster.objects.create(
        name="local-kafka",
        backend=ClusterBackend.KAFKA,
        kafka_bootstrap=sim.urls["kafka_bootstrap"],
        kafka_client_config={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "strata",
            "sasl_password_ref": str(sim.secret_file),
        },
    )


@contextlib.contextmanager
def _admin(cluster: Cluster):
    from console.sync.kafka_source import connect_admin

    admin = connect_admin(cluster.kafka_client_kwargs(), timeout=10, request_timeout=20)
    try:
        yield admin
    finally:
        admin.close()


def _offsets(cluster: Cluster, spec: int) -> dict[int, int]:
    from kafka import TopicPartition

    with _admin(cluster) as a:
        got = a.list_partition_offsets({TopicPartition(TOPIC, p): spec for p in range(PARTITIONS)})
    return {tp.partition: at.offset for tp, at in got.items()}


def _configs(cluster: Cluster) -> dict[str, str]:
    from kafka.admin import ConfigResource, ConfigResourceType

    with _admin(cluster) as a:
        got = a.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC)], config_filter="all"
        )
    return {k: c["value"] for k, c in got["topic"][TOPIC].items()}


def _run(api, operator, approvers, cluster: Cluster, kind: str, **params) -> Workflow:
    """Request, plan, approve (as many as the plan needs) and wait for the end."""
    created = request_planned(
        api, operator, {"kind": kind, "cluster": cluster.name, "topic": TOPIC, **params}
    )
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["plan"]["backend"] == "kafka"
    for approver in approvers[: created["approvals_required"]]:
        approved = api(approver).post(
            f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
        )
        assert approved.status_code == 200, approved.json()
    wait_for(
        lambda: Workflow.objects.get(pk=created["id"]).state in WorkflowState.TERMINAL,
        120,
        f"the {kind} workflow",
    )
    wf = Workflow.objects.get(pk=created["id"])
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    return wf


def _sent(wf: Workflow) -> AuditEvent:
    [event] = AuditEvent.objects.filter(workflow=wf, action=ALTER_CONFIGS)
    assert event.outcome == AuditOutcome.SUCCESS
    assert event.target_id == f"local-kafka/{TOPIC}" and event.before["backend"] == "kafka"
    return event


def test_disable_retain_re_enable_and_disable_delete_on_kafka_under_load(
    sim, worker, api, operator, approver, second_approver
):
    sim.cli(
        "create-topic",
        TOPIC,
        "--partitions",
        str(PARTITIONS),
        "--replication-factor",
        "3",
        "--tiered",
        "--segment-bytes",
        "2048",
        "--config",
        "local.retention.bytes=1",  # Kafka refuses copy disable with it: the plan sets -2
    )
    cluster = _register(sim)
    approvers = [approver, second_approver]
    with Load(_Loaded(sim), TOPIC) as load:
        load.wait_acked(400)
        wait_until(
            lambda: all(o >= 0 for o in _offsets(cluster, -5).values()),
            60,
            "every partition tiering",
        )
        run = do_sync_cluster(cluster).run
        assert run.errors == {}, run.errors

        # retain: copying stops, local retention goes to -2 as Kafka requires
        wf = _run(api, operator, approvers, cluster, "disable_tiering", policy="retain")
        assert [c["config"] for c in wf.plan["changes"]] == [
            "local.retention.bytes",
            "remote.log.copy.disable",
        ]
        assert _sent(wf).after == {
            "configs": {"local.retention.bytes": "-2", "remote.log.copy.disable": "true"}
        }
        configs = _configs(cluster)
        assert configs["remote.log.copy.disable"] == "true"
        assert configs["local.retention.bytes"] == "-2"
        stopped = _offsets(cluster, -5)
        assert wf.steps.get(name="verify_copy_stopped").output["latest_tiered"] == {
            str(p): o for p, o in stopped.items()
        }
        load.wait_acked(400)  # more segments close; none is copied
        assert _offsets(cluster, -5) == stopped

        # re-enable: copy disable dropped
        wf = _run(api, operator, approvers, cluster, "enable_tiering")
        assert _sent(wf).after == {"configs": {"remote.log.copy.disable": None}}
        assert _configs(cluster)["remote.log.copy.disable"] == "false"
        wait_until(
            lambda: all(o > stopped[p] for p, o in _offsets(cluster, -5).items()),
            60,
            "copying resumed on every partition",
        )
        assert Topic.objects.get(cluster=cluster, name=TOPIC).tiered_state == "ENABLED"  # synced

        # delete: two approvals; the log start reaches the local log start
        wf = _run(api, operator, approvers, cluster, "disable_tiering", policy="delete")
        assert wf.approvals_required == 2
        assert _sent(wf).after == {
            "configs": {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
        }
        output = wf.steps.get(name="verify_log_start").output
        assert all(
            output["log_start"][p] >= output["earliest_local"][p] for p in output["log_start"]
        )
        start, local = _offsets(cluster, -2), _offsets(cluster, -4)
        assert all(start[p] >= local[p] for p in range(PARTITIONS)), (start, local)

        # re-enable after delete: remote storage on again, the delete flag dropped
        wf = _run(api, operator, approvers, cluster, "enable_tiering")
        assert _sent(wf).after == {
            "configs": {"remote.storage.enable": "true", "remote.log.delete.on.disable": None}
        }
        configs = _configs(cluster)
        assert (configs["remote.storage.enable"], configs["remote.log.delete.on.disable"]) == (
            "true",
            "false",
        )
        load.wait_acked(100)
    assert not load.errors, load.errors
    assert verify_chain().ok
