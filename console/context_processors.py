"""Template context shared by every page: navigation, the user's roles, the version."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse

from accounts.roles import Role, user_roles

NAV = [
    ("Overview", "console:overview"),
    ("Topics", "console:topics"),
    ("Brokers & disks", "console:brokers"),
    ("Topology", "console:topology"),
    ("Workflows", "workflows:list"),
    ("Spark jobs", "spark_tasks:run-list"),
    ("Audit", "audit:list"),
]


ADMIN_NAV = [("Tokens", "accounts:tokens")]


def strata(request: HttpRequest) -> dict:
    path = request.path
    items = []
    roles = user_roles(request.user)
    for label, name in NAV + (ADMIN_NAV if Role.ADMIN in roles else []):
        url = reverse(name)
        active = path == url if url == "/" else path.startswith(url)
        items.append({"label": label, "url": url, "active": active})
    return {
        "strata_nav": items,
        "strata_roles": sorted(roles),
        "strata_version": settings.STRATA_VERSION,
    }
