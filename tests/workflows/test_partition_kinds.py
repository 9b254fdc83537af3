"""``expand_partitions`` / ``shrink_partitions`` end to end through the API, on the simulated
cluster's real processes and a real Celery worker (KIP-253).

Requests are planned by the worker: a KIP-253 refusal ends the workflow ``refused``.

- Expansion: partition q splits exactly one parent q - N*2^floor(log2(q/N)); refused while any
  partition is marked for deletion.
- Shrink: never below initial_partition_count; the highest partitions are marked and removed
  once empty (log_start_offset == log_end_offset). The workflow follows the drain; here the
  records are deleted with DeleteRecords (the agent's log-start-offset endpoint).
"""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from workflows.choices import StepState, WorkflowState
from workflows.kinds.topology import TopologyAction
from workflows.models import Workflow, WorkflowStep

from .conftest import wait_for
from .simcluster import Sim, request_outcome, request_planned, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLUSTER = "kip253"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-kip253"), brokers=2, log_dirs=1) as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def cluster(sim: Sim):
    return sim.register(CLUSTER)


def _create(sim: Sim, name: str, partitions: int) -> None:
    sim.controller.create_topic(name, partitions, 2)
    _wait_led(sim, name)


def _wait_led(sim: Sim, name: str) -> None:
    """Until every partition's leader has made its replica (the controller's ``created`` list):
    a leader the controller names may not have applied the metadata yet, and a produce sent
    straight to it would find no replica."""
    wait_until(
        lambda: all(p.leader in p.created for p in sim.controller.topic(name).partitions),
        15,
        f"{name} led",
    )


def _body(kind: str, topic: str, partitions: Any) -> dict[str, Any]:
    return {"kind": kind, "cluster": CLUSTER, "topic": topic, "partitions": partitions}


def _request(api, user, kind: str, topic: str, partitions: Any) -> dict[str, Any]:
    """Request, then wait for the worker's plan: the workflow as ``GET`` shows it."""
    return request_planned(api, user, _body(kind, topic, partitions))


def _state(pk: int) -> str:
    return Workflow.objects.values_list("state", flat=True).get(pk=pk)


def _produce_to(sim: Sim, topic: str, partition: int, n: int) -> int:
    """``n`` records straight to one partition's leader; returns its log end offset."""
    t = sim.controller.topic(topic)
    p = next(x for x in t.partitions if x.partition == partition)
    with sim.agent(p.leader) as a:
        resp = a.produce(
            topic,
            partition,
            [{"key": None, "value": f"{topic}-{partition}-{i}"} for i in range(n)],
            undeleted_partition_count=t.undeleted_partition_count,
        )
    return resp.log_end_offset


def test_expansion_splits_one_parent_per_new_partition(
    sim, worker, cluster, api, operator, approver
):
    _create(sim, "grow", 2)
    created = _request(api, operator, "expand_partitions", "grow", 5)
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    plan = created["plan"]
    assert (plan["initial_partition_count"], plan["undeleted_partition_count"]) == (2, 2)
    assert plan["new_undeleted_partition_count"] == 5
    # q - N*2^floor(log2(q/N)): 2 -> 0, 3 -> 1, 4 -> 0
    assert plan["new_partitions"] == [
        {"partition": 2, "parent": 0},
        {"partition": 3, "parent": 1},
        {"partition": 4, "parent": 0},
    ]
    assert plan["split_parents"] == [0, 1]
    # the plan says what holds of a key's order, and the review shows it
    assert plan["ordering"].startswith("Keys keep their order for consumer groups")
    assert plan["ordering"] in {row["what"] for row in created["plan_summary"]}
    before = {p.partition: p.leader_epoch for p in sim.controller.topic("grow").partitions}
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: _state(created["id"]) in WorkflowState.TERMINAL, 60, "the expansion")
    wf = Workflow.objects.get(pk=created["id"])
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)

    t = sim.controller.topic("grow")
    assert t.undeleted_partition_count == 5 and len(t.partitions) == 5
    new = {p.partition: p for p in t.partitions if p.partition >= 2}
    assert all(p.leader >= 0 and set(p.isr) == set(p.replicas) for p in new.values())
    # leaderEpochAfterCreation holds the lower partitions' epochs before the bump
    assert new[2].leader_epoch_after_creation == {str(k): v for k, v in before.items()}
    step = wf.steps.get(name="await_new_partitions")
    assert (step.progress_done, step.progress_total, step.progress_unit) == (3, 3, "partitions")
    event = AuditEvent.objects.get(workflow=wf, action=TopologyAction.ALTER_PARTITION_COUNT)
    assert event.before["undeleted_partition_count"] == 2
    assert event.after["undeleted_partition_count"] == 5
    assert verify_chain().ok


