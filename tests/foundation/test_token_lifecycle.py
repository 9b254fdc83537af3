"""API tokens expire (90 days by default) and can be revoked at once, by command or on the admins'
tokens page; both are audited once (issue #16)."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.actions import TOKEN_DEFAULT_DAYS, do_issue_token
from accounts.choices import AccountAction
from accounts.models import ApiToken
from audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def _me(client, raw: str) -> int:
    return client.get("/api/v1/me", headers={"Authorization": f"Bearer {raw}"}).status_code


def test_a_token_expires_after_its_days_by_default_ninety(client, viewer):
    token, raw = do_issue_token(viewer, acting_user=None)
    left = token.expires_at - timezone.now()
    assert dt.timedelta(days=TOKEN_DEFAULT_DAYS - 1) < left <= dt.timedelta(days=TOKEN_DEFAULT_DAYS)
    assert _me(client, raw) == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert _me(client, raw) == 401


def test_issue_token_takes_days(viewer):
    out = io.StringIO()
    call_command("issue_token", viewer.username, "--days", "7", stdout=out)
    token = ApiToken.objects.get(prefix=out.getvalue().strip()[:12])
    assert token.expires_at - timezone.now() <= dt.timedelta(days=7)
    issued = AuditEvent.objects.get(action=AccountAction.TOKEN_ISSUED, target_id=token.prefix)
    assert issued.after["expires_at"] == token.expires_at.isoformat()


def test_revoke_token_by_command_stops_it_at_once_and_is_audited_once(client, viewer):
    token, raw = do_issue_token(viewer, acting_user=None)
    assert _me(client, raw) == 200
    call_command("revoke_token", token.prefix, stdout=io.StringIO())
    assert _me(client, raw) == 401
    call_command("revoke_token", token.prefix, stdout=io.StringIO())  # again: nothing new
    assert AuditEvent.objects.filter(action=AccountAction.TOKEN_REVOKED).count() == 1


def test_admins_list_and_revoke_tokens_on_the_tokens_page(client, admin, viewer):
    token, raw = do_issue_token(viewer, name="ci", acting_user=None)
    client.force_login(admin)
    page = client.get("/tokens/").content.decode()
    assert token.prefix in page and raw not in page and "ci" in page
    response = client.post("/tokens/", {"token": token.pk})
    assert response.status_code == 302
    assert _me(client, raw) == 401
    event = AuditEvent.objects.get(action=AccountAction.TOKEN_REVOKED)
    assert event.actor == admin and event.target_id == token.prefix


@pytest.mark.parametrize("persona", ["viewer", "operator", "approver"])
def test_the_tokens_page_is_for_admins_only(client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/tokens/").status_code == 403
    assert client.post("/tokens/", {"token": 1}).status_code == 403
