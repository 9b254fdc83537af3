"""Actions that change who may do what: users, their role, API tokens. Each is audited in the
transaction that makes the change (fail closed).

The ``do_*`` actions (used by ``create_user``, ``demo_users``, ``issue_token``, ``revoke_token``
and the tokens page) write their rows through querysets (``bulk_create`` / ``update``), which send
no model signals, and audit themselves: exactly one event per change, with ``before`` and
``after``. Writes that bypass them through the Django admin, and deletions from anywhere, are
audited by :mod:`accounts.admin_audit`.

Passwords and token values never enter an event (a token is named by its stored prefix).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction
from django.utils import timezone

from accounts.choices import AccountAction
from accounts.models import ApiToken
from accounts.roles import Role
from audit import trail
from audit.choices import AuditContext

__all__ = [
    "FROM_SCOPE",
    "TOKEN_DEFAULT_DAYS",
    "access_snapshot",
    "do_change_user",
    "do_create_user",
    "do_issue_token",
    "do_revoke_token",
    "record_user_event",
]


# -- auditing ------------------------------------------------------------------------------------


#: ``acting_user=FROM_SCOPE``: the actor is the current audit scope's (a deletion from the admin).
FROM_SCOPE: Any = object()


def _record(
    action: str, *, acting_user: Any, target_type: str, target_id: str, **fields: Any
) -> None:
    """One audit event, in the caller's transaction. Outside any audit scope (a management
    command, a script) the context is ``cli``; ``acting_user=FROM_SCOPE`` takes the scope's."""
    if acting_user is not FROM_SCOPE:
        fields["actor"] = acting_user
    trail.record(
        action,
        context=None if trail.current_scope() else AuditContext.CLI,
        target_type=target_type,
        target_id=target_id,
        **fields,
    )


def record_user_event(action: str, user: Any, *, acting_user: Any, **fields: Any) -> None:
    """One audit event about ``user`` (target ``user:<username>``), in the caller's transaction."""
    _record(
        action, acting_user=acting_user, target_type="user", target_id=user.get_username(), **fields
    )


def access_snapshot(user: Any) -> dict[str, Any]:
    """What decides a user's access, read from the database (never a password)."""
    model = get_user_model()
    row = model.objects.filter(pk=user.pk).values("is_active", "is_staff", "is_superuser").get()
    groups = model.groups.through.objects.filter(user_id=user.pk)
    perms = model.user_permissions.through.objects.filter(user_id=user.pk)
    return {
        "username": user.get_username(),
        "roles": sorted(groups.values_list("group__name", flat=True)),
        **row,
        "permissions": sorted(
            f"{app}.{codename}"
            for app, codename in perms.values_list(
                "permission__content_type__app_label", "permission__codename"
            )
        ),
    }


def _role_group(role: str) -> Group:
    if role not in Role.ALL:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(Role.ALL)}")
    group = Group.objects.filter(name=role).first()
    if group is None:
        raise ValueError(f"role group {role!r} is missing: run `manage.py migrate` first")
    return group


def _set_role_rows(user: Any, group: Group) -> None:
    """Make ``group`` the user's only role group (other groups are kept), without signals."""
    through = get_user_model().groups.through
    through.objects.filter(user_id=user.pk, group__name__in=Role.ALL).exclude(
        group_id=group.pk
    ).delete()
    if not through.objects.filter(user_id=user.pk, group_id=group.pk).exists():
        through.objects.bulk_create([through(user_id=user.pk, group_id=group.pk)])


def _forget_roles(user: Any) -> None:
    user.__dict__.pop("_strata_roles", None)


# -- actions ---------------------------------------------------------------------------------------


