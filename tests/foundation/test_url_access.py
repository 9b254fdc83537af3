"""Every URL pattern is behind the access gate unless it is one of the listed public ones.

The walk enumerates the URL resolver (config.urls, the Django admin and the ninja API's routes,
whose methods come from the API's own OpenAPI document), never a hand-written list of URLs. It
fails when a pattern cannot be classified (a new namespace, a path parameter it cannot fill) or
when the gate's answer for a persona differs from the table below:

=================  =========================  ==========================  =====================
pattern class      anonymous (and a token     signed in, no role          viewer / operator /
                   on a page)                 (session or token)          approver / admin
=================  =========================  ==========================  =====================
public             let through                let through                 let through
page (and admin)   302 to the login page      403                         let through
JSON API, metrics  401 {"error":              403 {"error": "FORBIDDEN"}  let through
                   "UNAUTHENTICATED"}
=================  =========================  ==========================  =====================

"Let through" means the gate decided ``allowed`` (or ``public``) and the answer is the view's
own: 200, or 400 / 404 / 405 / 422 for made-up ids and wrong methods, a 403 of a view that wants
a stronger role, the admin's own redirect to its login for non-staff; never 401 and never a
redirect to Strata's login page.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.shortcuts import resolve_url
from django.urls import URLResolver, get_resolver, resolve
from django.utils import timezone
from django.utils.regex_helper import normalize

from accounts.actions import do_issue_token
from config.middleware import PAGES_IN_MACHINE_NAMESPACES, PUBLIC_VIEWS, Access
from console.models import Cluster, ConsumerGroup, Topic

#: The only URL names reachable without a role. Keep in step with config.middleware.PUBLIC_VIEWS.
PUBLIC = {
    "login",
    "logout",
    "api:get_health",
    "console:favicon",
    "console:agent-events",
    "console:agent-events-cluster",
}
PAGE_NAMESPACES = {"console", "workflows", "spark_tasks", "audit", "accounts", "admin"}
JSON_NAMESPACES = {"api"}
JSON_VIEWS = {"console:metrics"}

ROLE_PERSONAS = ("viewer", "operator", "approver", "admin")
PERSONAS = ("anonymous", "no-role", "no-role-token", "viewer-token", *ROLE_PERSONAS)
MADE_UP_ID = "987654321"
# What a view may answer once the gate let a request through (see the module docstring).
VIEW_ANSWERS = {200, 302, 400, 403, 404, 405, 422}


@dataclasses.dataclass(frozen=True)
class Pattern:
    route: str  # as the resolver spells it, e.g. "topics/<slug:cluster>/<str:topic>/"
    regex: str  # the prefixes' and the pattern's regexes, joined
    view_name: str | None
    namespaces: tuple[str, ...]

    @property
    def kind(self) -> str | None:
        if self.view_name in PUBLIC:
            return "public"
        if self.view_name in JSON_VIEWS or JSON_NAMESPACES.intersection(self.namespaces):
            return "json"
        if self.namespaces and self.namespaces[0] in PAGE_NAMESPACES:
            return "page"
        return None  # unclassified: the walk fails


def _patterns(resolver: URLResolver, route: str = "", regex: str = "", namespaces=()):
    for p in resolver.url_patterns:
        piece = p.pattern.regex.pattern
        joined = regex + (piece if not regex else piece.removeprefix("^"))
        joined_route = route + (str(p.pattern) if not route else str(p.pattern).removeprefix("^"))
        if isinstance(p, URLResolver):
            ns = (*namespaces, p.namespace) if p.namespace else namespaces
            yield from _patterns(p, joined_route, joined, ns)
        else:
            name = f"{':'.join(namespaces)}:{p.name}" if namespaces and p.name else p.name
            yield Pattern(joined_route, joined, name, tuple(namespaces))


def _api_methods() -> dict[str, list[str]]:
    """``{route: [METHOD, ...]}`` of every operation in the ninja API's OpenAPI document."""
    from config.api import api

    schema = api.get_openapi_schema()
    return {
        re.sub(r"\{(\w+)\}", r"<\1>", path.lstrip("/")): sorted(m.upper() for m in ops)
        for path, ops in schema["paths"].items()
    }


def _cases() -> list[tuple[Pattern, str]]:
    api_methods = _api_methods()
    seen: set[str] = set()
    cases = []
    for pattern in _patterns(get_resolver()):
        if pattern.route in seen:  # ninja: one pattern per operation of the same path
            continue
        seen.add(pattern.route)
        for method in api_methods.get(pattern.route, ["GET"]):
            cases.append((pattern, method))
    return cases


CASES = _cases()


