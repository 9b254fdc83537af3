"""The JSON API under ``/api/v1/``: one NinjaAPI, routers from each app, token or session auth.

Errors are always ``{"error": "<CODE>", "message": "..."}``; no traceback ever reaches a client.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, SessionAuth

from accounts.models import ApiToken, hash_token
from audit.api import router as audit_router
from config.edges import MAX_URL_BYTES
from console.api import router as console_router
from workflows.api import router as workflows_router

log = logging.getLogger(__name__)


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>`` with a token from ``manage.py issue_token``.

    The access gate (:mod:`config.middleware`) has already authenticated the token of every
    API request that sends one; its result is reused rather than looked up a second time."""

    def authenticate(self, request: HttpRequest, token: str):
        found = getattr(request, "strata_api_token", None)
        if found is None or found.key_hash != hash_token(token):
            found = ApiToken.objects.authenticate(token)
        if found is None:
            return None
        request.user = found.user
        return found.user


#: The error answers every operation may give, as the OpenAPI document lists them.
ERROR_RESPONSES = {
    "400": "Invalid request: a bad parameter, a query parameter given more than once, a NUL "
    "byte, a body that is not JSON (INVALID_REQUEST, or the action's own code such as "
    "PLAN_CHANGED)",
    "401": "Not signed in and no valid bearer token (UNAUTHENTICATED)",
    "403": "No Strata role, or not the role this needs; CSRF refusal (FORBIDDEN)",
    "404": "No such object (NOT_FOUND)",
    "409": "Conflicts with the current state (e.g. WORKFLOW_CONFLICT, ALREADY_DECIDED)",
    "413": "Body over STRATA_MAX_BODY_BYTES (PAYLOAD_TOO_LARGE)",
    "414": f"Path and query over {MAX_URL_BYTES} bytes (URI_TOO_LONG)",
}
ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    "required": ["error", "message"],
}


class StrataApi(NinjaAPI):
    """The NinjaAPI whose OpenAPI document also lists every operation's error answers, all
    ``{"error": CODE, "message": ...}`` (:data:`ERROR_RESPONSES`)."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                secured = bool(operation.get("security"))
                responses = operation.setdefault("responses", {})
                for status, description in ERROR_RESPONSES.items():
                    if status in ("401", "403") and not secured:
                        continue
                    responses.setdefault(status, {"description": description, "content": ref})
        return schema


api = StrataApi(
    title="Strata API",
    version=settings.STRATA_VERSION,
    urls_namespace="api",
    auth=[BearerToken(), SessionAuth()],
    docs_url="/docs",
)


def error(request: HttpRequest, code: str, message: str, status: int) -> HttpResponse:
    return api.create_response(request, {"error": code, "message": message}, status=status)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error(request, "UNAUTHENTICATED", "Sign in or send Authorization: Bearer <token>.", 401)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    details = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg', 'invalid')}"
        for e in exc.errors
    )
    return error(request, "INVALID_REQUEST", details or "Invalid request.", 400)


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error(request, "NOT_FOUND", str(exc) or "Not found.", 404)


#: The documented code of an HTTP error that carries none of its own (a body that is not JSON,
#: ninja's CSRF refusal of a session POST, a method the route does not take).
CODE_BY_STATUS = {
    400: "INVALID_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    422: "INVALID_REQUEST",
}


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    status = exc.status_code
    code = getattr(exc, "code", None) or CODE_BY_STATUS.get(status, "ERROR")
    return error(request, code, str(exc), status)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.exception("unhandled API error on %s %s", request.method, request.path)
    return error(request, "INTERNAL_ERROR", "An internal error occurred; it has been logged.", 500)


api.add_router("/", console_router)
api.add_router("/", workflows_router)
api.add_router("/", audit_router)
