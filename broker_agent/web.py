"""Shared FastAPI plumbing: JSON errors with KIP codes and the HMAC signing middleware."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from broker_agent.choices import ErrorCode
from broker_agent.signing import NonceCache, SignatureError, verify_signature

__all__ = ["ApiError", "install"]

log = logging.getLogger("broker_agent.web")


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str, **extra):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.extra = extra


def _error(status: int, error: str, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def install(app: FastAPI, secret: bytes) -> None:
    nonces = NonceCache()

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
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    @app.middleware("http")
    async def _signed(request: Request, call_next):
        path = request.url.path
        if path.endswith(("/v1/health", "/openapi.json", "/docs")):
            return await call_next(request)
        body = await request.body()
        # Sign over the request target exactly as sent (percent-encoding included).
        raw = request.scope.get("raw_path") or path.encode()
        query = request.scope.get("query_string") or b""
        full_path = raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        try:
            verify_signature(
                secret, request.method, full_path, body, request.headers, nonce_cache=nonces
            )
        except SignatureError as exc:
            client = request.client.host if request.client else "?"
            log.warning(
                "refused %s %s from %s: %s (%s)",
                request.method,
                full_path,
                client,
                exc.code,
                exc.message,
            )
            return _error(401, ErrorCode.UNAUTHORIZED, f"{exc.code}: {exc.message}")
        return await call_next(request)


def json_body(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
