"""Strata's roles and the checks every app uses: who may view, request, approve, administer.

Roles are Django groups created by a migration: viewer, operator, approver, admin. Every role may
read. An operator requests workflows, an approver approves them, an admin may do all of that and
administer Strata. Superusers count as admin. Without a role a user can sign in and out, nothing
else (the access gate, :mod:`config.middleware`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

__all__ = ["Role", "has_role", "require_role", "user_roles"]


class Role:
    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"

    ALL = (VIEWER, OPERATOR, APPROVER, ADMIN)
    CHOICES = [(r, r.capitalize()) for r in ALL]


#: Where :func:`user_roles` keeps a user object's roles (the object lives for one request).
_ROLES_CACHE = "_strata_roles"


def user_roles(user: User | AnonymousUser) -> set[str]:
    """The roles a user holds, cached on the user object for the request."""
    if not user or not user.is_authenticated:
        return set()
    cached: set[str] | None = getattr(user, _ROLES_CACHE, None)
    if cached is None:
        cached = set(user.groups.filter(name__in=Role.ALL).values_list("name", flat=True))
        if user.is_superuser:
            cached.add(Role.ADMIN)
        setattr(user, _ROLES_CACHE, cached)
    return cached


def has_role(user: User | AnonymousUser, role: str) -> bool:
    """True when ``user`` may act as ``role``: admin may act as every role; everyone may view."""
    roles = user_roles(user)
    if not roles:
        return False
    return role == Role.VIEWER or role in roles or Role.ADMIN in roles


def require_role(role: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """View decorator: 403 unless the signed-in user holds ``role`` (login is enforced globally)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if not has_role(request.user, role):
                raise PermissionDenied(f"This needs the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
