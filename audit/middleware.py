"""Audit scope per request: context ``api`` under /api/, else ``web``; the actor is whoever the
request authenticates as (resolved lazily: the API authenticates bearer tokens later)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from audit.choices import AuditContext
from audit.trail import audit_scope


class AuditScopeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        context = AuditContext.API if request.path.startswith("/api/") else AuditContext.WEB
        with audit_scope(context, actor=lambda: getattr(request, "user", None)):
            return self.get_response(request)
