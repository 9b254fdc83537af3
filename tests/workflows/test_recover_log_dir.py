"""``recover_log_dir`` end to end through the API, on the simulated cluster's real processes and
a real Celery worker: KIP-112's "the disk (or log directory) gets fixed".

Layout (one cluster for the module, 3 brokers with 2 log dirs of a simulated 256 KiB each):
``bulk`` (1 partition, RF 1, ~300 KB) fills one dir of broker X, so X's *other* dir cannot be
removed (its replicas would not fit) but can be replaced; ``orders`` (2 partitions, RF 3) holds
the keyed records whose loss the tests look for.

Requests are planned by the worker: a KIP-112 refusal (the broker, the dir, its state, the good
dirs' room) ends the workflow ``refused``; bad fields are refused at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import LogDirState
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds.disks import DiskAction
from workflows.models import Workflow, WorkflowStep

from .conftest import wait_for
from .simcluster import (
    Sim,
    request_outcome,
    request_planned,
    sim_cluster,
    wait_plan_stable,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CAPACITY = 256 * 1024
CLUSTER = "disks"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(
        tmp_path_factory.mktemp("sim-disks"), extra=("--log-dir-capacity-bytes", str(CAPACITY))
    ) as s:
        yield s


@pytest.fixture(scope="module")
def layout(sim: Sim) -> dict[str, Any]:
    """Topics and data; which broker / dirs play which part."""
    sim.controller.create_topic("bulk", 1, 1, {"segment.bytes": "65536"})
    wait_until(lambda: sim.controller.topic("bulk").partitions[0].created, 15, "bulk created")
    x = sim.controller.topic("bulk").partitions[0].replicas[0]
    sim.controller.create_topic("orders", 2, 3)
    wait_until(
        lambda: all(len(p.created) == 3 for p in sim.controller.topic("orders").partitions),
        15,
        "orders created",
    )
    sim.produce("bulk", [{"key": None, "value": "b" * 1000} for _ in range(300)])
    values = [f"order-{i}" for i in range(200)]
    sim.produce("orders", [{"key": f"k{i % 40}", "value": v} for i, v in enumerate(values)])
    bulk_dir = sim.dir_of(x, "bulk", 0)
    other = next(p for p in (0, 1) if sim.dir_of(x, "orders", p) != bulk_dir)
    y = next(b for b in (1, 2, 3) if b != x)
    return {
        "x": x,
        "x_bulk_dir": bulk_dir,
        "x_dir": sim.dir_of(x, "orders", other),  # holds an orders replica, not bulk
        "y": y,
        "y_dir": sim.dir_of(y, "orders", 0),
        "values": values,
    }


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def cluster(sim: Sim):
    return sim.register(CLUSTER)


def _body(**fields: Any) -> dict[str, Any]:
    return {"kind": "recover_log_dir", "cluster": CLUSTER, **fields}


def _request(api, user, **fields: Any) -> dict[str, Any]:
    """Request, then wait for the worker's plan: the workflow as ``GET`` shows it."""
    return request_planned(api, user, _body(**fields))


def _state(pk: int) -> str:
    return Workflow.objects.values_list("state", flat=True).get(pk=pk)


def _ensure_broken(sim: Sim, broker: int, name: str) -> None:
    if sim.dir_state(broker, name) != LogDirState.OFFLINE:
        sim.break_log_dir(broker, name)


def _disk_events(wf: Workflow | None = None) -> dict[str, int]:
    qs = AuditEvent.objects.filter(action__startswith="disks.")
    if wf is not None:
        qs = qs.filter(workflow=wf, outcome="success")
    counts: dict[str, int] = {}
    for action in qs.values_list("action", flat=True):
        counts[action] = counts.get(action, 0) + 1
    return counts


def _assert_nothing_lost(sim: Sim, values: list[str]) -> None:
    read = sim.read_values("orders")
    assert set(values) <= set(read), f"{len(set(values) - set(read))} acknowledged records lost"
    # nothing duplicated either (the verify step adds its own, distinct records)
    assert len(read) == len(set(read))