def test_the_walk_covers_every_api_operation():
    walked = {(p.route, m) for p, m in CASES}
    for route, methods in _api_methods().items():
        for method in methods:
            assert (route, method) in walked, f"{method} /{route} is not walked"


def test_public_urls_are_exactly_the_listed_exceptions():
    assert set(PUBLIC_VIEWS) == PUBLIC
    names = {p.view_name for p, _ in CASES}
    assert names >= PUBLIC, f"public names without a URL: {PUBLIC - names}"


# -- the walk ----------------------------------------------------------------------------------


@pytest.fixture
def world(db):
    """Objects the path parameters name: a cluster with a topic and a consumer group, an audit
    event."""
    from audit import trail

    cluster = Cluster.objects.create(
        name="walk", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    topic = Topic.objects.create(
        cluster=cluster,
        name="walk.orders",
        topic_id="t-walk",
        initial_partition_count=1,
        undeleted_partition_count=1,
    )
    group = ConsumerGroup.objects.create(
        cluster=cluster, group_id="walk.billing", synced_at=timezone.now()
    )
    with transaction.atomic():
        event = trail.record("test.url_walk", context="cli")
    return {
        "cluster": cluster.name,
        "name": cluster.name,
        "topic": topic.name,
        "group": group.group_id,
        "broker": "1",
        "log_dir": "logdir-0",
        "seq": str(event.seq),
        "pk": MADE_UP_ID,
        "workflow_id": MADE_UP_ID,
        "id": MADE_UP_ID,
        "object_id": MADE_UP_ID,
        "content_type_id": MADE_UP_ID,
        "app_label": "auth",
        "url": "made-up/",
    }


def _path(pattern: Pattern, samples: dict[str, str]) -> str:
    fmt, params = normalize(pattern.regex)[0]
    missing = [p for p in params if p not in samples]
    if missing:
        pytest.fail(f"/{pattern.route}: no sample value for {missing}; add one to `world`")
    path = "/" + fmt % {p: samples[p] for p in params}
    assert resolve(path).route == pattern.route, f"{path} does not reach /{pattern.route}"
    return path


def _persona(name: str) -> tuple[object | None, dict[str, str]]:
    """The user to sign in (None: anonymous or token only) and the request headers."""
    if name == "anonymous":
        return None, {}
    user = get_user_model().objects.create_user(username=f"walk-{name}")
    role = name.removesuffix("-token")
    if role in ROLE_PERSONAS:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    if role == "admin":
        user.is_staff = user.is_superuser = True
        user.save()
    if name.endswith("-token"):
        _, raw = do_issue_token(user, name="walk", acting_user=None)
        return None, {"Authorization": f"Bearer {raw}"}
    return user, {}


def _error(response) -> str | None:
    try:
        return response.json().get("error")
    except ValueError:
        return None


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("pattern", "method"), CASES, ids=[f"{m} /{p.route}" for p, m in CASES])
def test_every_url_is_behind_the_access_gate(client, world, pattern, method, persona):
    kind = pattern.kind
    if kind is None:
        pytest.fail(
            f"/{pattern.route} ({pattern.view_name}) is not classified: a page, a JSON route, or "
            "public (then also in config.middleware.PUBLIC_VIEWS)"
        )
    path = _path(pattern, world)
    user, headers = _persona(persona)
    if user is not None:
        client.force_login(user)
    body = {"data": b"{}", "content_type": "application/json"} if method != "GET" else {}
    response = client.generic(method, path, headers=headers, **body)
    decision = getattr(response.wsgi_request, "strata_access", None)
    assert decision is not None, f"the gate did not decide on {method} {path}"
    location = response.get("Location", "")
    login = resolve_url("login")
    to_login = response.status_code == 302 and location.startswith(login)

    token = persona.endswith("-token")
    if kind == "public":
        assert decision == Access.PUBLIC
    elif persona == "anonymous" or (token and kind == "page"):  # tokens do not sign in pages
        assert decision == Access.UNAUTHENTICATED
        # The API's Swagger UI is a page to a browser: sent to sign in, not answered 401.
        if kind == "page" or pattern.view_name in PAGES_IN_MACHINE_NAMESPACES:
            assert response.status_code == 302
            assert location == f"{login}?next={quote(path)}"
        else:
            assert response.status_code == 401
            assert _error(response) == "UNAUTHENTICATED"
    elif persona.startswith("no-role"):
        assert decision == Access.FORBIDDEN
        assert response.status_code == 403
        if kind == "json":
            assert _error(response) == "FORBIDDEN"
    else:
        assert decision == Access.ALLOWED
        assert response.status_code in VIEW_ANSWERS, response.content[:300]
        assert not to_login, f"{method} {path}: a signed-in {persona} was sent to sign in"
        assert response.status_code != 401
