"""Read helpers shared by the pages and the API: filters, serialisation, diffs.

Both audit and workflow lists paginate on the server; the audit log pages by key (``seq``) so
a page costs the same whatever the log's size.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from workflows.choices import AuditContext, AuditOutcome, WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.models import Approval, AuditEvent, Workflow

__all__ = [
    "AUDIT_FILTERS",
    "audit_event_out",
    "diff",
    "filter_audit",
    "filter_workflows",
    "workflow_out",
]

AUDIT_FILTERS = (
    "actor",
    "action",
    "kind",
    "target",
    "workflow",
    "outcome",
    "context",
    "since",
    "until",
)
MAX_FILTER_LEN = 255


def _text(params: Any, name: str) -> str:
    value = params.get(name) or ""
    if not isinstance(value, str):
        value = str(value)
    value = value.strip()
    if len(value) > MAX_FILTER_LEN or "\x00" in value:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} is not a valid filter value.")
    return value


def _when(params: Any, name: str, end_of_day: bool = False) -> dt.datetime | None:
    raw = _text(params, name)
    if not raw:
        return None
    try:
        value = parse_datetime(raw)
        if value is None:
            day = parse_date(raw)
            if day is not None:
                value = dt.datetime.combine(day, dt.time.max if end_of_day else dt.time.min)
    except ValueError:
        value = None
    if value is None:
        raise WorkflowError(
            ErrorCode.INVALID_REQUEST, f"{name} must be a date or ISO 8601 date-time."
        )
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    return value


def _int(params: Any, name: str) -> int | None:
    raw = _text(params, name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} must be an integer.") from None
    if not 0 <= value < 2**63:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} is out of range.")
    return value


def filter_audit(params: Any) -> tuple[QuerySet[AuditEvent], dict[str, str]]:
    """Apply the audit filters in ``params`` (a QueryDict or dict); returns the queryset (newest
    first) and the filters that were applied, for the page's form and links."""
    qs = AuditEvent.objects.order_by("-seq")
    applied: dict[str, str] = {}
    if actor := _text(params, "actor"):
        qs = qs.filter(actor_name=actor)
        applied["actor"] = actor
    if action := _text(params, "action"):
        qs = qs.filter(action__startswith=action)
        applied["action"] = action
    if kind := _text(params, "kind"):
        qs = qs.filter(workflow__kind=kind)
        applied["kind"] = kind
    if target := _text(params, "target"):
        ttype, sep, tid = target.partition(":")
        qs = qs.filter(target_type=ttype, target_id=tid) if sep else qs.filter(target_id=target)
        applied["target"] = target
    if (workflow := _int(params, "workflow")) is not None:
        qs = qs.filter(workflow_id=workflow)
        applied["workflow"] = str(workflow)
    if outcome := _text(params, "outcome"):
        if outcome not in AuditOutcome.ALL:
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST, f"outcome must be one of {', '.join(AuditOutcome.ALL)}."
            )
        qs = qs.filter(outcome=outcome)
        applied["outcome"] = outcome
    if context := _text(params, "context"):
        if context not in AuditContext.ALL:
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST, f"context must be one of {', '.join(AuditContext.ALL)}."
            )
        qs = qs.filter(context=context)
        applied["context"] = context
    if (since := _when(params, "since")) is not None:
        qs = qs.filter(created_at__gte=since)
        applied["since"] = _text(params, "since")
    if (until := _when(params, "until", end_of_day=True)) is not None:
        qs = qs.filter(created_at__lte=until)
        applied["until"] = _text(params, "until")
    return qs, applied


def page_by_seq(
    qs: QuerySet[AuditEvent], params: Any, limit: int
) -> tuple[list[AuditEvent], int | None]:
    """Keyset page: events with ``seq < before`` (newest first); returns (events, next_before)."""
    before = _int(params, "before")
    if before is not None:
        qs = qs.filter(seq__lt=before)
    events = list(qs.select_related(None)[: limit + 1])
    more = len(events) > limit
    events = events[:limit]
    return events, (events[-1].seq if more and events else None)


def audit_event_out(e: AuditEvent | dict[str, Any]) -> dict[str, Any]:
    get = e.get if isinstance(e, dict) else lambda k: getattr(e, k)
    created = get("created_at")
    return {
        "seq": get("seq"),
        "created_at": created.isoformat() if created else None,
        "actor": get("actor_name"),
        "actor_id": get("actor_id"),
        "context": get("context"),
        "action": get("action"),
        "target_type": get("target_type"),
        "target_id": get("target_id"),
        "workflow_id": get("workflow_id"),
        "outcome": get("outcome"),
        "before": get("before"),
        "after": get("after"),
        "extra": get("extra"),
        "prev_hash": get("prev_hash"),
        "hash": get("hash"),
    }


AUDIT_EXPORT_FIELDS = (
    "seq",
    "created_at",
    "actor_id",
    "actor_name",
    "context",
    "action",
    "target_type",
    "target_id",
    "workflow_id",
    "outcome",
    "before",
    "after",
    "extra",
    "prev_hash",
    "hash",
)


