"""POST /api/v1/workflows: operators request; bad input is refused with a code and changes
nothing; one open workflow per target."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from audit.choices import AuditOutcome
from audit.models import AuditEvent
from workflows import engine
from workflows.choices import AuditAction, WorkflowState
from workflows.kinds import all_kinds, approvals_required
from workflows.models import Workflow

from .conftest import request_noop

pytestmark = pytest.mark.django_db

GOOD = {
    "kind": "noop_check",
    "cluster": "lab",
    "params": {"label": "orders"},
    "reason": "self-test",
}


def _good(**params) -> dict:
    """GOOD with these of noop_check's own parameters (``label``, ``brokers``) changed."""
    return {**GOOD, "params": {**GOOD["params"], **params}}


def test_request_answers_201_in_planning_then_a_worker_plans_it(api, operator):
    response = api(operator).post("/workflows", GOOD)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == WorkflowState.PLANNING
    assert body["plan_hash"] == "" and body["plan"] == {}
    assert body["approvals_required"] == 1
    assert body["requester"] == operator.username and body["reason"] == "self-test"
    event = AuditEvent.objects.get(action=AuditAction.WORKFLOW_REQUESTED, workflow_id=body["id"])
    assert event.actor == operator and event.context == "api"
    assert engine.run(body["id"]) == WorkflowState.PENDING_APPROVAL  # what the worker runs
    planned = api(operator).get(f"/workflows/{body['id']}").json()
    assert len(planned["plan_hash"]) == 64 and planned["plan"]["brokers"] == [0, 1]
    assert planned["plan_information_at"] is not None
    assert AuditEvent.objects.filter(
        action=AuditAction.WORKFLOW_PLANNED, workflow_id=body["id"], context="worker"
    ).exists()


def test_the_preview_validates_without_planning(api, operator):
    unknown = api(operator).post("/workflows/preview", {**GOOD, "brokers": 3})
    assert unknown.status_code == 400 and "Unknown field brokers" in unknown.json()["message"]
    preview = api(operator).post("/workflows/preview", GOOD).json()
    assert preview["target"] == "noop:orders" and preview["approvals_required"] == 1
    assert preview["plan"] is None and preview["planned_by"] == "worker"
    assert not Workflow.objects.exists()


def test_same_request_gives_the_same_plan_hash(api, operator, admin):
    first = api(operator).post("/workflows", GOOD).json()
    engine.run(first["id"])
    api(operator).post(f"/workflows/{first['id']}/cancel")
    second = api(admin).post("/workflows", GOOD).json()
    engine.run(second["id"])
    hashes = Workflow.objects.order_by("pk").values_list("plan_hash", flat=True)
    assert len(set(hashes)) == 1 and len(hashes[0]) == 64


def test_a_request_naming_an_unregistered_cluster_is_refused_at_once(api, operator):
    response = api(operator).post(
        "/workflows", {"kind": "disable_tiering", "cluster": "nowhere", "topic": "t"}
    )
    assert response.status_code == 400 and "Unknown cluster" in response.json()["message"]
    assert not Workflow.objects.exists()


