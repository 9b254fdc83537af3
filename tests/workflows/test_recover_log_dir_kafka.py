"""``recover_log_dir`` on a ``kafka`` cluster (#36): the simulated cluster registered as
``local-kafka`` (its brokers' Kafka listeners, SASL/PLAIN), under a produce load, with a real
Celery worker.

Kafka keeps a failed dir offline until the broker restarts and has no restart call, so the
runbook cordons the dir (IncrementalAlterConfigs on ``cordoned.log.dirs``), waits for the
operator to replace the disk and confirm, lifts the cordon, waits for the operator to restart
the broker and confirm, then verifies from Kafka's
answers: the dir ONLINE in DescribeLogDirs, the replicas back in the ISR, no reassignment left.
It ends with the preferred-leader election of the broker. With moves:
test_recover_log_dir_kafka_moves. The agents' runbook: test_recover_log_dir,
test_recover_manual_restart."""

from __future__ import annotations

import pytest

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import LogDirState
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.errors import WorkflowError
from workflows.kinds import get_kind
from workflows.kinds.disks_kafka import NO_REPLICA_MOVES, KafkaRecoverAction, KafkaRecoverPlan
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_plan_stable, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOPIC = "orders-disk-kafka"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-recover-kafka"), brokers=3, log_dirs=2) as s:
        s.controller.create_topic(TOPIC, 2, 3)
        wait_until(
            lambda: all(len(p.created) == 3 for p in s.controller.topic(TOPIC).partitions),
            30,
            "replicas created",
        )
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def cluster(sim: Sim) -> Cluster:
    """``local-kafka``, synced once (DescribeLogDirs and cordoned.log.dirs learnt)."""
    c = sim.register_kafka()
    run = do_sync_cluster(c).run
    assert run.errors == {}, run.errors
    c.refresh_from_db()
    assert c.backend_features["api_versions"].get("35"), "DescribeLogDirs advertised"
    assert c.backend_features["broker_configs"]["cordoned.log.dirs"]
    return c


def _plan(params: dict):
    """The worker's planning of ``params``, here (a refusal raises)."""
    kind = get_kind("recover_log_dir")
    return kind.plan(kind.read_params(params))


def _waiting_at(wf_id: int, step: str) -> bool:
    return Workflow.objects.filter(
        pk=wf_id, state=WorkflowState.WAITING, steps__name=step, steps__state=StepState.WAITING
    ).exists()


def _cordoned(sim: Sim, broker: int, name: str) -> bool:
    with sim.agent(broker) as a:
        return next(d.cordoned for d in a.log_dirs() if d.name == name)


