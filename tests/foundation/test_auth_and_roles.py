"""Every page is behind login; roles are groups; tokens authenticate the API."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.roles import Role, has_role
from tests.conftest import sign_in

PAGES = ["/", "/topics/", "/brokers/", "/topology/", "/workflows/", "/audit/", "/spark/"]


@pytest.mark.django_db
def test_role_groups_exist_after_migrate():
    assert set(Group.objects.values_list("name", flat=True)) >= set(Role.ALL)


@pytest.mark.django_db
@pytest.mark.parametrize("url", PAGES)
def test_every_page_redirects_to_login_when_signed_out(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_for_a_viewer_with_navigation(client, viewer, url):
    client.force_login(viewer)
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    for label in (
        "Overview",
        "Topics",
        "Brokers &amp; disks",
        "Topology",
        "Workflows",
        "Spark jobs",
        "Audit",
    ):
        assert f">{label}</a>" in html


def test_roles_imply_viewing_and_admin_implies_everything(viewer, operator, approver, admin):
    assert has_role(viewer, Role.VIEWER) and not has_role(viewer, Role.OPERATOR)
    assert has_role(operator, Role.OPERATOR) and not has_role(operator, Role.APPROVER)
    assert has_role(approver, Role.APPROVER) and not has_role(approver, Role.OPERATOR)
    assert all(has_role(admin, r) for r in Role.ALL)


@pytest.mark.django_db
def test_create_user_command_creates_a_user_who_can_sign_in(client):
    out = io.StringIO()
    call_command(
        "create_user", "sre1", "--role", "operator", "--password", "s3cret-pass-word", stdout=out
    )
    assert "Created user sre1 with role operator" in out.getvalue()
    assert sign_in(client, "sre1", "s3cret-pass-word")
    call_command(
        "create_user", "sre1", "--role", "approver", "--password", "other-pass-word", stdout=out
    )
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="sre1")
    assert list(user.groups.values_list("name", flat=True)) == ["approver"]


@pytest.mark.django_db
def test_create_user_without_password_prints_a_generated_one(client):
    out = io.StringIO()
    call_command("create_user", "sre2", "--role", "viewer", stdout=out)
    password = out.getvalue().split("Password: ")[1].strip()
    assert sign_in(client, "sre2", password)


def test_issue_token_prints_a_bearer_token_that_the_api_accepts(client, operator):
    out = io.StringIO()
    call_command("issue_token", operator.username, stdout=out)
    token = out.getvalue().strip()
    response = client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response.json() == {"username": operator.username, "roles": ["operator"]}


@pytest.mark.django_db
def test_issue_token_for_unknown_user_is_a_clear_error():
    with pytest.raises(CommandError, match="No active user named 'ghost'"):
        call_command("issue_token", "ghost")


@pytest.mark.django_db
def test_api_without_credentials_answers_401_json(client):
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert response.json()["error"] == "UNAUTHENTICATED"
    bad = client.get("/api/v1/me", HTTP_AUTHORIZATION="Bearer strata_not-a-token")
    assert bad.status_code == 401