def do_create_user(
    *, username: str, role: str, password: str, email: str = "", acting_user: Any
) -> AbstractBaseUser:
    """Create ``username`` with ``role`` (admin also makes them staff and superuser).

    Audited as one ``config.user_created`` event whose ``after`` holds the access."""
    model = get_user_model()
    group = _role_group(role)
    with transaction.atomic():
        if model.objects.filter(username=username).exists():
            raise ValueError(f"user {username!r} exists")
        user = model(
            username=model.normalize_username(username),
            email=model.objects.normalize_email(email),
            is_staff=role == Role.ADMIN,
            is_superuser=role == Role.ADMIN,
        )
        user.set_password(password)
        model.objects.bulk_create([user])  # no post_save: this action audits itself
        _set_role_rows(user, group)
        record_user_event(
            AccountAction.USER_CREATED,
            user,
            acting_user=acting_user,
            before=None,
            after=access_snapshot(user),
        )
    return user


def do_change_user(
    user: Any, *, role: str | None = None, password: str | None = None, acting_user: Any
) -> bool:
    """Give ``user`` exactly the Strata role ``role`` (admin also makes them staff and
    superuser, any other role neither) and / or set a new ``password``.

    One event when anything changed: ``config.role_changed`` with ``before`` / ``after`` access
    (``extra.password_set`` says whether the password changed too), else ``config.password_set``
    when only the password did. Returns whether anything changed."""
    model = get_user_model()
    group = _role_group(role) if role is not None else None
    with transaction.atomic():
        locked = model.objects.select_for_update().get(pk=user.pk)
        before = access_snapshot(locked)
        updates: dict[str, Any] = {}
        if group is not None:
            updates["is_staff"] = updates["is_superuser"] = role == Role.ADMIN
            _set_role_rows(locked, group)
        password_set = password is not None and not locked.check_password(password)
        if password_set:
            locked.set_password(password)
            updates["password"] = locked.password
        if updates:
            model.objects.filter(pk=locked.pk).update(**updates)  # no post_save, see above
        after = access_snapshot(locked)
        if after != before:
            record_user_event(
                AccountAction.ROLE_CHANGED,
                locked,
                acting_user=acting_user,
                before=before,
                after=after,
                extra={"password_set": password_set},
            )
        elif password_set:
            record_user_event(AccountAction.PASSWORD_SET, locked, acting_user=acting_user)
    for field, value in updates.items():
        setattr(user, field, value)
    _forget_roles(user)
    return after != before or password_set


#: A token issued without ``days`` expires after this many days.
TOKEN_DEFAULT_DAYS = 90


def do_issue_token(
    user: Any, *, name: str = "", days: int | None = TOKEN_DEFAULT_DAYS, acting_user: Any
) -> tuple[Any, str]:
    """A new API token for ``user``, valid ``days`` days (``None``: no expiry); returns the row
    and the token, shown once.

    Audited as one ``config.token_issued`` event naming the token by its stored prefix."""
    if not user.is_active:
        raise ValueError(f"user {user.get_username()!r} is not active")
    if days is not None and days < 1:
        raise ValueError("a token is valid for at least 1 day")
    expires_at = timezone.now() + dt.timedelta(days=days) if days is not None else None
    token, raw = ApiToken.new(user, name=name, expires_at=expires_at)
    with transaction.atomic():
        ApiToken.objects.bulk_create([token])  # no post_save: this action audits itself
        _record(
            AccountAction.TOKEN_ISSUED,
            acting_user=acting_user,
            target_type="api_token",
            target_id=token.prefix,
            before=None,
            after={
                "user": user.get_username(),
                "name": token.name,
                "prefix": token.prefix,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return token, raw


def do_revoke_token(token: Any, *, acting_user: Any) -> bool:
    """Revoke ``token`` at once (it no longer authenticates); audited once. False if it was
    already revoked (nothing changes, nothing is written)."""
    with transaction.atomic():
        now = timezone.now()
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if not changed:
            return False
        token.revoked_at = now
        _record(
            AccountAction.TOKEN_REVOKED,
            acting_user=acting_user,
            target_type="api_token",
            target_id=token.prefix,
            before={"revoked_at": None},
            after={
                "user": token.user.get_username(),
                "name": token.name,
                "revoked_at": now.isoformat(),
            },
        )
    return True
