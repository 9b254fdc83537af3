"""Audit events for sign-in, from Django's signals.

User creation, role changes, token issue and revocation are audited by
:mod:`accounts.actions` (and :mod:`accounts.admin_audit` for the Django admin), in the same
transaction as the change, once per change.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from accounts.choices import AccountAction
from audit.choices import AuditContext, AuditOutcome
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
def on_login_failed(sender: Any, credentials: dict, request: Any = None, **kwargs: Any) -> None:
    username = str(credentials.get("username", ""))[:150]  # the password is already masked
    record_standalone(
        AccountAction.LOGIN_FAILED,
        actor=None,
        actor_name=username or "(unknown)",
        context=AuditContext.WEB,
        target_type="user",
        target_id=username,
        outcome=AuditOutcome.FAILURE,
        extra={"ip": _ip(request)},
    )