def test_a_request_on_a_kafka_backend_cluster_is_refused_with_why(api, operator):
    """On a cluster read through Kafka's protocol a kind whose steps speak only the agents' API,
    or one whose capability the cluster lacks, is refused up front with why, not planned and
    failed later."""
    from console.models import Cluster

    Cluster.objects.create(name="prod", backend="kafka", kafka_bootstrap="kafka-1:9092")
    response = api(operator).post(
        "/workflows",
        {"kind": "shrink_partitions", "cluster": "prod", "topic": "t", "partitions": 1},
    )
    message = response.json()["message"]
    assert response.status_code == 400 and "read through Kafka's protocol" in message
    assert "Kafka never shipped KIP-253" in message
    # disable_tiering runs on kafka (#36), once a sync learnt the brokers' tiered offsets
    response = api(operator).post(
        "/workflows", {"kind": "disable_tiering", "cluster": "prod", "topic": "t"}
    )
    message = response.json()["message"]
    assert response.status_code == 400 and "cannot run disable_tiering" in message
    assert "Tiered offsets" in message and "not known until the first sync" in message
    assert not Workflow.objects.exists()


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({**GOOD, "kind": "no_such_kind"}, "Unknown workflow kind"),
        ({**GOOD, "kind": None}, "Unknown workflow kind"),
        ({**GOOD, "cluster": ""}, "cluster is required"),
        (_good(label=None), "label is required"),
        ({**GOOD, "mode": "sideways"}, "mode must be one of"),
        (_good(brokers="many"), "brokers must be an integer"),
        (_good(brokers=0), "brokers must be"),
        (_good(brokers=10**30), "brokers must be"),
        ({**GOOD, "policy": "delete"}, "policy does not apply"),
        ({**GOOD, "topic": "orders"}, "topic does not apply"),
        (_good(label="a\x00b"), "printable"),
        (_good(label="x" * 300), "printable"),
        ({**GOOD, "reason": "a\x00"}, "NUL"),
        ({**GOOD, "reason": 5}, "reason must be a string"),
        # a kind's parameter beside params, not in it: refused by name, never dropped
        ({**GOOD, "brokers": 3}, "Unknown field brokers: a kind's own parameters go in params"),
        ({**GOOD, "zz": 1, "move_replicas": True}, "Unknown fields move_replicas, zz"),
    ],
)
def test_bad_requests_are_refused_with_invalid_request_and_change_nothing(
    api, operator, body, fragment
):
    response = api(operator).post("/workflows", body)
    assert response.status_code == 400
    assert response.json()["error"] == "INVALID_REQUEST"
    assert fragment in response.json()["message"]
    assert not Workflow.objects.exists()


def test_a_non_object_body_is_invalid_request(api, operator, client):
    api(operator)
    response = client.post("/api/v1/workflows", "[1,2]", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_requesting_needs_the_operator_role(api, request, persona):
    user = request.getfixturevalue(persona)
    response = api(user).post("/workflows", GOOD)
    assert response.status_code == 403 and response.json()["error"] == "FORBIDDEN"
    assert not Workflow.objects.exists()
    denied = AuditEvent.objects.get(action=AuditAction.WORKFLOW_REQUESTED)
    assert denied.outcome == AuditOutcome.DENIED and denied.actor == user


def test_unauthenticated_requests_get_401(client):
    response = client.post("/api/v1/workflows", GOOD, content_type="application/json")
    assert response.status_code == 401 and response.json()["error"] == "UNAUTHENTICATED"


def test_second_open_workflow_on_the_same_target_is_a_409_conflict(api, operator, admin):
    first = api(operator).post("/workflows", GOOD).json()
    response = api(admin).post("/workflows", _good(brokers=3))
    assert response.status_code == 409
    assert response.json()["error"] == "WORKFLOW_CONFLICT"
    assert f"#{first['id']}" in response.json()["message"]
    # another target or another cluster is fine
    assert api(operator).post("/workflows", _good(label="other")).status_code == 201
    assert api(operator).post("/workflows", {**GOOD, "cluster": "prod"}).status_code == 201


def test_a_closed_workflow_frees_its_target(api, operator):
    first = api(operator).post("/workflows", GOOD).json()
    assert api(operator).post(f"/workflows/{first['id']}/cancel").status_code == 200
    assert api(operator).post("/workflows", GOOD).status_code == 201


def test_the_database_itself_refuses_a_second_open_workflow_per_target(operator):
    """Not only the Python check: a partial unique index in PostgreSQL."""
    request_noop(operator, "orders")
    with pytest.raises(IntegrityError), transaction.atomic():
        Workflow.objects.create(
            kind="noop_check",
            cluster="lab",
            target="noop:orders",
            plan_hash="x",
            requester=operator,
            state=WorkflowState.RUNNING,
        )
    Workflow.objects.create(
        kind="noop_check",
        cluster="lab",
        target="noop:orders",
        plan_hash="x",
        requester=operator,
        state=WorkflowState.SUCCEEDED,
    )


def test_stale_expected_plan_hash_is_refused_with_plan_changed(api, operator):
    response = api(operator).post("/workflows", {**GOOD, "expected_plan_hash": "0" * 64})
    assert response.status_code == 201
    assert engine.run(response.json()["id"]) == WorkflowState.REFUSED
    wf = Workflow.objects.get(pk=response.json()["id"])
    assert wf.error_code == "PLAN_CHANGED" and wf.is_terminal
    refused = AuditEvent.objects.get(action=AuditAction.WORKFLOW_REFUSED, workflow=wf)
    assert refused.outcome == AuditOutcome.DENIED


def test_break_glass_needs_admin_and_a_written_reason(api, operator, admin):
    body = {**GOOD, "break_glass": True, "break_glass_reason": "outage"}
    assert api(operator).post("/workflows", body).json()["error"] == "FORBIDDEN"
    response = api(admin).post("/workflows", {**body, "break_glass_reason": "  "})
    assert response.status_code == 400
    assert response.json()["error"] == "BREAK_GLASS_REASON_REQUIRED"
    response = api(admin).post("/workflows", body)
    assert response.status_code == 201 and response.json()["break_glass"] is True
    assert engine.run(response.json()["id"]) == WorkflowState.APPROVED  # planned: no approval
    ready = AuditEvent.objects.get(action=AuditAction.WORKFLOW_READY)
    assert ready.extra["break_glass"] is True and ready.extra["break_glass_reason"] == "outage"


def test_approval_policy_needs_two_approvers_for_destructive_kinds(settings):
    assert approvals_required("disable_tiering", {"policy": "delete"}) == 2
    assert approvals_required("disable_tiering", {"policy": "retain"}) == 1
    assert approvals_required("recover_log_dir", {"mode": "remove"}) == 2
    assert approvals_required("recover_log_dir", {"mode": "replace"}) == 1
    assert approvals_required("noop_check", {}) == 1
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 1, "when": {"mode=gate": 2}}}
    assert approvals_required("noop_check", {"mode": "gate"}) == 2


