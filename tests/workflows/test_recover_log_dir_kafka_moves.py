"""``recover_log_dir`` on a ``kafka`` cluster with ``move_replicas`` (#36): the simulated cluster
registered as ``local-kafka`` (4 brokers, its Kafka listeners), under a produce load, with a real
Celery worker.

Before the disk is replaced, each partition with a replica on the failed dir is reassigned to a
broker outside its replica set (AlterPartitionReassignments) under kafka-reassign-partitions'
throttle, set before and removed after; the workflow waits for the reassignments through
ListPartitionReassignments and Metadata; then the operator's two manual steps, the verification,
and the preferred-leader election of broker N. The plan's rules: test_recover_kafka_moves_plan;
without moves: test_recover_log_dir_kafka."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import LogDirState
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Load
from workflows.choices import StepState, WorkflowState
from workflows.kinds.cluster_writes import KafkaWrites, writes_for
from workflows.kinds.disks_kafka import KafkaRecoverAction
from workflows.kinds.disks_kafka_moves import NO_IN_BROKER_MOVES, MoveAction
from workflows.models import Workflow

from .conftest import wait_for
from .simcluster import Sim, request_planned, sim_cluster, wait_plan_stable, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOPIC = "orders-moves-kafka"
LEADER = "leader.replication.throttled.replicas"
FOLLOWER = "follower.replication.throttled.replicas"
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
MOVE_STEPS = [
    "cordon_log_dir",
    "set_replication_throttle",
    "reassign_replicas",
    "wait_reassignments",
    "remove_replication_throttle",
    "confirm_disk_replaced",
    "uncordon_log_dir",
    "restart_broker",
    "verify",
    "elect_preferred_leaders",
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-moves-kafka"), brokers=4, log_dirs=2) as s:
        s.controller.create_topic(TOPIC, 4, 2)
        wait_until(
            lambda: all(len(p.created) == 2 for p in s.controller.topic(TOPIC).partitions),
            30,
            "replicas created",
        )
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def cluster(sim: Sim) -> Cluster:
    c = sim.register_kafka()
    run = do_sync_cluster(c).run
    assert run.errors == {}, run.errors
    return c


def _body(params: dict) -> dict:
    """The API request: the flat fields, and the kafka path's own in ``params``."""
    own = ("move_replicas", "throttle_bytes_per_s")
    return {
        "kind": "recover_log_dir",
        **{k: v for k, v in params.items() if k not in own},
        "params": {k: v for k, v in params.items() if k in own},
    }


def _waiting_at(wf_id: int, step: str) -> bool:
    return Workflow.objects.filter(
        pk=wf_id, state=WorkflowState.WAITING, steps__name=step, steps__state=StepState.WAITING
    ).exists()


def _throttles(cluster: Cluster, brokers: list[int]) -> dict:
    with writes_for(cluster.name) as kafka:
        assert isinstance(kafka, KafkaWrites)
        topic = kafka.topic_configs(TOPIC)
        rates = {b: kafka.broker_configs(b) for b in brokers}
    return {
        "topic": (topic[LEADER], topic[FOLLOWER]),
        "rates": {b: tuple(r.get(k) for k in RATES) for b, r in rates.items()},
    }