def test_a_failed_dir_is_cordoned_replaced_and_restarted_by_the_operator_then_verified(
    sim, worker, cluster, api, operator, approver
):
    with Load(sim, TOPIC) as load:
        load.wait_acked(50)
        broker = sim.controller.topic(TOPIC).partitions[0].leader
        name = sim.dir_of(broker, TOPIC, 0)
        assert name is not None
        # a healthy dir is refused (DescribeLogDirs answers it without an error)
        healthy = {"cluster": cluster.name, "broker": broker, "log_dir": name, "mode": "replace"}
        with pytest.raises(WorkflowError, match="ONLINE"):
            _plan(healthy)

        sim.break_log_dir(broker, name)  # mv logdir logdir.failed; a file at its path
        with pytest.raises(WorkflowError, match=r"static log\.dirs"):
            _plan({**healthy, "mode": "remove"})
        # move_replicas on 3 brokers and RF 3: no broker can take a replica, so none moves
        # (the restarted broker re-creates them, as without moves)
        unmovable = _plan({**healthy, "move_replicas": True})
        assert "moves" not in unmovable.actions.dump()
        assert "reassign_replicas" not in unmovable.actions.steps
        assert unmovable.information["not_moved"][f"{TOPIC}:0"].startswith(
            "every live broker already holds a replica"
        )
        params = healthy
        wait_plan_stable("recover_log_dir", params)
        created = request_planned(api, operator, {"kind": "recover_log_dir", **params})
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        plan = created["plan"]
        assert (plan["backend"], plan["restart"], plan["mode"]) == ("kafka", "manual", "replace")
        assert plan["steps"] == [
            "cordon_log_dir",
            "confirm_disk_replaced",
            "uncordon_log_dir",
            "restart_broker",
            "verify",
            "elect_preferred_leaders",
        ]
        assert plan["cordon"].startswith("IncrementalAlterConfigs: APPEND ")
        assert plan["log_dir_path"].endswith(f"/broker-{broker}/{name}")
        assert {"topic": TOPIC, "partition": 0} in plan["replicas"]
        assert plan["replica_moves"] == NO_REPLICA_MOVES
        information = created["plan_information"]
        assert information["log_dir_state"] == LogDirState.OFFLINE
        assert not _cordoned(sim, broker, name)  # planning changed nothing

        wf_id = created["id"]
        approved = api(approver).post(
            f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]}
        )
        assert approved.status_code == 200, approved.json()
        wait_for(lambda: _waiting_at(wf_id, "confirm_disk_replaced"), 120, "the disk gate")
        wf = Workflow.objects.get(pk=wf_id)
        assert f"Replace the disk of {name} on broker {broker}" in wf.waiting_reason
        assert wf.lease_owner == ""  # waiting on a person holds no worker
        assert _cordoned(sim, broker, name)  # cordoned.log.dirs set through Kafka's protocol
        sim.replace_disk(broker, name)
        assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200

        wait_for(lambda: _waiting_at(wf_id, "restart_broker"), 120, "the restart gate")
        assert f"Restart broker {broker}" in Workflow.objects.get(pk=wf_id).waiting_reason
        assert not _cordoned(sim, broker, name)  # lifted before the restart
        # the running broker keeps the dir offline (KIP-112) though the new disk works
        assert sim.dir_state(broker, name) == LogDirState.OFFLINE
        sim.cli("restart-broker", str(broker))  # the operator's restart, by hand
        confirmed = api(operator).post(f"/workflows/{wf_id}/confirm", {"comment": "new disk"})
        assert confirmed.status_code == 200
        wait_for(
            lambda: Workflow.objects.get(pk=wf_id).state in WorkflowState.TERMINAL, 180, "the end"
        )
        load.wait_acked(50)  # the load goes on after the recovery
    assert not load.errors, load.errors

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    restart = wf.steps.get(name="restart_broker")
    assert restart.confirmed_by == operator and restart.confirmed_at is not None
    verified = wf.steps.get(name="verify").output
    assert verified["log_dir_state"] == LogDirState.ONLINE
    assert verified["replicas_in_isr"] == len(plan["replicas"]) and verified["reassignments"] == []
    assert sim.dir_state(broker, name) == LogDirState.ONLINE
    assert sim.dir_of(broker, TOPIC, 0) == name  # re-created on the new disk
    # the restart moved leadership off every partition of the broker; the election brings it
    # back where the broker is the preferred replica and in the ISR (ELECTION_NOT_NEEDED is fine)
    elected = wf.steps.get(name="elect_preferred_leaders").output
    for key in elected["elected"]:
        topic, p = key.rsplit(":", 1)
        assert sim.controller.topic(topic).partitions[int(p)].leader == broker
    assert AuditEvent.objects.filter(
        workflow=wf, action=KafkaRecoverAction.ELECT_PREFERRED
    ).count() == (1 if elected["elected"] or elected.get("not_elected") else 0)
    [cordon] = AuditEvent.objects.filter(workflow=wf, action=KafkaRecoverAction.CORDON)
    [uncordon] = AuditEvent.objects.filter(workflow=wf, action=KafkaRecoverAction.UNCORDON)
    for event, was in ((cordon, False), (uncordon, True)):
        assert event.outcome == AuditOutcome.SUCCESS
        assert event.target_id == f"{cluster.name}/{broker}:{name}"
        assert event.before == {"log_dir": name, "cordoned": was}
    confirmations = AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_CONFIRMED)
    assert sorted(e.extra["step"] for e in confirmations) == [
        "confirm_disk_replaced",
        "restart_broker",
    ]
    assert {e.actor_id for e in confirmations} == {operator.pk}
    assert verify_chain().ok


def test_a_stored_kafka_plan_is_read_and_reviewed_as_kafkas():
    kind = get_kind("recover_log_dir")
    stored = {
        "summary": "s",
        "backend": "kafka",
        "broker": 1,
        "log_dir": "data-0",
        "log_dir_path": "/var/lib/kafka/data-0",
        "mode": "replace",
        "restart": "manual",
        "cordon": "unavailable: the brokers have no cordoned.log.dirs config (KIP-1066 ...)",
        "replica_count": 1,
        "replicas": [{"topic": "orders", "partition": 0}],
        "replica_moves": NO_REPLICA_MOVES,
        "steps": ["restart_broker", "verify"],
    }
    plan = kind.read_plan(stored)
    assert isinstance(plan, KafkaRecoverPlan)
    names = [s.name for s in kind.steps(kind.read_params({"cluster": "c", **_params()}), plan)]
    assert names == ["restart_broker", "verify"]  # no cordon step where the brokers lack it
    rows = kind.review(stored, {"log_dir_state": "OFFLINE"})
    assert rows[0].after.startswith("unavailable: ")
    assert any("replace the disk and restart broker 1" in r.what for r in rows)
    cordoned = {
        **stored,
        "cordon": "IncrementalAlterConfigs: APPEND /var/lib/kafka/data-0 to broker 1's ...",
        "steps": [
            "cordon_log_dir",
            "confirm_disk_replaced",
            "uncordon_log_dir",
            "restart_broker",
            "verify",
        ],
    }
    got = kind.steps(kind.read_params({"cluster": "c", **_params()}), kind.read_plan(cordoned))
    assert [s.name for s in got] == cordoned["steps"]
    assert [s.name for s in got if s.gate] == ["confirm_disk_replaced", "restart_broker"]


def _params() -> dict:
    return {"broker": 1, "log_dir": "data-0", "mode": "replace"}
