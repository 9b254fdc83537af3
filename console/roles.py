"""Roles, users and API tokens: who may do what in Strata, and the actions that change it.

Roles are Django groups created by a migration: viewer, operator, approver, admin. Every role may
read. An operator requests workflows, an approver approves them, an admin may do all of that and
administer Strata. Superusers count as admin. Without a role a user can sign in and out, nothing
else (the access gate, :mod:`config.middleware`).

Changes of this configuration are audited in the transaction that makes them (fail closed):

- The ``do_*`` actions (used by ``create_user``, ``demo_users``, ``issue_token``) write their rows
  through querysets (``bulk_create`` / ``update``), which send no model signals, and audit
  themselves: exactly one event per change, with ``before`` and ``after``. The signal receivers
  (here, and the workflows app's older ones) exist for writes that bypass the actions, and must
  not audit an action a second time.
- Edits through the Django admin are audited by the receivers below, once per saved form, inside
  the admin's own transaction: the user's access (roles, staff / superuser / active flags,
  permissions) is read before the admin's first write and compared with what the admin's change
  log entry (written last) finds. Deleting a user is audited whatever deletes it.

Passwords and token values never enter an event (a token is named by its stored prefix).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from workflows.choices import AuditAction, AuditContext

__all__ = [
    "ConfigAction",
    "Role",
    "access_snapshot",
    "connect_admin_audit",
    "do_change_user",
    "do_create_user",
    "do_issue_token",
    "do_revoke_token",
    "has_role",
    "require_role",
    "user_roles",
]


class ConfigAction:
    """Audit action names of access configuration: ``workflows.choices.AuditAction``'s, and the
    two it lacks."""

    USER_CREATED = AuditAction.USER_CREATED
    ROLE_CHANGED = AuditAction.ROLE_CHANGED
    TOKEN_ISSUED = AuditAction.TOKEN_ISSUED
    TOKEN_REVOKED = AuditAction.TOKEN_REVOKED
    PASSWORD_SET = "config.password_set"  # noqa: S105 (an action name)
    USER_DELETED = "config.user_deleted"


class Role:
    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"

    ALL = (VIEWER, OPERATOR, APPROVER, ADMIN)
    CHOICES = [(r, r.capitalize()) for r in ALL]


def user_roles(user: AbstractBaseUser | AnonymousUser) -> set[str]:
    """The roles a user holds, cached on the user object for the request."""
    if not user or not user.is_authenticated:
        return set()
    cached = getattr(user, "_strata_roles", None)
    if cached is None:
        cached = set(user.groups.filter(name__in=Role.ALL).values_list("name", flat=True))
        if user.is_superuser:
            cached.add(Role.ADMIN)
        user._strata_roles = cached
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    """True when ``user`` may act as ``role``: admin may act as every role; everyone may view."""
    roles = user_roles(user)
    if not roles:
        return False
    return role == Role.VIEWER or role in roles or Role.ADMIN in roles


def require_role(role: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """View decorator: 403 unless the signed-in user holds ``role`` (login is enforced globally)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request, *args: Any, **kwargs: Any) -> Any:
            if not has_role(request.user, role):
                raise PermissionDenied(f"This needs the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# -- auditing ------------------------------------------------------------------------------------


_FROM_SCOPE: Any = object()


def _record(
    action: str, *, acting_user: Any, target_type: str, target_id: str, **fields: Any
) -> None:
    """One audit event, in the caller's transaction. Outside any audit scope (a management
    command, a script) the context is ``cli``; ``acting_user=_FROM_SCOPE`` takes the scope's."""
    from workflows import audit

    if acting_user is not _FROM_SCOPE:
        fields["actor"] = acting_user
    audit.record(
        action,
        context=None if audit.current_scope() else AuditContext.CLI,
        target_type=target_type,
        target_id=target_id,
        **fields,
    )


def _record_user(action: str, user: Any, *, acting_user: Any, **fields: Any) -> None:
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
        _record_user(
            ConfigAction.USER_CREATED,
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
            _record_user(
                ConfigAction.ROLE_CHANGED,
                locked,
                acting_user=acting_user,
                before=before,
                after=after,
                extra={"password_set": password_set},
            )
        elif password_set:
            _record_user(ConfigAction.PASSWORD_SET, locked, acting_user=acting_user)
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
    import datetime as dt

    from django.utils import timezone

    from console.models import ApiToken

    if not user.is_active:
        raise ValueError(f"user {user.get_username()!r} is not active")
    if days is not None and days < 1:
        raise ValueError("a token is valid for at least 1 day")
    expires_at = timezone.now() + dt.timedelta(days=days) if days is not None else None
    token, raw = ApiToken.new(user, name=name, expires_at=expires_at)
    with transaction.atomic():
        ApiToken.objects.bulk_create([token])  # no post_save: this action audits itself
        _record(
            ConfigAction.TOKEN_ISSUED,
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
    from django.utils import timezone

    from console.models import ApiToken

    with transaction.atomic():
        now = timezone.now()
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if not changed:
            return False
        token.revoked_at = now
        _record(
            ConfigAction.TOKEN_REVOKED,
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


# -- the Django admin (and deletions from anywhere) -------------------------------------------------

_BEFORE_ATTR = "_strata_access_before"


def _transaction_id() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        return cursor.fetchone()[0]


def _remember_access(user_pk: int | None) -> None:
    """Keep the user's access as it was before the first write of this transaction."""
    if user_pk is None or not connection.in_atomic_block:
        return  # outside a transaction no admin change log can follow in the same one
    txid = _transaction_id()
    stash = getattr(connection, _BEFORE_ATTR, None)
    if stash is None or stash["txid"] != txid:
        stash = {"txid": txid, "users": {}}
        setattr(connection, _BEFORE_ATTR, stash)
    if user_pk not in stash["users"]:
        found = get_user_model().objects.filter(pk=user_pk).first()
        if found is not None:
            stash["users"][user_pk] = access_snapshot(found)


def _recalled_access(user_pk: int) -> dict | None:
    stash = getattr(connection, _BEFORE_ATTR, None)
    if stash is None or not connection.in_atomic_block or stash["txid"] != _transaction_id():
        return None
    return stash["users"].pop(user_pk, None)


def _on_user_pre_save(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    update_fields = kwargs.get("update_fields")
    if raw or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return  # signing in touches last_login only
    _remember_access(instance.pk)


def _on_groups_pre_change(
    sender: Any, instance: Any, action: str, reverse: bool, **kwargs: Any
) -> None:
    if action in ("pre_add", "pre_remove", "pre_clear") and not reverse:
        _remember_access(instance.pk)


def _user_m2m_senders() -> list[Any]:
    model = get_user_model()
    return [model.groups.through, model.user_permissions.through]


def _on_admin_log_entry(sender: Any, instance: Any, created: bool, raw: bool = False, **kw: Any):
    """The admin writes its change log entry last, inside the transaction of the change."""
    from django.contrib.admin.models import ADDITION, CHANGE

    model = get_user_model()
    if raw or not created or instance.action_flag not in (ADDITION, CHANGE):
        return
    if instance.content_type.model_class() is not model:
        return
    user = model.objects.filter(pk=instance.object_id).first()
    if user is None:
        return
    acting_user = model.objects.filter(pk=instance.user_id).first()
    with transaction.atomic():  # a savepoint of the admin's transaction
        if instance.action_flag == ADDITION:
            _recalled_access(user.pk)
            _record_user(
                ConfigAction.USER_CREATED,
                user,
                acting_user=acting_user,
                before=None,
                after=access_snapshot(user),
                extra={"via": "admin"},
            )
            return
        before, after = _recalled_access(user.pk), access_snapshot(user)
        # No "before": the admin wrote outside a transaction (its password form): no access
        # change to tell.
        if before is not None and before != after:
            _record_user(
                ConfigAction.ROLE_CHANGED,
                user,
                acting_user=acting_user,
                before=before,
                after=after,
                extra={"via": "admin"},
            )


def _on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Deleting a user removes their access: audited inside the deletion's transaction."""
    with transaction.atomic():
        _record_user(
            ConfigAction.USER_DELETED,
            instance,
            acting_user=_FROM_SCOPE,
            before=access_snapshot(instance),
            after=None,
        )


def connect_admin_audit() -> None:
    """Connect the receivers above. :mod:`console.models.access` calls it when it is imported,
    which Django does in every process before the app registry is ready."""
    user_model = settings.AUTH_USER_MODEL
    pre_save.connect(_on_user_pre_save, sender=user_model, dispatch_uid="strata_access_pre_save")
    pre_delete.connect(_on_user_deleted, sender=user_model, dispatch_uid="strata_access_deleted")
    for through in _user_m2m_senders():
        m2m_changed.connect(
            _on_groups_pre_change,
            sender=through,
            dispatch_uid=f"strata_access_m2m_{through._meta.label_lower}",
        )
    post_save.connect(
        _on_admin_log_entry, sender="admin.LogEntry", dispatch_uid="strata_access_admin_log"
    )
