"""A NUL byte or an oversized body is answered at the door (400 / 413 with the documented
error codes), never by a 500 from the database."""

from __future__ import annotations

import json
from pathlib import Path

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


# -- over-long URLs and repeated query parameters (#39) -----------------------------------------


def test_an_overlong_url_is_a_json_414_on_the_api_and_text_on_pages(client, viewer, lab):
    from config.edges import MAX_URL_BYTES

    client.force_login(viewer)
    long_query = {"q": "x" * MAX_URL_BYTES}
    api = client.get("/api/v1/clusters/lab/topics", long_query)
    assert api.status_code == 414
    assert api.json()["error"] == "URI_TOO_LONG"
    assert str(MAX_URL_BYTES) in api.json()["message"]
    page = client.get("/topics/", long_query)
    assert page.status_code == 414 and page["Content-Type"].startswith("text/plain")
    # at the limit, the request is served
    fits = "x" * (MAX_URL_BYTES - len("/api/v1/clusters/lab/topics?q="))
    assert client.get("/api/v1/clusters/lab/topics", {"q": fits}).status_code == 200


def test_the_openapi_document_lists_the_414_and_types_the_audit_workflow_as_an_integer(
    client, viewer
):
    client.force_login(viewer)
    schema = client.get("/api/v1/openapi.json").json()
    topics = schema["paths"]["/api/v1/clusters/{name}/topics"]["get"]
    assert topics["responses"]["414"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    audit = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/audit"]["get"]["parameters"]}
    for name in ("workflow", "before"):
        types = {s.get("type") for s in audit[name].get("anyOf", [audit[name]])}
        assert types == {"integer", "null"}, (name, audit[name])


def test_the_audit_workflow_filter_refuses_what_is_not_a_workflow_id(client, viewer):
    client.force_login(viewer)
    for bad in ("abc", "-1", str(2**63)):
        response = client.get("/api/v1/audit", {"workflow": bad})
        assert response.status_code == 400, bad
        assert response.json()["error"] == "INVALID_REQUEST"
    assert client.get("/api/v1/audit", {"workflow": "12"}).json()["items"] == []


def test_a_query_parameter_given_twice_on_the_api_is_400(client, viewer, lab):
    client.force_login(viewer)
    for path in (
        "/api/v1/clusters/lab/topics?page=1&page=2",
        "/api/v1/audit?workflow=1&workflow=2",
    ):
        response = client.get(path)
        assert response.status_code == 400, path
        assert response.json()["error"] == "INVALID_REQUEST"
        assert "more than once" in response.json()["message"]
    assert client.get("/api/v1/clusters/lab/topics?page=1").status_code == 200


def test_each_api_route_is_listed_under_one_tag(client, viewer):
    client.force_login(viewer)
    schema = client.get("/api/v1/openapi.json").json()
    tags = {
        f"{method.upper()} {path}": op.get("tags")
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
    }
    assert all(len(t or []) == 1 for t in tags.values()), tags
    assert tags["GET /api/v1/clusters"] == ["inventory"]
    assert tags["GET /api/v1/health"] == ["health"]


def test_under_make_run_s_gunicorn_an_overlong_url_gets_strata_s_json_414(tmp_path):
    """gunicorn's default request line (4094 bytes) answered a longer URL with its own HTML 414
    before Strata saw it. ``make run`` starts it with ``--limit-request-line`` at
    ``WEB_LIMIT_REQUEST_LINE``: a URL over Strata's limit gets Strata's JSON answer, and one past
    gunicorn's limit too (``config.web_worker``)."""
    import socket
    import subprocess
    import sys

    from config import run
    from config.edges import MAX_URL_BYTES, WEB_LIMIT_REQUEST_LINE
    from tests.conftest import ROOT, child_env

    run_source = Path(run.__file__).read_text()
    assert '"--limit-request-line", str(edges.WEB_LIMIT_REQUEST_LINE)' in run_source
    assert '"--worker-class", "config.web_worker.StrataWorker"' in run_source
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "2", "--limit-request-line", str(WEB_LIMIT_REQUEST_LINE),
         "--worker-class", "config.web_worker.StrataWorker"],
        cwd=ROOT,
        env=child_env(DEBUG="1"),
        stdout=(tmp_path / "gunicorn.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        answers = {}
        for size in (5000, MAX_URL_BYTES + 100, WEB_LIMIT_REQUEST_LINE + 1000):
            target = "/api/v1/health?" + "x" * size
            answers[size] = _raw_get(port, target)
        # 5 KB, past gunicorn's default: Strata answers it (health: 200 or 503, JSON)
        status, body = answers[5000]
        assert status in (200, 503) and "status" in json.loads(body), (status, body[:200])
        # past Strata's limit: its own 414, the API's JSON error
        status, body = answers[MAX_URL_BYTES + 100]
        assert status == 414, (status, body[:200])
        assert json.loads(body)["error"] == "URI_TOO_LONG", body[:200]
        # past gunicorn's own limit (its maximum): the worker's answer is the same JSON
        status, body = answers[WEB_LIMIT_REQUEST_LINE + 1000]
        assert status == 414, (status, body[:200])
        assert json.loads(body)["error"] == "URI_TOO_LONG", body[:200]
    finally:
        proc.terminate()
        proc.wait(30)


def _raw_get(port: int, target: str) -> tuple[int, bytes]:
    import socket
    import time

    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with conn:
        conn.sendall(f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
