"""A workflow kind is one module: its parameters (a schema), its approval count, its plan and
its steps by name. ``tests/testapp/tally.py`` is such a module, named by no other file; this
test imports it (which registers it) and runs it through the API: request with ``params``,
planning, two approvals, execution."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from tests.workflows.conftest import planned
from workflows import engine
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

BODY = {"kind": "tally_check", "params": {"cluster": "lab", "counter": "apples", "increments": 3}}


@pytest.fixture(autouse=True)
def tally_kind():
    from tests.testapp import tally

    return tally


def test_a_kind_module_runs_through_the_api_with_its_own_params(api, operator, approver, admin):
    created = api(operator).post("/workflows", BODY)
    assert created.status_code == 201, created.json()
    wf = planned(Workflow.objects.get(pk=created.json()["id"]))
    assert wf.state == "pending_approval"
    assert wf.parameters == {"cluster": "lab", "counter": "apples", "increments": 3}
    assert wf.approvals_required == 2  # the kind's own count
    for user in (approver, admin):
        decided = api(user).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
        assert decided.status_code == 200, decided.json()
    engine.run(wf.pk)
    wf.refresh_from_db()
    assert wf.state == "succeeded"
    assert [s.name for s in wf.steps.order_by("position")] == [
        "increment_0",
        "increment_1",
        "increment_2",
    ]
    events = AuditEvent.objects.filter(action="tally_check.incremented", workflow=wf)
    assert sorted(e.after["n"] for e in events) == [0, 1, 2]


def test_the_kind_validates_its_params_and_refuses_others(api, operator):
    too_many = {**BODY, "params": {**BODY["params"], "increments": 9}}
    response = api(operator).post("/workflows", too_many)
    assert response.status_code == 400
    assert (
        response.json()["error"] == "INVALID_REQUEST" and "increments" in response.json()["message"]
    )
    foreign = {**BODY, "params": {**BODY["params"], "topic": "orders"}}
    response = api(operator).post("/workflows", foreign)
    assert response.status_code == 400 and "topic does not apply" in response.json()["message"]
    response = api(operator).post("/workflows", {**BODY, "params": ["not", "an", "object"]})
    assert response.status_code == 400


def test_flat_fields_are_aliases_and_must_agree_with_params(api, operator):
    flat = api(operator).post(
        "/workflows/preview",
        {"kind": "noop_check", "cluster": "lab", "mode": "gate", "params": {"label": "t1"}},
    )
    nested = api(operator).post(
        "/workflows/preview",
        {"kind": "noop_check", "params": {"cluster": "lab", "mode": "gate", "label": "t1"}},
    )
    assert flat.status_code == nested.status_code == 200
    assert flat.json() == nested.json()
    clash = api(operator).post(
        "/workflows/preview",
        {"kind": "noop_check", "cluster": "lab", "mode": "gate", "params": {"mode": "flaky"}},
    )
    assert clash.status_code == 400 and "given twice" in clash.json()["message"]


def test_the_openapi_document_and_the_kinds_list_show_each_kinds_params(api, viewer):
    schema = api(viewer).get("/openapi.json").json()
    request = schema["components"]["schemas"]["WorkflowRequestIn"]["properties"]["params"]
    by_title = {s.get("title"): s for s in request["anyOf"]}
    tally = by_title["tally_check parameters"]
    assert tally["properties"]["increments"] == {
        "title": "Increments",
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }
    assert set(tally["required"]) == {"cluster", "counter", "increments"}
    assert "disable_tiering parameters" in by_title
    kinds = {k["kind"]: k for k in api(viewer).get("/workflows/kinds").json()}
    assert kinds["tally_check"]["params_schema"] == tally