def test_bad_requests_are_refused_with_their_code_and_change_nothing(
    sim, layout, worker, cluster, api, operator
):
    x, x_dir = layout["x"], layout["x_dir"]
    # what the cluster's state refuses, by the worker's planning; bad fields at once
    cases = [
        ({"broker": 99, "log_dir": x_dir}, "refused", "UNKNOWN_BROKER"),
        ({"broker": x, "log_dir": "logdir-9"}, "refused", "LOG_DIR_NOT_FOUND"),
        ({"broker": x, "log_dir": x_dir}, "refused", "LOG_DIR_NOT_OFFLINE"),  # healthy
        ({"broker": x, "log_dir": x_dir, "mode": "sideways"}, 400, "INVALID_REQUEST"),
        ({"broker": "one", "log_dir": x_dir}, 400, "INVALID_REQUEST"),
        ({"broker": x, "log_dir": x_dir, "topic": "orders"}, 400, "INVALID_REQUEST"),
    ]
    for fields, status, code in cases:
        outcome = request_outcome(api, operator, _body(**fields))
        assert outcome == (status, code), (fields, outcome)

    # KIP-112: a bad dir is removed only when the good dirs have room for its replicas; X's
    # other dir is full of `bulk`
    _ensure_broken(sim, x, x_dir)
    body = _request(api, operator, broker=x, log_dir=x_dir, mode="remove")
    assert (body["state"], body["error"]["code"]) == ("refused", "INSUFFICIENT_SPACE"), body
    message = body["error"]["message"]
    assert "bytes needed" in message and layout["x_bulk_dir"] in message
    assert body["plan"] == {} and body["steps"] == []

    # only the four refused workflows exist, none holds a step; nothing was sent to a broker
    assert Workflow.objects.count() == 4
    assert set(Workflow.objects.values_list("state", flat=True)) == {WorkflowState.REFUSED}
    assert not WorkflowStep.objects.exists()
    assert _disk_events() == {}
    assert sim.dir_state(x, x_dir) == LogDirState.OFFLINE  # still just failed, not removed


def test_replace_mode_waits_for_the_new_disk_then_recovers_every_replica(
    sim, layout, worker, cluster, api, operator, approver
):
    x, x_dir = layout["x"], layout["x_dir"]
    _ensure_broken(sim, x, x_dir)
    params = {"cluster": CLUSTER, "broker": x, "log_dir": x_dir, "mode": "replace"}
    wait_plan_stable("recover_log_dir", params)
    created = _request(api, operator, broker=x, log_dir=x_dir)
    plan, info = created["plan"], created["plan_information"]
    assert created["state"] == WorkflowState.PENDING_APPROVAL and created["approvals_required"] == 1
    assert info["log_dir_state"] == LogDirState.OFFLINE and not info["still_serving"]
    assert plan["restart"] == "sim"  # the simulated controller advertises its restart control
    on_dir = {(r["topic"], r["partition"]) for r in plan["replicas"]}
    assert ("orders", 0) in on_dir or ("orders", 1) in on_dir
    assert ("bulk", 0) not in on_dir
    assert plan["replica_count"] == len(on_dir)
    assert {(r["topic"], r["partition"]) for r in info["replicas"]} == on_dir
    # bytes are information, exact: the replicas' sizes summed
    assert info["bytes_to_recreate"] == sum(r["bytes"] for r in info["replicas"]) > 0
    assert {d["name"] for d in info["good_log_dirs"]} == {layout["x_bulk_dir"]}
    assert plan["steps"] == [
        "cordon_log_dir",
        "confirm_disk_replaced",
        "uncordon_log_dir",
        "restart_broker",
        "recreate_replicas",
        "verify",
    ]

    wf_id = created["id"]
    api(approver).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: _state(wf_id) == WorkflowState.WAITING, 60, "the human gate")
    wf = Workflow.objects.get(pk=wf_id)
    gate = wf.steps.get(name="confirm_disk_replaced")
    assert gate.state == StepState.WAITING and "Replace the disk" in wf.waiting_reason
    assert wf.steps.get(name="cordon_log_dir").state == StepState.SUCCEEDED

    sim.replace_disk(x, x_dir)  # the operator swaps the disk: an empty folder
    with sim.agent(x) as a:
        incarnation = a.incarnation()
        # KIP-112: the running broker keeps the dir offline though the new disk works
        assert a.probe_log_dir(x_dir).state == LogDirState.OFFLINE
    assert api(operator).post(f"/workflows/{wf_id}/confirm").status_code == 200
    wait_for(lambda: _state(wf_id) in WorkflowState.TERMINAL, 120, "the recovery to end")

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    assert sim.dir_state(x, x_dir) == LogDirState.ONLINE
    with sim.agent(x) as a:
        snap = a.snapshot()
    assert snap.offline_replica_count == 0  # KIP-112 OfflineReplicaCount
    for topic, p in on_dir:
        part = next(q for q in sim.controller.topic(topic).partitions if q.partition == p)
        assert x in part.isr and x in part.created
    recreate = wf.steps.get(name="recreate_replicas")
    assert recreate.progress_unit == "bytes" and recreate.progress_done == recreate.progress_total
    assert recreate.progress_total > 0
    verify = wf.steps.get(name="verify").output
    assert verify["lost"] == [] and verify["missing_on_recovered_replica"] == []
    assert verify["partitions_checked"] == len(on_dir)
    # KIP-253: the verify records carry no key (a keyed one would belong where its key hashes)
    ours = [
        (p, r.key)
        for p, recs in sim.read_records("orders").items()
        for r in recs
        if r.value.startswith(f"wf{wf_id}:")
    ]
    assert ours and all(key is None for _, key in ours), ours
    assert {("orders", p) for p, _ in ours} == {tp for tp in on_dir if tp[0] == "orders"}
    assert _disk_events(wf) == {
        DiskAction.CORDON: 1,
        DiskAction.UNCORDON: 1,
        DiskAction.RESTART_SEEN: 1,
        DiskAction.RESTART: 1,
        DiskAction.VERIFY_PRODUCER: 1,
        DiskAction.VERIFY_PRODUCE: 1,
    }
    cordon = AuditEvent.objects.get(workflow=wf, action=DiskAction.CORDON)
    assert cordon.before["state"] == LogDirState.OFFLINE and cordon.after["cordoned"] is True
    # the worker restarted the broker once: the process it saw before is gone
    restart = AuditEvent.objects.get(workflow=wf, action=DiskAction.RESTART)
    assert restart.before == {"incarnation": incarnation} and restart.after["restarted"]
    with sim.agent(x) as a:
        assert a.incarnation() == restart.after["incarnation"] != incarnation
    assert AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_CONFIRMED).exists()
    _assert_nothing_lost(sim, layout["values"])
    assert verify_chain().ok


