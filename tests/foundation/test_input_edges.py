"""A NUL byte or an oversized body is answered at the door (400 / 413 with the documented
error codes), never by a 500 from the database."""

from __future__ import annotations

import json

import pytest

from console.models import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(db):
    return Cluster.objects.create(
        name="lab", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )


def test_a_nul_in_a_path_parameter_is_400_not_500(client, viewer, lab):
    client.force_login(viewer)
    response = client.get("/topics/lab/bad%00name/")
    assert response.status_code == 400
    assert "The path holds a NUL byte" in response.content.decode()
    api = client.get("/api/v1/clusters/lab/topics/bad%00name")
    assert api.status_code == 400
    assert api.json() == {
        "error": "INVALID_REQUEST",
        "message": "The path holds a NUL byte; text must be printable.",
    }


def test_a_nul_in_a_query_parameter_names_it(client, viewer, lab):
    client.force_login(viewer)
    response = client.get("/api/v1/workflows", {"kind": "disable\x00tiering"})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "Query parameter 'kind' holds a NUL byte; text must be printable."
    )
    assert client.get("/topics/", {"cluster": "lab", "q": "a\x00"}).status_code == 400


def test_a_nul_in_a_json_field_names_the_field(client, operator, lab):
    client.force_login(operator)
    body = {"kind": "noop_check", "params": {"cluster": "lab", "label": "t\x00"}, "reason": "x"}
    response = client.post("/api/v1/workflows", json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "error": "INVALID_REQUEST",
        "message": "Field 'params.label' holds a NUL byte; text must be printable.",
    }


def test_a_nul_in_a_form_field_names_the_field(client, operator, lab):
    client.force_login(operator)
    response = client.post(
        "/workflows/new/", {"kind": "noop_check", "cluster": "lab", "label": "t", "reason": "\x00"}
    )
    assert response.status_code == 400
    assert "Field 'reason' holds a NUL byte" in response.content.decode()


def test_a_body_over_the_limit_is_413_before_it_is_read(client, operator, settings):
    settings.STRATA_MAX_BODY_BYTES = 1000
    client.force_login(operator)
    response = client.post("/api/v1/workflows", "x" * 5000, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == "PAYLOAD_TOO_LARGE"
    # an anonymous client gets the same answer (no traceback, no settings) on the webhook
    client.logout()
    hook = client.post("/agent-events/", "x" * 5000, content_type="application/json")
    assert hook.status_code == 413 and hook.json()["error"] == "PAYLOAD_TOO_LARGE"


def test_api_errors_carry_the_documented_codes(client, operator):
    """A body that is not JSON, and a session POST without its CSRF token, answer the codes the
    API documents (they used to say ``ERROR``)."""
    from django.test import Client

    client.force_login(operator)
    response = client.post("/api/v1/workflows", "{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    refused = strict.post("/api/v1/workflows", "{}", content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"] == "FORBIDDEN"


def test_the_openapi_document_lists_the_error_answers(client, viewer):
    client.force_login(viewer)
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["components"]["schemas"]["Error"]["required"] == ["error", "message"]
    request = schema["paths"]["/api/v1/workflows"]["post"]["responses"]
    assert {"201", "400", "401", "403", "404", "409", "413"} <= set(request)
    health = schema["paths"]["/api/v1/health"]["get"]["responses"]
    assert "401" not in health  # public: no sign-in to fail