def test_the_failed_dirs_partitions_move_to_other_brokers_under_a_throttle_before_the_disk_gate(
    sim, worker, cluster, api, operator, approver
):
    with Load(sim, TOPIC) as load:
        load.wait_acked(50)
        broker = sim.controller.topic(TOPIC).partitions[0].leader
        name = sim.dir_of(broker, TOPIC, 0)
        assert name is not None
        sim.break_log_dir(broker, name)
        params = {
            "cluster": cluster.name,
            "broker": broker,
            "log_dir": name,
            "mode": "replace",
            "move_replicas": True,
            "throttle_bytes_per_s": 2_000_000,
        }
        wait_plan_stable("recover_log_dir", params)
        created = request_planned(api, operator, _body(params))
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        plan, information = created["plan"], created["plan_information"]
        assert plan["steps"] == MOVE_STEPS
        on_dir = {(r["topic"], r["partition"]) for r in plan["replicas"]}
        moves = {(m["topic"], m["partition"]): m for m in plan["moves"]}
        assert (TOPIC, 0) in on_dir and set(moves) == on_dir  # 4 brokers, RF 2: all can move
        for m in moves.values():
            before, after, target = m["replicas_before"], m["replicas_after"], m["target"]
            assert broker in before and target not in before
            assert after == [target if b == broker else b for b in before]
        assert plan["throttle"]["rate_bytes_per_s"] == 2_000_000
        assert broker in plan["throttle"]["brokers"]
        assert NO_IN_BROKER_MOVES in plan["replica_moves"]
        # Kafka moved leadership off the failed dir when it failed: shown from Metadata
        assert information["leaders_now"]
        assert all(x["leader"] != broker for x in information["leaders_now"])
        reassign_rows = [r for r in created["plan_summary"] if r["what"].startswith("Reassign ")]
        assert len(reassign_rows) == len(moves) and all(r["destructive"] for r in reassign_rows)
        assert (
            sim.controller.topic(TOPIC).partitions[0].replicas
            == moves[(TOPIC, 0)]["replicas_before"]
        )  # planning moved nothing

        wf_id = created["id"]
        approved = api(approver).post(
            f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]}
        )
        assert approved.status_code == 200, approved.json()
        wait_for(lambda: _waiting_at(wf_id, "confirm_disk_replaced"), 180, "the disk gate")
        # re-protected before the disk gate: every moved partition fully replicated without N
        for (topic, p), m in moves.items():
            part = next(x for x in sim.controller.topic(topic).partitions if x.partition == p)
            assert part.replicas == m["replicas_after"]
            assert sorted(part.isr) == sorted(m["replicas_after"])
            assert part.adding_replicas == part.removing_replicas == []
        # the throttle is gone once the moves finished
        brokers = plan["throttle"]["brokers"]
        wait_until(
            lambda: (
                _throttles(cluster, brokers)
                == {"topic": ("", ""), "rates": {b: (None, None) for b in brokers}}
            ),
            20,
            "the throttle removed",
        )
        wf = Workflow.objects.get(pk=wf_id)
        set_events = AuditEvent.objects.filter(workflow=wf, action=MoveAction.THROTTLE_SET)
        removed = AuditEvent.objects.filter(workflow=wf, action=MoveAction.THROTTLE_REMOVE)
        assert set_events.count() == removed.count() == 1 + len(brokers)  # a topic, its brokers
        rate_set = set_events.get(target_id=f"{cluster.name}/{broker}")
        assert rate_set.before == {RATES[0]: None, RATES[1]: None}
        [reassign] = AuditEvent.objects.filter(workflow=wf, action=MoveAction.REASSIGN)
        assert reassign.after["sent"] == sorted(f"{t}:{p}" for t, p in moves)
        assert wf.steps.get(name="wait_reassignments").progress_done == len(moves)

        sim.replace_disk(broker, name)
        assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
        wait_for(lambda: _waiting_at(wf_id, "restart_broker"), 120, "the restart gate")
        sim.cli("restart-broker", str(broker))
        assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
        wait_for(
            lambda: Workflow.objects.get(pk=wf_id).state in WorkflowState.TERMINAL, 180, "the end"
        )
        load.wait_acked(50)  # the load goes on after the recovery
    assert not load.errors, load.errors

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    verified = wf.steps.get(name="verify").output
    assert verified["log_dir_state"] == LogDirState.ONLINE
    assert verified["moved_off_broker"] == len(moves) and verified["replicas_in_isr"] == 0
    assert sim.dir_state(broker, name) == LogDirState.ONLINE
    # leadership back on broker N where it is the preferred replica and has rejoined the ISR
    elected = wf.steps.get(name="elect_preferred_leaders").output
    leaders = {
        (t.name, p.partition): p.leader for t in [sim.controller.topic(TOPIC)] for p in t.partitions
    }
    for key in elected["elected"]:
        topic, p = key.rsplit(":", 1)
        if topic == TOPIC:
            assert leaders[(topic, int(p))] == broker
    assert AuditEvent.objects.filter(
        workflow=wf, action=KafkaRecoverAction.ELECT_PREFERRED
    ).count() == (1 if elected["elected"] or elected.get("not_elected") else 0)
    assert verify_chain().ok