def test_remove_mode_cordons_a_degraded_dir_that_serves_until_the_restart_and_needs_two_approvals(
    sim, layout, worker, cluster, api, operator, approver, second_approver
):
    y, y_dir = layout["y"], layout["y_dir"]
    sim.set_probe_delay(y, y_dir, 300)
    wait_until(lambda: sim.dir_state(y, y_dir) == LogDirState.DEGRADED, 20, "a DEGRADED dir")
    with sim.agent(y) as a:
        moving = {(r.topic, r.partition) for r in a.snapshot().replicas if r.log_dir == y_dir}
    assert moving
    params = {"cluster": CLUSTER, "broker": y, "log_dir": y_dir, "mode": "remove"}
    wait_plan_stable("recover_log_dir", params)
    created = _request(api, operator, broker=y, log_dir=y_dir, mode="remove")
    plan, info = created["plan"], created["plan_information"]
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["approvals_required"] == 2
    assert info["log_dir_state"] == LogDirState.DEGRADED and info["still_serving"]
    assert plan["steps"] == [
        "cordon_log_dir",
        "remove_log_dir",
        "restart_broker",
        "recreate_replicas",
        "verify",
    ]
    # whether the replicas fit is an action; the bytes behind it are information
    assert plan["good_log_dirs"] and all(d["fits"] for d in plan["good_log_dirs"])
    room = {d["name"]: d for d in info["good_log_dirs"] if "fits" in d}
    assert set(room) == {d["name"] for d in plan["good_log_dirs"]}
    assert all(d["fits"] and d["needed_bytes"] <= d["usable_bytes"] for d in room.values())
    assert {(r["topic"], r["partition"]) for r in plan["replicas"]} == moving

    wf_id = created["id"]
    for user in (approver, second_approver):
        api(user).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: _state(wf_id) in WorkflowState.TERMINAL, 120, "the recovery to end")
    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)

    assert sim.dir_state(y, y_dir) == "REMOVED"  # gone from the broker's configuration
    with sim.agent(y) as a:
        snap = a.snapshot()
    assert snap.offline_replica_count == 0
    for topic, p in moving:
        replica = next(r for r in snap.replicas if (r.topic, r.partition) == (topic, p))
        assert replica.log_dir != y_dir and replica.state == "ONLINE"
    assert _disk_events(wf) == {
        DiskAction.CORDON: 1,
        DiskAction.REMOVE: 1,
        DiskAction.RESTART_SEEN: 1,
        DiskAction.RESTART: 1,
        DiskAction.VERIFY_PRODUCER: 1,
        DiskAction.VERIFY_PRODUCE: 1,
    }
    # KIP-1066: the cordon took nothing offline; the dir served until the broker restarted
    cordon = AuditEvent.objects.get(workflow=wf, action=DiskAction.CORDON)
    assert cordon.after["state"] in LogDirState.GOOD and cordon.after["cordoned"] is True
    remove = AuditEvent.objects.get(workflow=wf, action=DiskAction.REMOVE)
    assert remove.before["state"] in LogDirState.GOOD and remove.after["removed"] is True
    _assert_nothing_lost(sim, layout["values"])
    assert verify_chain().ok
