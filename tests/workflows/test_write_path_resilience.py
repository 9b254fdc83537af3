"""The write path when the cluster does not answer, and when its structure changes (issue 11).

On the simulated cluster's real processes; the engine runs in-process (what a worker runs), so
each step of the story is observed exactly:

- a request, the request form and the preview answer with the whole cluster stopped, because no
  web request calls an agent; the workflow waits in ``planning`` and plans once it is back;
- an approved workflow whose controller is down at start waits (approvals kept), then runs;
- when the actions change between approval and start (a broker joins the topic's replicas),
  the approvals are voided and the workflow page shows what changed.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from console.models import Cluster
from console.sync import do_sync_cluster
from workflows import engine
from workflows.choices import StepState, WorkflowState
from workflows.models import Workflow, WorkflowStep

from .conftest import approve
from .simcluster import Sim, sim_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLUSTER = "resilience"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-resilience")) as s:
        s.controller.create_topic("events", 2, 2)
        wait_until(
            lambda: all(len(p.created) == 2 for p in s.controller.topic("events").partitions),
            20,
            "events created",
        )
        yield s


@pytest.fixture
def cluster(sim: Sim) -> Cluster:
    c = sim.register(CLUSTER)
    do_sync_cluster(c)
    return c


def _drive(wf_id: int, until: tuple[str, ...], limit: int = 120) -> Workflow:
    """Run the engine as the worker would, skipping backoff waits, until a state in ``until``."""
    for _ in range(limit):
        Workflow.objects.filter(pk=wf_id).update(resume_at=None)
        WorkflowStep.objects.filter(workflow_id=wf_id, state=StepState.PENDING).update(
            not_before=None
        )
        WorkflowStep.objects.filter(workflow_id=wf_id, state=StepState.WAITING).update(
            not_before=None
        )
        engine.run(wf_id)
        wf = Workflow.objects.get(pk=wf_id)
        if wf.state in until:
            return wf
        wait_until(lambda: True, 0.1)
    raise AssertionError(f"workflow #{wf_id} stayed {wf.state}")


def _stop(sim: Sim) -> None:
    sim.cli("down")


def _start(sim: Sim) -> None:
    sim.cli("up", timeout=120)
    wait_until(
        lambda: sum(1 for b in sim.controller.metadata().brokers if b.alive) == 3,
        30,
        "brokers back",
    )


@pytest.fixture
def no_outbound_http(monkeypatch):
    """Fails the test if this process sends any HTTP request (a web request calling an agent)."""
    calls: list[str] = []

    def refuse(self, request, *args: Any, **kwargs: Any):
        calls.append(str(request.url))
        raise AssertionError(f"a web request called {request.url}")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    return calls


def test_requests_answer_with_every_agent_stopped_and_planning_waits_for_them(
    sim, cluster, client, api, operator, no_outbound_http, monkeypatch
):
    _stop(sim)
    try:
        client.force_login(operator)
        query = f"kind=expand_partitions&cluster={CLUSTER}&topic=events&partitions=4"
        form = client.get(f"/workflows/new/?{query}")
        assert (
            form.status_code == 200
            and 'data-testid="target">topic:events<' in form.content.decode()
        )
        body = {"kind": "expand_partitions", "cluster": CLUSTER, "topic": "events", "partitions": 4}
        preview = api(operator).post("/workflows/preview", body)
        assert preview.status_code == 200 and preview.json()["target"] == "topic:events"
        created = api(operator).post("/workflows", {**body, "reason": "more consumers"})
        assert created.status_code == 201 and created.json()["state"] == WorkflowState.PLANNING
        assert no_outbound_http == []
        monkeypatch.undo()  # the worker's part may talk to the cluster
        wf_id = created.json()["id"]
        for _ in range(2):
            Workflow.objects.filter(pk=wf_id).update(resume_at=None)
            assert engine.run(wf_id) == WorkflowState.PLANNING
        wf = Workflow.objects.get(pk=wf_id)
        assert "did not answer" in wf.waiting_reason and wf.plan_hash == ""
        page = client.get(f"/workflows/{wf_id}/").content.decode()
        assert 'data-testid="planning"' in page and "did not answer" in page
    finally:
        _start(sim)
    wf = _drive(wf_id, (WorkflowState.PENDING_APPROVAL, WorkflowState.REFUSED))
    assert wf.state == WorkflowState.PENDING_APPROVAL and wf.waiting_reason == ""
    assert [x["partition"] for x in wf.plan["new_partitions"]] == [2, 3]
    api(operator).post(f"/workflows/{wf_id}/cancel")


def test_an_approved_workflow_waits_while_the_controller_is_down_then_succeeds(
    sim, cluster, api, operator, approver
):
    created = (
        api(operator)
        .post(
            "/workflows",
            {"kind": "expand_partitions", "cluster": CLUSTER, "topic": "events", "partitions": 3},
        )
        .json()
    )
    wf = _drive(created["id"], (WorkflowState.PENDING_APPROVAL,))
    wf = approve(wf, approver)
    assert wf.state == WorkflowState.APPROVED
    _stop(sim)
    try:
        assert engine.run(wf.pk) == WorkflowState.APPROVED
        wf.refresh_from_db()
        assert "waits for the cluster" in wf.waiting_reason and wf.resume_at is not None
        assert wf.approvals.get().voided_at is None and not wf.steps.exists()
    finally:
        _start(sim)
    wf = _drive(wf.pk, (WorkflowState.SUCCEEDED, WorkflowState.FAILED))
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message)
    assert sim.controller.topic("events").undeleted_partition_count == 3
    assert wf.approvals.count() == 1 and wf.approvals.get().voided_at is None


def test_a_broker_joining_the_topic_between_approval_and_start_voids_approvals_with_a_diff(
    sim, cluster, api, client, operator, approver
):
    sim.cli("create-topic", "lonely", "--partitions", "1", "--replication-factor", "1", "--tiered")
    wait_until(lambda: sim.controller.topic("lonely").partitions[0].created, 20, "lonely created")
    do_sync_cluster(cluster)
    created = (
        api(operator)
        .post(
            "/workflows",
            {"kind": "disable_tiering", "cluster": CLUSTER, "topic": "lonely", "policy": "retain"},
        )
        .json()
    )
    wf = _drive(created["id"], (WorkflowState.PENDING_APPROVAL,))
    before = wf.plan["brokers"]
    assert len(before) == 1
    wf = approve(wf, approver)
    # the topic grows onto other brokers before the worker starts the workflow
    sim.controller.alter_partition_count("lonely", 3)
    wait_until(
        lambda: len({p.replicas[0] for p in sim.controller.topic("lonely").partitions}) > 1,
        20,
        "a new partition on another broker",
    )
    do_sync_cluster(cluster)
    assert engine.run(wf.pk) == WorkflowState.PENDING_APPROVAL
    wf.refresh_from_db()
    assert wf.approvals.get().void_reason == "plan changed"
    changed = {c["path"]: (c["before"], c["after"]) for c in wf.plan_diff}
    assert changed["brokers"][0] == before and len(changed["brokers"][1]) > 1
    client.force_login(approver)
    page = client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    assert 'data-testid="plan-diff"' in page and "<code>brokers</code>" in page
    api(operator).post(f"/workflows/{wf.pk}/cancel")
