"""Sign-in lockout (django-axes) and the audit of failed sign-ins: a lockout is one event, failed
sign-ins from one address are one event per window plus a counted summary, never one per try."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from django.core.management import call_command

from accounts.choices import AccountAction
from audit.choices import AuditOutcome
from audit.denials import DENIAL_KEY_PREFIX, flush_repeated_denials
from audit.models import AuditEvent
from tests.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db


def _fail(client, username: str):
    return client.post("/accounts/login/", {"username": username, "password": "wrong-password"})


def _close_denial_windows() -> None:
    """What the window's expiry does in Redis, without waiting for it."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    for key in r.scan_iter(match=DENIAL_KEY_PREFIX + "open:*"):
        r.delete(key)


def _events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def test_the_limit_locks_the_name_from_that_address_and_is_audited_once(client, operator):
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert _fail(client, operator.username).status_code == 200  # the form again
    locked = _fail(client, operator.username)
    assert locked.status_code == 429
    assert b"Sign-in locked" in locked.content and operator.username.encode() in locked.content
    # The right password does not get in while locked; trying does not add a lockout event.
    assert not sign_in(client, operator.username, PASSWORD)
    assert not sign_in(client, operator.username, PASSWORD)

    lockouts = _events(AccountAction.LOCKED_OUT)
    assert len(lockouts) == 1
    assert lockouts[0].target_id == operator.username
    assert lockouts[0].outcome == AuditOutcome.DENIED
    assert lockouts[0].extra["failures"] == limit and lockouts[0].extra["ip"] == "127.0.0.1"
    assert not _events(AccountAction.LOGIN)

    call_command("axes_reset_username", operator.username)
    assert sign_in(client, operator.username, PASSWORD)
    assert len(_events(AccountAction.LOGIN)) == 1


def test_another_name_from_the_same_address_is_not_locked(client, operator, viewer):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _fail(client, operator.username)
    assert sign_in(client, viewer.username, PASSWORD)


def test_failed_sign_ins_are_one_event_per_window_and_a_count(client, operator):
    """A client rotating user names grows the log by two events per window, not one per try."""
    names = [f"guess-{i}" for i in range(12)]
    for name in names:
        assert _fail(client, name).status_code == 200
    failed = _events(AccountAction.LOGIN_FAILED)
    assert len(failed) == 1 and failed[0].target_id == "guess-0"
    assert failed[0].outcome == AuditOutcome.FAILURE

    assert flush_repeated_denials() == 0  # the window is still open: nothing to write yet
    _close_denial_windows()
    assert flush_repeated_denials() == 1
    assert flush_repeated_denials() == 0  # a count is written once

    failed = _events(AccountAction.LOGIN_FAILED)
    assert len(failed) == 2
    summary = failed[1]
    assert summary.extra["repeats"] == len(names) - 1
    assert summary.extra["first_seq"] == failed[0].seq
    assert "any user name" in summary.extra["repeats_of"]
    assert summary.extra["window_seconds"] == settings.STRATA_AUDIT_DENIAL_WINDOW_SECONDS

    # The next window opens with an event of its own.
    _fail(client, "guess-again")
    assert len(_events(AccountAction.LOGIN_FAILED)) == 3


def test_without_redis_every_failed_sign_in_is_written(client, settings):
    from audit import denials

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    denials._client_for.cache_clear()
    try:
        for name in ("a", "b", "c"):
            _fail(client, name)
    finally:
        denials._client_for.cache_clear()
    assert [e.target_id for e in _events(AccountAction.LOGIN_FAILED)] == ["a", "b", "c"]
