"""``elect_leaders``'s plan and preview (#36), from the PostgreSQL inventory alone: per
partition not led by its preferred replica (the first of its assignment), current leader →
preferred; refusals; the request let through on a kafka cluster while the agents-only kinds
are still refused there with the reason; the elect step's audit when a worker died between the
command and its record. End to end on both backends: test_elect_leaders."""

from __future__ import annotations

import pytest

from console import capabilities as caps
from console.choices import SyncTrigger
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.console.factories import ClusterBuilder
from workflows.actions import preview_plan
from workflows.errors import WorkflowError
from workflows.kinds import Refusal, get_kind
from workflows.models import Workflow
from workflows.output import plan_summary

pytestmark = pytest.mark.django_db

KIND = get_kind("elect_leaders")


@pytest.fixture
def inventory() -> Cluster:
    """``orders`` (4 partitions, RF 3 over brokers 1-3) synced with partitions 1 and 3 led by
    their second replica (as after a restart of their preferred broker), 2's preferred replica
    out of the ISR."""
    cluster = Cluster.objects.create(
        name="lab", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    b = ClusterBuilder(brokers=3, log_dirs=1)
    t = b.add_topic("orders", partitions=4, rf=3)
    for p in (1, 3):
        t.parts[p].leader = t.parts[p].replicas[1]
    t.parts[2].isr = t.parts[2].replicas[1:]
    do_sync_cluster(cluster, source=b.source(set()), full=True, trigger=SyncTrigger.BEAT)
    cluster.refresh_from_db()
    return cluster


def _plan(**raw):
    return KIND.plan(KIND.clean({"cluster": "lab", "topic": "orders", **raw}))


def test_the_plan_lists_only_partitions_off_their_preferred_leader(inventory):
    plan = _plan()
    actions = plan.actions.dump()
    # replicas of p are [(p % 3) + 1, ...]: 1 -> [2, 3, 1], 3 -> [1, 2, 3]
    assert actions["elections"] == [
        {"partition": 1, "leader": 3, "preferred": 2},
        {"partition": 3, "leader": 2, "preferred": 1},
    ]
    assert (actions["backend"], actions["steps"]) == ("agents", ["elect", "verify_leaders"])
    assert plan.information["preferred_not_in_isr"] == [2]
    rows = KIND.review(actions, plan.information)
    assert [(r.target, r.before, r.after) for r in rows] == [
        ("orders-1", "broker 3", "broker 2"),
        ("orders-3", "broker 2", "broker 1"),
    ]
    assert not any(r.destructive for r in rows)
    assert [s.name for s in KIND.steps(KIND.read_params(_params()), plan.actions)] == [
        "elect",
        "verify_leaders",
    ]


def _params() -> dict:
    return {"cluster": "lab", "topic": "orders"}


def test_partitions_narrow_the_plan_and_are_stored_sorted(inventory):
    params = KIND.clean({**_params(), "partitions": " 3, 0,3"})
    assert KIND.dump_params(params) == {**_params(), "partitions": "0,3"}
    assert [e["partition"] for e in KIND.plan(params).actions.dump()["elections"]] == [3]
    with pytest.raises(Refusal, match="partitions"):
        KIND.clean({**_params(), "partitions": "one,2"})


@pytest.mark.parametrize(
    "raw, code",
    [
        ({"topic": "nope"}, "UNKNOWN_TOPIC_OR_PARTITION"),
        ({"partitions": "1,9"}, "UNKNOWN_TOPIC_OR_PARTITION"),
        ({"partitions": "0,2"}, "ELECTION_NOT_NEEDED"),
    ],
)
def test_refusals_name_kafkas_code(inventory, raw, code):
    with pytest.raises(Refusal) as refused:
        _plan(**raw)
    assert refused.value.code == code


def test_the_request_runs_through_the_planning_worker_to_a_review(inventory, operator):
    from audit.choices import AuditContext
    from tests.workflows.conftest import planned
    from workflows.actions import do_request_workflow

    wf = planned(
        do_request_workflow(
            actor=operator,
            kind="elect_leaders",
            params=_params(),
            reason="back on the preferred replicas",
            context=AuditContext.CLI,
        )
    )
    assert wf.state == "pending_approval" and wf.approvals_required >= 1
    summary = plan_summary(wf)
    assert [row["target"] for row in summary] == ["orders-1", "orders-3"]


def _kafka(**features) -> Cluster:
    return Cluster.objects.create(
        name="prod", backend="kafka", kafka_bootstrap="kafka-1:9092", backend_features=features
    )


def test_on_a_kafka_cluster_only_the_kafka_kinds_are_let_through(db):
    _kafka(api_versions={"43": [0, 2], "2": [0, 9]})
    assert preview_plan("elect_leaders", {"cluster": "prod", "topic": "orders"}).target
    with pytest.raises(WorkflowError, match="does not run orphan_sweep yet"):
        preview_plan("orphan_sweep", {"cluster": "prod", "spark_run": 1})
    with pytest.raises(WorkflowError, match="Kafka shipped KIP-950 without a tiered epoch"):
        preview_plan("remote_purge", {"cluster": "prod", "spark_run": 1})
    assert not Workflow.objects.exists()


def test_elect_leaders_needs_electleaders_from_the_brokers(db):
    c = _kafka(api_versions={"2": [0, 9]})
    assert caps.by_key(c)["leader_election"].status == "unsupported"
    assert caps.kind_unsupported(c, "elect_leaders").key == "leader_election"
    with pytest.raises(WorkflowError, match="do not answer ElectLeaders"):
        preview_plan("elect_leaders", {"cluster": "prod", "topic": "orders"})
    assert caps.kind_runs_on(c, "elect_leaders") and not caps.kind_runs_on(c, "orphan_sweep")


def test_the_request_form_offers_elect_leaders_on_a_kafka_cluster(client, operator):
    _kafka(api_versions={"43": [0, 2]})
    client.force_login(operator)
    form = client.get(
        "/workflows/new/", {"kind": "elect_leaders", "cluster": "prod", "topic": "orders"}
    ).content.decode()
    assert "data-unsupported" not in form and 'data-testid="submit-request"' in form
    other = client.get(
        "/workflows/new/", {"kind": "remote_purge", "cluster": "prod", "spark_run": "1"}
    ).content.decode()
    assert "data-unsupported" in other and 'data-testid="submit-request"' not in other


class _MovedAlready:
    """A cluster whose leaders are on their preferred replicas already, and that records the
    elections it is asked (the seam's side, without a cluster)."""

    backend = "agents"

    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    def elect_preferred_leaders(self, topic: str, partitions: list[int]) -> dict:
        self.asked.append(partitions)
        return dict.fromkeys(partitions, "ELECTION_NOT_NEEDED")

    def leaders(self, topic: str) -> dict[int, int]:
        return {1: 2, 3: 1}


def test_leaders_moved_without_an_audited_election_are_asked_again(
    inventory, operator, approver, monkeypatch
):
    """A worker killed after ElectLeaders moved the leaders, before the command's audit: the
    next run finds them moved and nothing on record, and sends it again (ELECTION_NOT_NEEDED)
    so that the audit holds the command; then verify reads them back."""
    import contextlib

    from audit.choices import AuditContext
    from audit.models import AuditEvent
    from tests.workflows.conftest import approve, planned
    from workflows import engine
    from workflows.actions import do_request_workflow
    from workflows.kinds import leaders

    cluster = _MovedAlready()
    monkeypatch.setattr(leaders, "writes_for", lambda name: contextlib.nullcontext(cluster))
    wf = planned(
        do_request_workflow(
            actor=operator,
            kind="elect_leaders",
            params=_params(),
            reason="r",
            context=AuditContext.CLI,
        )
    )
    approve(wf, approver)
    engine.run(wf.pk)
    wf.refresh_from_db()
    assert wf.state == "succeeded", (wf.error_code, wf.error_message)
    assert cluster.asked == [[1, 3]]
    [sent] = AuditEvent.objects.filter(workflow=wf, action=leaders.LeaderAction.ELECT_PREFERRED)
    assert sent.after == {"1": "ELECTION_NOT_NEEDED", "3": "ELECTION_NOT_NEEDED"}
    assert wf.steps.get(name="elect").output == {"elected": [], "not_needed": [1, 3]}
