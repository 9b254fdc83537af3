"""Audit events for sign-in and configuration changes, from Django's signals.

Decision: configuration changes (user created, roles changed, API token issued or revoked) are
caught by signals rather than by each command, so the admin site, the console's management
commands and a shell are all covered. The event is written in the same transaction as the
change when the caller runs one (``create_user`` does); in autocommit it follows right after.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import m2m_changed, post_save, pre_save
from django.dispatch import receiver

from console.models import ApiToken
from workflows.audit import current_scope, record_standalone
from workflows.choices import AuditAction, AuditContext, AuditOutcome

User = get_user_model()


def _context() -> str:
    scope = current_scope()
    return scope.context if scope else AuditContext.CLI


def _ip(request: Any) -> str:
    return (request.META.get("REMOTE_ADDR", "") if request is not None else "")[:64]


@receiver(user_logged_in, dispatch_uid="strata_audit_login")
def on_login(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    record_standalone(
        AuditAction.LOGIN,
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
        AuditAction.LOGOUT,
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
        AuditAction.LOGIN_FAILED,
        actor=None,
        actor_name=username or "(unknown)",
        context=AuditContext.WEB,
        target_type="user",
        target_id=username,
        outcome=AuditOutcome.FAILURE,
        extra={"ip": _ip(request)},
    )


@receiver(post_save, sender=User, dispatch_uid="strata_audit_user_created")
def on_user_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kw: Any) -> None:
    if not created or raw:
        return
    record_standalone(
        AuditAction.USER_CREATED,
        context=_context(),
        target_type="user",
        target_id=instance.get_username(),
        after={
            "username": instance.get_username(),
            "is_staff": instance.is_staff,
            "is_superuser": instance.is_superuser,
        },
    )


@receiver(m2m_changed, sender=User.groups.through, dispatch_uid="strata_audit_roles")
def on_roles_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set | None, **kw: Any
) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if reverse:  # group.user_set.add(...): one event per user
        users = list(User.objects.filter(pk__in=pk_set or ()))
        groups = [instance.name]
    else:
        users = [instance]
        groups = list(Group.objects.filter(pk__in=pk_set or ()).values_list("name", flat=True))
    for user in users:
        if action == "post_clear" and not reverse:
            groups = []
        record_standalone(
            AuditAction.ROLE_CHANGED,
            context=_context(),
            target_type="user",
            target_id=user.get_username(),
            after={"roles": sorted(user.groups.values_list("name", flat=True))},
            extra={"change": action.removeprefix("post_"), "groups": sorted(groups)},
        )


@receiver(pre_save, sender=ApiToken, dispatch_uid="strata_audit_token_pre")
def on_token_pre_save(sender: Any, instance: ApiToken, raw: bool = False, **kw: Any) -> None:
    instance._strata_was_revoked = bool(
        instance.pk and ApiToken.objects.filter(pk=instance.pk, revoked_at__isnull=False).exists()
    )


@receiver(post_save, sender=ApiToken, dispatch_uid="strata_audit_token_saved")
def on_token_saved(
    sender: Any, instance: ApiToken, created: bool, raw: bool = False, **kw: Any
) -> None:
    if raw:
        return
    if created:
        action = AuditAction.TOKEN_ISSUED
    elif instance.revoked_at and not getattr(instance, "_strata_was_revoked", True):
        action = AuditAction.TOKEN_REVOKED
    else:
        return
    record_standalone(
        action,
        context=_context(),
        target_type="api_token",
        target_id=instance.prefix,
        after={"user": instance.user.get_username(), "name": instance.name},
    )
