"""Audit events for sign-in, from Django's and django-axes' signals.

A failed sign-in is a denial: the first from an address in a window is an event, the ones
after it from that address (any user name, same reason) are counted and written as one event
when the window closes (:mod:`audit.denials`), so an anonymous client cannot grow the log
without bound by rotating names. Axes locks a (name, address) pair after the limit; a lockout
is audited once, on the failure that reaches the limit, not on every refused try during it.

User creation, role changes, token issue and revocation are audited by
:mod:`accounts.actions` (and :mod:`accounts.admin_audit` for the Django admin), in the same
transaction as the change, once per change.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from accounts.choices import AccountAction
from audit.choices import AuditContext, AuditOutcome
from audit.denials import record_denial
from audit.trail import record_standalone


def _ip(request: Any) -> str:
    return (request.META.get("REMOTE_ADDR", "") if request is not None else "")[:64]


@receiver(user_logged_in, dispatch_uid="strata_audit_login")
def on_login(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    record_standalone(
        AccountAction.LOGIN,
        actor=user,
        context=AuditContext.WEB,
        target_type="user",
        target_id=user.get_username(),
        extra={"ip": _ip(request)},
    )


@receiver(user_logged_out, dispatch_uid="strata_audit_logout")
def on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    record_standalone(
        AccountAction.LOGOUT,
        actor=user,
        context=AuditContext.WEB,
        target_type="user",
        target_id=user.get_username(),
        extra={"ip": _ip(request)},
    )


@receiver(user_login_failed, dispatch_uid="strata_audit_login_failed")
def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username", ""))[:150]  # the password is already masked
    locked = bool(getattr(request, "axes_locked_out", False))
    record_denial(
        AccountAction.LOGIN_FAILED,
        client=_ip(request),
        error="locked_out" if locked else "bad_credentials",
        identity="sign-in",
        repeats_of="failed sign-ins from this address, any user name",
        actor=None,
        actor_name=username or "(unknown)",
        context=AuditContext.WEB,
        target_type="user",
        target_id=username,
        outcome=AuditOutcome.FAILURE,
        extra={"ip": _ip(request), **({"locked_out": True} if locked else {})},
    )


@receiver(user_locked_out, dispatch_uid="strata_audit_locked_out")
def on_locked_out(
    sender: Any,
    request: Any = None,
    username: str | None = None,
    ip_address: str = "",
    **kwargs: Any,
) -> None:
    failures = getattr(request, "axes_failures_since_start", None)
    if failures != settings.AXES_FAILURE_LIMIT:
        return  # a refused try during the lockout (counted as a failed sign-in), not a new lock
    record_standalone(
        AccountAction.LOCKED_OUT,
        actor=None,
        actor_name=(username or "(unknown)")[:150],
        context=AuditContext.WEB,
        target_type="user",
        target_id=(username or "")[:150],
        outcome=AuditOutcome.DENIED,
        extra={
            "ip": (ip_address or "")[:64],
            "failures": failures,
            "cooloff_seconds": int(settings.AXES_COOLOFF_TIME.total_seconds()),
        },
    )
