"""Sign-in, sign-out, failed sign-in and configuration changes are audited."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from accounts.actions import do_issue_token, do_revoke_token
from accounts.choices import AccountAction
from audit.choices import AuditOutcome
from audit.models import AuditEvent
from tests.conftest import PASSWORD
from workflows.choices import AuditAction

pytestmark = pytest.mark.django_db


def test_login_logout_and_failed_login_are_audited(client, operator):
    client.post("/accounts/login/", {"username": operator.username, "password": "wrong"})
    failed = AuditEvent.objects.get(action=AccountAction.LOGIN_FAILED)
    assert failed.outcome == AuditOutcome.FAILURE and failed.actor_name == operator.username
    assert "wrong" not in str(failed.extra)
    client.post("/accounts/login/", {"username": operator.username, "password": PASSWORD})
    login = AuditEvent.objects.get(action=AccountAction.LOGIN)
    assert login.actor == operator and login.context == "web" and "ip" in login.extra
    client.post("/accounts/logout/")
    assert AuditEvent.objects.get(action=AccountAction.LOGOUT).actor == operator


def test_user_creation_and_role_change_by_command_are_audited():
    call_command(
        "create_user",
        "sre9",
        "--role",
        "operator",
        "--password",
        "pw-123-abc-XYZ",
        stdout=io.StringIO(),
    )
    created = AuditEvent.objects.get(action=AccountAction.USER_CREATED, target_id="sre9")
    assert created.context == "cli" and created.actor is None
    assert created.after["roles"] == ["operator"]
    roles = AuditEvent.objects.filter(action=AccountAction.ROLE_CHANGED, target_id="sre9")
    assert not roles.exists()  # one event for the creation, roles included
    call_command(
        "create_user",
        "sre9",
        "--role",
        "approver",
        "--password",
        "pw-123-abc-XYZ",
        stdout=io.StringIO(),
    )
    changed = roles.get()
    assert changed.before["roles"] == ["operator"] and changed.after["roles"] == ["approver"]


def test_token_issue_and_revoke_are_audited(operator):
    token, raw = do_issue_token(operator, name="ci", acting_user=None)
    issued = AuditEvent.objects.get(action=AccountAction.TOKEN_ISSUED)
    assert issued.target_id == token.prefix and raw not in str(issued.extra) + str(issued.after)
    assert do_revoke_token(token, acting_user=None) is True
    assert AuditEvent.objects.filter(action=AccountAction.TOKEN_REVOKED).count() == 1
    assert do_revoke_token(token, acting_user=None) is False  # already revoked: nothing written
    assert AuditEvent.objects.filter(action=AccountAction.TOKEN_REVOKED).count() == 1


def test_api_actions_are_attributed_to_the_token_user_in_api_context(client, operator):
    _, raw = do_issue_token(operator, acting_user=None)
    response = client.post(
        "/api/v1/workflows",
        {"kind": "noop_check", "cluster": "lab", "params": {"label": "tok"}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 201
    event = AuditEvent.objects.get(action=AuditAction.WORKFLOW_REQUESTED)
    assert event.actor == operator and event.context == "api"
