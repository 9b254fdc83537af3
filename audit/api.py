"""The audit log's part of the JSON API (``/api/v1/``).

Stable names (other tools rely on them): ``GET /audit`` (filters as on the page, ``before`` /
``limit``; answers ``items`` and ``next_before``) and ``GET /audit/verify``; added later, the
filters ``cluster``, ``topic``, ``broker`` and ``log_dir`` (:class:`audit.queries.AuditFilter`).
A bad filter answers 400 ``{"error": "INVALID_REQUEST", "message": ...}``; ``workflow`` and
``before`` are integers in the OpenAPI document as in the filter (#39: typed as strings there).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from audit.queries import InvalidFilter, audit_event_out, filter_audit, page_by_seq
from audit.trail import verify_chain

router = Router(tags=["audit"])

MAX_LIMIT = 500


class AuditParams(Schema):
    actor: str | None = None
    action: str | None = None
    kind: str | None = None
    target: str | None = None
    workflow: int | None = Field(None, ge=0, le=2**63 - 1, description="A workflow's id.")
    cluster: str | None = None
    topic: str | None = None
    broker: str | None = None
    log_dir: str | None = None
    outcome: str | None = None
    context: str | None = None
    since: str | None = None
    until: str | None = None
    before: int | None = Field(
        None, ge=0, le=2**63 - 1, description="Events with seq below this (a next_before)."
    )
    limit: int = Field(100, description=f"Events a page (1..{MAX_LIMIT}; clamped).")


@router.get("/audit", summary="Audit events, newest first; page with before=<next_before>")
def list_audit(request: HttpRequest, params: Query[AuditParams]) -> dict[str, Any]:
    try:
        qs, _ = filter_audit(params.dict())
        events, next_before = page_by_seq(qs, params.dict(), max(1, min(MAX_LIMIT, params.limit)))
    except InvalidFilter as exc:
        raise HttpError(400, exc.message) from None  # INVALID_REQUEST (config.api)
    return {"items": [audit_event_out(e) for e in events], "next_before": next_before}


@router.get("/audit/verify", summary="Verify the audit hash chain")
def verify_audit(request: HttpRequest) -> dict[str, Any]:
    return verify_chain().as_dict()