def test_every_kind_declares_its_approval_count(settings):
    """Each product kind says its count in its own class: a number, or None for the site's
    STRATA_APPROVALS_DEFAULT (1 unless set)."""
    declared = {
        kind.name: vars(type(kind)).get("approvals", "undeclared")
        for kind in all_kinds(include_hidden=True)
        if type(kind).__module__.startswith("workflows.")
    }
    assert declared == {
        "disable_tiering": 1,
        "recover_log_dir": 1,
        "enable_tiering": None,
        "remote_purge": None,
        "orphan_sweep": None,
        "expand_partitions": None,
        "shrink_partitions": None,
        "elect_leaders": None,
    }
    # remote_purge has no count of its own: it takes the delete-policy disablement's
    default = [k for k, n in declared.items() if n is None and k != "remote_purge"]
    assert {approvals_required(k, {}) for k in default} == {1}
    settings.STRATA_APPROVALS_DEFAULT = 2
    assert {approvals_required(k, {}) for k in default} == {2}
    assert approvals_required("disable_tiering", {"policy": "retain"}) == 1


def test_a_purge_of_fenced_data_needs_what_the_delete_policy_that_fenced_it_needs(settings):
    """KIP-950's delete policy fences remote data; the purge job deletes exactly that data. Two
    approvers for the disablement, so two for the purge (issue #39: it needed one); a site
    that changes the delete policy's count changes the purge's with it. Orphans are nobody's
    data: the site's default."""
    assert approvals_required("remote_purge", {"cluster": "lab", "spark_run": 1}) == 2
    assert approvals_required("orphan_sweep", {"cluster": "lab", "spark_run": 1}) == 1
    settings.STRATA_APPROVAL_POLICY = {"disable_tiering": {"when": {"policy=delete": 3}}}
    assert approvals_required("remote_purge", {"cluster": "lab", "spark_run": 1}) == 3
    settings.STRATA_APPROVAL_POLICY = {"disable_tiering": {"approvals": 1}}
    assert approvals_required("remote_purge", {"cluster": "lab", "spark_run": 1}) == 1
    # a site may still set the purge's count itself
    settings.STRATA_APPROVAL_POLICY = {"remote_purge": {"approvals": 4}}
    assert approvals_required("remote_purge", {"cluster": "lab", "spark_run": 1}) == 4
