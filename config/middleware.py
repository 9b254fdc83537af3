"""The access gate: every page and API route needs a Strata role, unless it is listed as public.

One rule, one place. A resolved request passes when its pattern is in :data:`PUBLIC_VIEWS`
(``/agent-events/`` checks the agents' signature itself) or the user, by session or Bearer token
(API and ``/metrics``), holds a role (superusers count as admin). Otherwise anonymous pages get a
302 to sign-in and the API 401 ``UNAUTHENTICATED``; a user without a role 403. Stronger roles are
checked by views and actions themselves. Static files never reach it (WhiteNoise serves them
first). The decision is left on ``request.strata_access`` (:class:`Access`).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse

from accounts.models import ApiToken
from accounts.roles import Role, user_roles

__all__ = ["PUBLIC_VIEWS", "Access", "StrataAccessMiddleware", "bearer_token"]

#: URL names (``namespace:name``) that need neither a login nor a role. Adding one is a security
#: decision: the URL walk test (tests/foundation/test_url_access.py) lists the same names and fails until
#: both agree.
PUBLIC_VIEWS = frozenset(
    {
        "login",
        "logout",  # a user whose roles were removed must still be able to sign out
        "api:get_health",  # monitoring probes; reveals liveness and the version only
        "console:favicon",
        "console:agent-events",  # machine endpoint: authenticated by the agents' HMAC signature
        "console:agent-events-cluster",
    }
)
PUBLIC_PATH_PREFIXES = ("/" + settings.STATIC_URL.lstrip("/"),)

#: Namespaces and URL names answered in JSON (401 / 403 bodies) that accept bearer tokens.
MACHINE_NAMESPACES = frozenset({"api"})
MACHINE_VIEWS = frozenset({"console:metrics"})
#: Pages inside a machine namespace: a browser without a session is sent to sign in (the API's
#: Swagger UI); a bearer token still works.
PAGES_IN_MACHINE_NAMESPACES = frozenset({"api:openapi-view"})


class Access:
    """The gate's decision, as written on ``request.strata_access``."""

    PUBLIC = "public"
    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"


UNAUTHENTICATED_MESSAGE = "Sign in or send Authorization: Bearer <token>."
FORBIDDEN_MESSAGE = (
    "Your account holds no Strata role (viewer, operator, approver or admin); ask an admin."
)


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


def _json_error(code: str, message: str, status: int) -> JsonResponse:
    response = JsonResponse({"error": code, "message": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="strata"'
    return response


class StrataAccessMiddleware:
    """Place it after ``AuthenticationMiddleware``. It decides in ``process_view``, once the URL
    is resolved, so a decision is made by URL name, never by a path prefix that can drift."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        match = request.resolver_match
        view_name = match.view_name if match else ""
        if view_name in PUBLIC_VIEWS or request.path_info.startswith(PUBLIC_PATH_PREFIXES):
            request.strata_access = Access.PUBLIC
            return None
        machine = view_name in MACHINE_VIEWS or bool(
            match and MACHINE_NAMESPACES.intersection(match.namespaces)
        )
        if machine:
            raw = bearer_token(request)
            if raw is not None:
                token = ApiToken.objects.authenticate(raw) if raw else None
                if token is None:  # a token that does not authenticate never falls back
                    return self._deny(request, Access.UNAUTHENTICATED, machine)
                request.user = token.user
                request.strata_api_token = token  # the API's BearerToken reuses it
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            page = view_name in PAGES_IN_MACHINE_NAMESPACES and bearer_token(request) is None
            return self._deny(request, Access.UNAUTHENTICATED, machine and not page)
        if not user_roles(user).intersection(Role.ALL):
            return self._deny(request, Access.FORBIDDEN, machine)
        request.strata_access = Access.ALLOWED
        return None

    @staticmethod
    def _deny(request: HttpRequest, decision: str, machine: bool) -> HttpResponse:
        request.strata_access = decision
        if decision == Access.UNAUTHENTICATED:
            if machine:
                return _json_error("UNAUTHENTICATED", UNAUTHENTICATED_MESSAGE, 401)
            return redirect_to_login(
                request.get_full_path(), settings.LOGIN_URL, REDIRECT_FIELD_NAME
            )
        if machine:
            return _json_error("FORBIDDEN", FORBIDDEN_MESSAGE, 403)
        raise PermissionDenied(FORBIDDEN_MESSAGE)
