"""A workflow kind is one module: its parameters (a schema), its approval count, its plan and
its steps by name. ``tests/testapp/tally.py`` is such a module, named by no other file; this
test imports it (which registers it) and runs it through the API: request with ``params``,
planning, two approvals, execution."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from tests.workflows.conftest import planned
from workflows import engine
from workflows.kinds import all_kinds
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


def _typed(prop: dict) -> bool:
    """A JSON Schema property that says what it holds (``{}`` is pydantic's ``Any``)."""
    if "type" in prop or "const" in prop or "enum" in prop or "$ref" in prop:
        return True
    parts = prop.get("anyOf") or prop.get("allOf") or prop.get("oneOf")
    return bool(parts) and all(_typed(p) for p in parts)


def test_the_openapi_document_types_each_kinds_request_in_a_schema_of_its_own(api, viewer):
    schema = api(viewer).get("/openapi.json").json()
    components = schema["components"]["schemas"]

    def resolve(ref: str) -> dict:
        return components[ref.removeprefix("#/components/schemas/")]

    for path in ("/api/v1/workflows", "/api/v1/workflows/preview"):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": "#/components/schemas/WorkflowRequestIn"}
    request = components["WorkflowRequestIn"]
    assert request["discriminator"]["propertyName"] == "kind"
    mapping = request["discriminator"]["mapping"]
    assert set(mapping) == {k.name for k in all_kinds(include_hidden=True)}
    assert len(set(mapping.values())) == len(mapping)  # one schema per kind
    assert [o["$ref"] for o in request["oneOf"]] == list(mapping.values())
    for kind, ref in mapping.items():
        one = resolve(ref)
        assert one["properties"]["kind"]["const"] == kind
        params = resolve(one["properties"]["params"]["anyOf"][0]["$ref"])
        assert params["additionalProperties"] is False
        for name, prop in {**one["properties"], **params["properties"]}.items():
            assert _typed(prop), (kind, name, prop)
    tally = resolve(resolve(mapping["tally_check"])["properties"]["params"]["anyOf"][0]["$ref"])
    assert tally["properties"]["increments"] == {
        "title": "Increments",
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }
    assert set(tally["required"]) == {"cluster", "counter", "increments"}
    disable = resolve(mapping["disable_tiering"])["properties"]
    assert {"topic", "policy", "cluster"} <= set(disable) and "broker" not in disable
    assert disable["policy"]["anyOf"][0]["enum"] == ["retain", "delete"]
    elect = resolve(resolve(mapping["elect_leaders"])["properties"]["params"]["anyOf"][0]["$ref"])
    assert set(elect["required"]) == {"cluster", "topic"}  # partitions: all when left out
    assert {"type": "string", "minLength": 1, "maxLength": 2000} in elect["properties"][
        "partitions"
    ]["anyOf"]
    kinds = {k["kind"]: k for k in api(viewer).get("/workflows/kinds").json()}
    assert kinds["tally_check"]["params_schema"] == {**tally, "title": "tally_check parameters"}


def test_a_misspelt_param_is_refused_alike_by_the_api_the_form_and_the_cli(api, client, operator):
    message = "INVALID_REQUEST: lable does not apply to noop_check."
    body = {"kind": "noop_check", "cluster": "lab", "params": {"lable": "x"}}
    for path in ("/workflows/preview", "/workflows"):
        answer = api(operator).post(path, body)
        assert answer.status_code == 400
        assert f"{answer.json()['error']}: {answer.json()['message']}" == message
    client.force_login(operator)
    page = client.get("/workflows/new/", {"kind": "noop_check", "cluster": "lab", "lable": "x"})
    assert page.status_code == 400 and message in page.content.decode()
    with pytest.raises(CommandError) as refused:
        call_command(
            "request_workflow",
            "noop_check",
            "--as",
            operator.username,
            "--cluster",
            "lab",
            "--param",
            "lable=x",
            stdout=io.StringIO(),
        )
    assert str(refused.value) == message
    assert not Workflow.objects.exists()
