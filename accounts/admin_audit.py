"""Audit of access changes that bypass :mod:`accounts.actions`: edits through the Django admin,
and deleting a user from anywhere.

Edits through the Django admin are audited once per saved form, inside the admin's own
transaction: the user's access (roles, staff / superuser / active flags, permissions) is read
before the admin's first write and compared with what the admin's change log entry (written
last) finds. Deleting a user is audited whatever deletes it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from accounts.actions import FROM_SCOPE, access_snapshot, record_user_event
from accounts.choices import AccountAction

__all__ = ["connect_admin_audit"]


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


def _recalled_access(user_pk: int) -> dict[str, Any] | None:
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


def _on_admin_log_entry(
    sender: Any, instance: Any, created: bool, raw: bool = False, **kw: Any
) -> None:
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
            record_user_event(
                AccountAction.USER_CREATED,
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
            record_user_event(
                AccountAction.ROLE_CHANGED,
                user,
                acting_user=acting_user,
                before=before,
                after=after,
                extra={"via": "admin"},
            )


def _on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Deleting a user removes their access: audited inside the deletion's transaction."""
    with transaction.atomic():
        record_user_event(
            AccountAction.USER_DELETED,
            instance,
            acting_user=FROM_SCOPE,
            before=access_snapshot(instance),
            after=None,
        )


def connect_admin_audit() -> None:
    """Connect the receivers above. ``AccountsConfig.ready()`` calls it in every process."""
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
