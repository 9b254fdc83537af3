"""Reading the audit log: filters, key-set pages, serialisation, the export's rows, diffs.

The audit log pages by key (``seq``), so a page costs the same whatever the log's size. A bad
filter value raises :class:`InvalidFilter` (the pages answer 400, the API ``INVALID_REQUEST``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent

__all__ = [
    "AUDIT_EXPORT_FIELDS",
    "AUDIT_FILTERS",
    "InvalidFilter",
    "audit_event_out",
    "diff",
    "export_rows",
    "filter_audit",
    "int_param",
    "page_by_seq",
    "text_param",
    "when_param",
]


class InvalidFilter(ValueError):
    """A filter or page parameter that cannot be used; its text says which and why."""

    @property
    def message(self) -> str:
        return str(self)


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


def text_param(params: Any, name: str) -> str:
    value = params.get(name) or ""
    if not isinstance(value, str):
        value = str(value)
    value = value.strip()
    if len(value) > MAX_FILTER_LEN or "\x00" in value:
        raise InvalidFilter(f"{name} is not a valid filter value.")
    return value


def when_param(params: Any, name: str, end_of_day: bool = False) -> dt.datetime | None:
    raw = text_param(params, name)
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
        raise InvalidFilter(f"{name} must be a date or ISO 8601 date-time.")
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    return value


def int_param(params: Any, name: str) -> int | None:
    raw = text_param(params, name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidFilter(f"{name} must be an integer.") from None
    if not 0 <= value < 2**63:
        raise InvalidFilter(f"{name} is out of range.")
    return value


def filter_audit(params: Any) -> tuple[QuerySet[AuditEvent], dict[str, str]]:
    """Apply the audit filters in ``params`` (a QueryDict or dict); returns the queryset (newest
    first) and the filters that were applied, for the page's form and links."""
    qs = AuditEvent.objects.order_by("-seq")
    applied: dict[str, str] = {}
    if actor := text_param(params, "actor"):
        qs = qs.filter(actor_name=actor)
        applied["actor"] = actor
    if action := text_param(params, "action"):
        qs = qs.filter(action__startswith=action)
        applied["action"] = action
    if kind := text_param(params, "kind"):
        qs = qs.filter(workflow__kind=kind)
        applied["kind"] = kind
    if target := text_param(params, "target"):
        ttype, sep, tid = target.partition(":")
        qs = qs.filter(target_type=ttype, target_id=tid) if sep else qs.filter(target_id=target)
        applied["target"] = target
    if (workflow := int_param(params, "workflow")) is not None:
        qs = qs.filter(workflow_id=workflow)
        applied["workflow"] = str(workflow)
    if outcome := text_param(params, "outcome"):
        if outcome not in AuditOutcome.ALL:
            raise InvalidFilter(f"outcome must be one of {', '.join(AuditOutcome.ALL)}.")
        qs = qs.filter(outcome=outcome)
        applied["outcome"] = outcome
    if context := text_param(params, "context"):
        if context not in AuditContext.ALL:
            raise InvalidFilter(f"context must be one of {', '.join(AuditContext.ALL)}.")
        qs = qs.filter(context=context)
        applied["context"] = context
    if (since := when_param(params, "since")) is not None:
        qs = qs.filter(created_at__gte=since)
        applied["since"] = text_param(params, "since")
    if (until := when_param(params, "until", end_of_day=True)) is not None:
        qs = qs.filter(created_at__lte=until)
        applied["until"] = text_param(params, "until")
    return qs, applied


def page_by_seq(
    qs: QuerySet[AuditEvent], params: Any, limit: int
) -> tuple[list[AuditEvent], int | None]:
    """Keyset page: events with ``seq < before`` (newest first); returns (events, next_before)."""
    before = int_param(params, "before")
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
