"""Shared FastAPI plumbing: JSON errors with KIP codes and the HMAC signing middleware.

The middleware refuses before it reads a body: a declared ``Content-Length`` over the limit
(``STRATA_AGENT_MAX_BODY_BYTES``, default 8 MiB) answers 413 ``PAYLOAD_TOO_LARGE``, missing,
malformed, stale or misdirected signature headers answer 401; only then is the body read, in
chunks, and a body that grows past the limit (chunked uploads) is refused with 413 as soon as it
does. Nonces are remembered across restarts when ``install`` is given a ``nonce_path``.

Errors answer ``{"error": CODE, "message": ...}`` with a message written for the caller; an
unexpected exception answers 500 ``INTERNAL_ERROR`` with a generic message and a reference, and
its text and traceback go to the process's log only (they name files, hosts and internals).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.contract.signing import (
    NonceCache,
    SignatureError,
    check_signature_headers,
    verify_signature,
)

__all__ = ["PUBLIC_PATHS", "ApiError", "install"]

log = logging.getLogger("broker_agent.server.web")

#: Largest request body an agent or controller reads (bytes); ``STRATA_AGENT_MAX_BODY_BYTES``.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024

#: The only unsigned requests: ``GET`` (or ``HEAD``) on exactly these paths. Liveness, and the
#: OpenAPI document with its viewer (they describe the API, they answer no data).
PUBLIC_PATHS = frozenset({"/v1/health", "/openapi.json", "/docs"})
_PUBLIC_METHODS = frozenset({"GET", "HEAD"})


def _error(status: int, error: str, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def install(
    app: FastAPI,
    secret: bytes,
    *,
    audience: str | Iterable[str],
    public_paths: Iterable[str] = PUBLIC_PATHS,
    nonce_path: str | None = None,
    max_body_bytes: int | None = None,
) -> None:
    """JSON error handlers and the signing middleware on ``app``.

    ``audience`` is this process's own ``host:port`` as its clients dial it (``audience_of`` of
    its advertised URL; several only if one process truly is several names). A request signed
    for anything else gets 401 ``WRONG_AUDIENCE``. ``public_paths`` are compared exactly (no
    prefix, no suffix) and only for ``GET`` / ``HEAD``. ``nonce_path`` keeps the replay cache
    in a file so it survives a restart; ``max_body_bytes`` defaults to the environment's
    ``STRATA_AGENT_MAX_BODY_BYTES``, else :data:`DEFAULT_MAX_BODY_BYTES`.
    """
    nonces = NonceCache(path=nonce_path)
    limit = max_body_bytes or int(
        os.environ.get("STRATA_AGENT_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)
    )
    too_large = f"request body over {limit} bytes"
    audiences = frozenset([audience] if isinstance(audience, str) else audience)
    if not audiences:
        raise ValueError("a signed app needs its audience")
    public = frozenset(public_paths)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError):
        return _error(exc.status, exc.error, exc.message, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, ErrorCode.INVALID_REQUEST, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException):
        code = ErrorCode.NOT_FOUND if exc.status_code == 404 else ErrorCode.INVALID_REQUEST
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        ref = secrets.token_hex(6)
        log.error(
            "internal error ref=%s on %s %s: %s: %s",
            ref,
            request.method,
            request.url.path,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        return _error(
            500,
            ErrorCode.INTERNAL_ERROR,
            f"internal error (ref {ref}); details are in the server's log",
        )

    @app.middleware("http")
    async def _signed(request: Request, call_next):
        path = request.url.path
        if path in public and request.method in _PUBLIC_METHODS:
            return await call_next(request)
        # Sign over the request target exactly as sent (percent-encoding included).
        raw = request.scope.get("raw_path") or path.encode()
        query = request.scope.get("query_string") or b""
        full_path = raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        try:
            declared = int(request.headers.get("content-length") or 0)
        except ValueError:
            return _error(400, ErrorCode.INVALID_REQUEST, "malformed Content-Length")
        if declared > limit:
            return _error(413, ErrorCode.PAYLOAD_TOO_LARGE, too_large)
        try:
            check_signature_headers(request.headers, audiences=audiences)
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return _error(413, ErrorCode.PAYLOAD_TOO_LARGE, too_large)
                chunks.append(chunk)
            body = b"".join(chunks)
            request._body = body  # what Request.body() caches: the route reads it from here
            verify_signature(
                secret,
                request.method,
                full_path,
                body,
                request.headers,
                audiences=audiences,
                nonce_cache=nonces,
            )
        except SignatureError as exc:
            client = request.client.host if request.client else "?"
            log.warning(
                "refused %s %s from %s: %s (%s)",
                request.method,
                full_path,
                client,
                exc.code,
                exc.detail or exc.message,
            )
            return _error(401, ErrorCode.UNAUTHORIZED, f"{exc.code}: {exc.message}")
        return await call_next(request)
