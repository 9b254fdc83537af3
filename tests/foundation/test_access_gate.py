"""The access gate's rules a user meets first (the URL walk covers every pattern)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from accounts.actions import do_issue_token
from audit import trail

pytestmark = pytest.mark.django_db


@pytest.fixture
def nobody():
    """Signed in, no role: as a user whose roles were removed."""
    return get_user_model().objects.create_user("nobody")


@pytest.fixture
def an_event():
    from django.db import transaction

    with transaction.atomic():
        return trail.record("test.secret_action", context="cli", after={"needle": "xyzzy-42"})


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_user_without_a_role_cannot_export_the_audit_log(client, nobody, an_event, fmt):
    client.force_login(nobody)
    response = client.get(f"/audit/export.{fmt}")
    assert response.status_code == 403
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"xyzzy-42" not in body


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_viewer_exports_the_audit_log(client, viewer, an_event, fmt):
    client.force_login(viewer)
    response = client.get(f"/audit/export.{fmt}")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"xyzzy-42" in body


def test_removing_the_last_role_closes_every_page_at_the_next_request(client, viewer):
    client.force_login(viewer)
    assert client.get("/workflows/").status_code == 200
    viewer.groups.clear()
    assert client.get("/workflows/").status_code == 403
    assert client.get("/spark/").status_code == 403
    assert client.get("/api/v1/workflows").json()["error"] == "FORBIDDEN"


def test_a_user_without_a_role_can_still_sign_out(client, nobody):
    client.force_login(nobody)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert client.get("/").status_code == 302  # signed out: sent to the login page


def test_a_superuser_without_groups_counts_as_admin(client):
    root = get_user_model().objects.create_superuser("root", password=None)
    client.force_login(root)
    assert client.get("/audit/").status_code == 200
    assert client.get("/admin/").status_code == 200


def test_staff_without_a_role_is_refused_the_admin(client):
    staff = get_user_model().objects.create_user("staffer", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/").status_code == 403


def test_a_bearer_token_of_a_user_without_a_role_is_403_json(client, nobody):
    _, raw = do_issue_token(nobody, acting_user=None)
    response = client.get("/api/v1/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 403
    assert response.json()["error"] == "FORBIDDEN"


def test_an_invalid_bearer_token_is_401_even_with_a_session(client, viewer):
    client.force_login(viewer)
    response = client.get("/api/v1/me", headers={"Authorization": "Bearer strata_wrong"})
    assert response.status_code == 401
    assert response.json()["error"] == "UNAUTHENTICATED"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_bearer_token_does_not_sign_in_a_page(client, viewer):
    _, raw = do_issue_token(viewer, acting_user=None)
    response = client.get("/audit/", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_metrics_needs_a_token_or_session_with_a_role(client, viewer, nobody):
    assert client.get("/metrics").status_code == 401
    _, raw = do_issue_token(viewer, acting_user=None)
    response = client.get("/metrics", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    _, raw = do_issue_token(nobody, acting_user=None)
    refused = client.get("/metrics", headers={"Authorization": f"Bearer {raw}"})
    assert refused.status_code == 403 and refused.json()["error"] == "FORBIDDEN"


@pytest.mark.parametrize("url", ["/api/v1/openapi.json", "/api/v1/docs"])
def test_the_openapi_document_needs_a_login(client, viewer, url):
    response = client.get(url)
    if url.endswith("/docs"):  # a page: a browser is sent to sign in
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    else:
        assert response.status_code == 401 and response.json()["error"] == "UNAUTHENTICATED"
    _, raw = do_issue_token(viewer, acting_user=None)
    assert client.get(url, headers={"Authorization": f"Bearer {raw}"}).status_code == 200
    client.force_login(viewer)
    assert client.get(url).status_code == 200


def test_health_needs_no_login(client):
    response = client.get("/api/v1/health")
    assert response.status_code in (200, 503)
    assert set(response.json()) == {
        "status",
        "database",
        "redis",
        "workers",
        "object_store",
        "warnings",
        "clusters",  # each cluster's backend and sync state, an error's code only (#35)
        "version",
    }


def test_a_role_given_back_opens_the_pages_again(client, nobody):
    client.force_login(nobody)
    assert client.get("/").status_code == 403
    nobody.groups.add(Group.objects.get(name="viewer"))
    assert client.get("/").status_code == 200