def export_rows(qs: QuerySet[AuditEvent], chunk_size: int = 2000) -> Iterator[dict[str, Any]]:
    """Rows for the export over a server-side cursor, oldest first: never the whole log in
    memory (``.iterator(chunk_size)`` makes PostgreSQL stream ``chunk_size`` rows at a time)."""
    return qs.order_by("seq").values(*AUDIT_EXPORT_FIELDS).iterator(chunk_size=chunk_size)


def diff(before: Any, after: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Flat before/after diff of two JSON values: one row per changed leaf path."""
    rows: list[dict[str, Any]] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in before:
                rows.append({"path": path, "change": "added", "before": None, "after": after[key]})
            elif key not in after:
                rows.append(
                    {"path": path, "change": "removed", "before": before[key], "after": None}
                )
            else:
                rows += diff(before[key], after[key], path)
        return rows
    if before != after:
        change = "added" if before is None else "removed" if after is None else "changed"
        rows.append(
            {"path": prefix or "(value)", "change": change, "before": before, "after": after}
        )
    return rows


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# --- workflows -----------------------------------------------------------------------------


def filter_workflows(params: Any) -> tuple[QuerySet[Workflow], dict[str, str]]:
    qs = Workflow.objects.select_related("requester")
    applied: dict[str, str] = {}
    state = _text(params, "state")
    if state == "open":
        qs = qs.filter(state__in=WorkflowState.OPEN).order_by("-created_at", "-id")
    elif state == "past":
        qs = qs.filter(state__in=WorkflowState.TERMINAL).order_by("-finished_at", "-id")
    elif state:
        if state not in WorkflowState.ALL:
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST,
                f"state must be open, past or one of {', '.join(WorkflowState.ALL)}.",
            )
        qs = qs.filter(state=state)
    if state:
        applied["state"] = state
    for name in ("kind", "cluster", "target"):
        if value := _text(params, name):
            qs = qs.filter(**{name: value})
            applied[name] = value
    if requester := _text(params, "requester"):
        qs = qs.filter(requester__username=requester)
        applied["requester"] = requester
    return qs, applied


def with_decisions(qs: QuerySet[Workflow]) -> QuerySet[Workflow]:
    return qs.prefetch_related(
        Prefetch("approvals", queryset=Approval.objects.select_related("approver"))
    )


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def workflow_out(wf: Workflow, *, steps: bool = False) -> dict[str, Any]:
    now = timezone.now()
    out: dict[str, Any] = {
        "id": wf.pk,
        "kind": wf.kind,
        "cluster": wf.cluster,
        "target": wf.target,
        "state": wf.state,
        "params": wf.parameters,
        "plan": wf.plan,
        "plan_hash": wf.plan_hash,
        "plan_information": wf.plan_information,
        "plan_information_at": _iso(wf.plan_information_at),
        "plan_diff": wf.plan_diff,
        "approvals_required": wf.approvals_required,
        "approvals_valid": sum(1 for a in wf.approvals.all() if a.counts_for(wf.plan_hash, now)),
        "approvals": [
            {
                "approver": a.approver.get_username(),
                "decision": a.decision,
                "plan_hash": a.plan_hash,
                "comment": a.comment,
                "created_at": _iso(a.created_at),
                "voided": a.voided_at is not None or a.is_expired(now),
                "void_reason": a.void_reason or ("expired" if a.is_expired(now) else ""),
            }
            for a in wf.approvals.all()
        ],
        "requester": wf.requester.get_username(),
        "reason": wf.reason,
        "break_glass": wf.break_glass,
        "break_glass_reason": wf.break_glass_reason,
        "created_at": _iso(wf.created_at),
        "approved_at": _iso(wf.approved_at),
        "started_at": _iso(wf.started_at),
        "finished_at": _iso(wf.finished_at),
        "current_step": wf.current_step,
        "waiting_reason": wf.waiting_reason,
        "error": {"code": wf.error_code, "message": wf.error_message} if wf.error_code else None,
    }
    if steps:
        out["steps"] = [
            {
                "position": s.position,
                "name": s.name,
                "label": s.label,
                "broker": s.broker,
                "state": s.state,
                "gate": s.gate,
                "attempts": s.attempts,
                "last_error": s.last_error,
                "progress": {
                    "done": s.progress_done,
                    "total": s.progress_total,
                    "unit": s.progress_unit,
                },
                "confirmed_by": s.confirmed_by.get_username() if s.confirmed_by else None,
                "started_at": _iso(s.started_at),
                "finished_at": _iso(s.finished_at),
                "idempotency_key": s.idempotency_key,
            }
            for s in wf.steps.select_related("confirmed_by").order_by("position")
        ]
    return out


def user_exists(username: str) -> bool:
    return get_user_model().objects.filter(username=username).exists()
