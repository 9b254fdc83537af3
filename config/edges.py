"""Bad input stops at the door: a NUL byte anywhere a request carries text, or a body over the
size limit, is answered before any view, database query or audit event.

PostgreSQL cannot store a NUL in text, so one reaching a query was a 500. Here: a NUL in path,
query, form or JSON string → 400 ``INVALID_REQUEST``; ``Content-Length`` over
``STRATA_MAX_BODY_BYTES`` → 413 before reading; a target over :data:`MAX_URL_BYTES` → 414, kept
below gunicorn's request-line limit so Strata answers, not gunicorn; an API query parameter
given twice → 400 (each takes one value, and which one counted was up to the framework). The
API, ``/metrics`` and the webhook get JSON errors; pages the same text as ``text/plain``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

__all__ = [
    "MAX_URL_BYTES",
    "WEB_LIMIT_REQUEST_LINE",
    "InputEdgesMiddleware",
    "nul_location",
    "repeated_parameter",
]

JSON_PREFIXES = ("/api/", "/metrics", "/agent-events/")
API_PREFIX = "/api/"
#: The longest request target (path and query, as sent) Strata takes, in bytes.
MAX_URL_BYTES = 8000
#: gunicorn's ``--limit-request-line`` under ``make run`` (``config.run``): gunicorn's maximum,
#: above :data:`MAX_URL_BYTES` plus the method and protocol, so Strata answers first. (Its
#: default, 4094, answered a 4 KB query with an HTML 414 the API document did not list.)
WEB_LIMIT_REQUEST_LINE = 8190


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}.{k}" if path else str(k), str(k)
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def _shown(name: str) -> str:
    return name.replace("\x00", "\\0")


def nul_location(request: HttpRequest) -> str | None:
    """Where the request carries a NUL byte (``path``, ``query parameter 'x'``, ``field
    'reason'``), else None. Reads the body only when it holds a NUL at all."""
    if "\x00" in request.path:
        return "the path"
    for key, values in request.GET.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return f"query parameter {_shown(key)!r}"
    if request.method not in ("POST", "PUT", "PATCH"):
        return None
    body = request.body
    if b"\x00" not in body and b"\\u0000" not in body:
        return None
    if request.content_type == "application/json":
        try:
            document = json.loads(body)
        except ValueError:
            return "the body"
        for where, text in _walk(document, ""):
            if "\x00" in text:
                return f"field {where!r}"
        return None
    if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        for key, values in request.POST.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                return f"field {_shown(key)!r}"
        return None
    return "the body" if b"\x00" in body else None


class InputEdgesMiddleware:
    """414 for an over-long URL, 413 for a body over the limit, 400 for a NUL byte or a
    repeated API query parameter (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        target = len(request.get_full_path().encode())
        if target > MAX_URL_BYTES:
            return _error(
                request,
                "URI_TOO_LONG",
                f"The request target is {target} bytes; the limit is {MAX_URL_BYTES}.",
                414,
            )
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.STRATA_MAX_BODY_BYTES
        if length > limit:
            return _error(
                request,
                "PAYLOAD_TOO_LARGE",
                f"The request body is {length} bytes; the limit is {limit}.",
                413,
            )
        where = nul_location(request)
        if where is not None:
            message = f"{where[0].upper()}{where[1:]} holds a NUL byte; text must be printable."
            return _error(request, "INVALID_REQUEST", message, 400)
        if request.path.startswith(API_PREFIX):
            repeated = repeated_parameter(request)
            if repeated is not None:
                return _error(
                    request,
                    "INVALID_REQUEST",
                    f"Query parameter {repeated!r} is given more than once; each takes one value.",
                    400,
                )
        return self.get_response(request)


def repeated_parameter(request: HttpRequest) -> str | None:
    """The first query parameter the request gives more than once, else None."""
    for key, values in request.GET.lists():
        if len(values) > 1:
            return key
    return None


def _error(request: HttpRequest, code: str, message: str, status: int) -> HttpResponse:
    if request.path.startswith(JSON_PREFIXES):
        return JsonResponse({"error": code, "message": message}, status=status)
    return HttpResponse(f"{message}\n", status=status, content_type="text/plain; charset=utf-8")