def test_kip253_refusals_answer_their_code_and_change_nothing(sim, worker, cluster, api, operator):
    _create(sim, "held", 2)
    sim.controller.alter_partition_count("held", 3)
    _wait_led(sim, "held")
    _produce_to(sim, "held", 2, 3)
    sim.controller.alter_partition_count("held", 2)  # partition 2 marked, not empty
    before = sim.controller.topic("held")
    # the KIP's refusals come from the worker's planning; bad fields are refused at once
    cases = [
        ("expand_partitions", "held", 4, "refused", "PARTITIONS_MARKED_FOR_DELETION"),
        ("expand_partitions", "held", 2, "refused", "INVALID_PARTITIONS"),  # not an expansion
        ("shrink_partitions", "held", 1, "refused", "INVALID_PARTITIONS"),  # below initial count
        ("shrink_partitions", "held", 2, "refused", "INVALID_PARTITIONS"),  # not a shrink
        ("expand_partitions", "nope", 4, "refused", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("expand_partitions", "held", 0, 400, "INVALID_REQUEST"),
        ("shrink_partitions", "held", "x", 400, "INVALID_REQUEST"),
    ]
    for kind, topic, partitions, status, code in cases:
        outcome = request_outcome(api, operator, _body(kind, topic, partitions))
        assert outcome == (status, code), (kind, partitions, outcome)
    # only the five refused workflows exist, and none holds a step
    assert Workflow.objects.count() == 5
    assert set(Workflow.objects.values_list("state", flat=True)) == {WorkflowState.REFUSED}
    assert not WorkflowStep.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="topology.").exists()
    after = sim.controller.topic("held")
    assert after.undeleted_partition_count == before.undeleted_partition_count == 2
    assert [p.partition for p in after.partitions] == [0, 1, 2]


def test_shrink_marks_partitions_and_follows_their_drain_until_removed(
    sim, worker, cluster, api, operator, approver
):
    _create(sim, "fade", 2)
    sim.controller.alter_partition_count("fade", 4)
    _wait_led(sim, "fade")
    ends = {p: _produce_to(sim, "fade", p, 10 * (p - 1)) for p in (2, 3)}  # 10 and 20 records
    # a consumer group has read 4 of partition 2's records and none of partition 3's
    member = sim.controller.join_group("billing", ["fade"])
    sim.controller.commit_offsets("billing", member.member_id, member.generation, {"fade": {2: 4}})
    created = _request(api, operator, "shrink_partitions", "fade", 2)
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    plan, info = created["plan"], created["plan_information"]
    # marked partitions give their keys back to their parents
    assert plan["partitions_to_mark"] == [
        {"partition": 2, "keys_move_to": 0},
        {"partition": 3, "keys_move_to": 1},
    ]
    # the records left to drain move with traffic: information, not approved
    assert info["records_to_drain"] == 30 and "records_to_drain" not in plan
    assert info["records_per_partition"] == {"2": 10, "3": 20}
    # each group's lag on the partitions to remove: how far its barrier will hold it back
    assert info["group_lag"] == {"billing": {"2": 6, "3": 20}}
    wf_id = created["id"]
    api(approver).post(f"/workflows/{wf_id}/approve", {"plan_hash": created["plan_hash"]})

    def draining() -> bool:
        wf = Workflow.objects.get(pk=wf_id)
        step = wf.steps.filter(name="drain").first()
        return wf.state == WorkflowState.WAITING and step is not None and step.attempts >= 1

    wait_for(draining, 60, "the drain to be followed")
    wf = Workflow.objects.get(pk=wf_id)
    assert "DeleteRecords" in wf.waiting_reason and "30 records left" in wf.waiting_reason
    step = wf.steps.get(name="drain")
    assert (step.progress_done, step.progress_total, step.progress_unit) == (0, 30, "records")
    t = sim.controller.topic("fade")
    assert t.undeleted_partition_count == 2
    assert [p.partition for p in t.partitions if p.marked_for_deletion] == [2, 3]

    # DeleteRecords on one partition: progress moves, the workflow keeps waiting
    leaders = {p.partition: p.leader for p in t.partitions}
    with sim.agent(leaders[3]) as a:
        a.publish_log_start_offset("fade", 3, ends[3])

    def progressed() -> bool:
        s = Workflow.objects.get(pk=wf_id).steps.get(name="drain")
        return s.progress_done == 20

    wait_for(progressed, 60, "drain progress")
    assert _state(wf_id) in (WorkflowState.WAITING, WorkflowState.RUNNING)
    with sim.agent(leaders[2]) as a:
        a.publish_log_start_offset("fade", 2, ends[2])
    wait_for(lambda: _state(wf_id) in WorkflowState.TERMINAL, 60, "the shrink to end")

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    step = wf.steps.get(name="drain")
    assert step.state == StepState.SUCCEEDED and step.output["removed"] == [2, 3]
    assert [p.partition for p in sim.controller.topic("fade").partitions] == [0, 1]
    # with nothing marked any more, expansion is allowed again
    again = _request(api, operator, "expand_partitions", "fade", 3)
    assert again["state"] == WorkflowState.PENDING_APPROVAL, again
    assert verify_chain().ok
