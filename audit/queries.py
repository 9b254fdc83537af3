"""Reading the audit log: filters, key-set pages, serialisation, the export's rows, diffs.

The audit log pages by key (``seq``), so a page costs the same whatever the log's size. A bad
filter value raises :class:`InvalidFilter` (the pages answer 400, the API ``INVALID_REQUEST``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any, TypeVar

import django_filters
from django import forms
from django.db.models import Model, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from audit import targets
from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent

__all__ = [
    "AUDIT_EXPORT_FIELDS",
    "AuditFilter",
    "FilterText",
    "IntegerFilter",
    "InvalidFilter",
    "apply_filterset",
    "audit_event_out",
    "diff",
    "export_rows",
    "filter_audit",
    "int_param",
    "page_by_seq",
    "parse_when",
    "text_param",
]

_M = TypeVar("_M", bound=Model)


class InvalidFilter(ValueError):
    """A filter or page parameter that cannot be used; its text says which and why."""

    @property
    def message(self) -> str:
        return str(self)


MAX_FILTER_LEN = 255


def text_param(params: Any, name: str) -> str:
    value = params.get(name) or ""
    if not isinstance(value, str):
        value = str(value)
    value = value.strip()
    if len(value) > MAX_FILTER_LEN or "\x00" in value:
        raise InvalidFilter(f"{name} is not a valid filter value.")
    return value


def parse_when(raw: str, end_of_day: bool = False) -> dt.datetime | None:
    """A date (its first or, with ``end_of_day``, its last instant) or an ISO 8601 date-time,
    aware (UTC when naive); None when ``raw`` is neither."""
    try:
        # A plain date first: parse_datetime also reads "2026-11-24" (as midnight), which made
        # "until" a day exclude that very day.
        day = parse_date(raw) if len(raw) == 10 else None
        value: dt.datetime | None
        if day is not None:
            value = dt.datetime.combine(day, dt.time.max if end_of_day else dt.time.min)
        else:
            value = parse_datetime(raw)
    except ValueError:
        return None
    if value is not None and timezone.is_naive(value):
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


class IntegerFilter(django_filters.Filter):
    """An exact integer (``NumberFilter`` takes decimals); non-negative, 64-bit."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class FilterText(django_filters.CharFilter):
    """Text filter with the length limit every filter has (NUL is refused by the form field)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_FILTER_LEN)
        super().__init__(*args, **kwargs)


class WhenField(forms.CharField):
    """A date or ISO 8601 date-time (:func:`parse_when`); a date means its whole day."""

    def __init__(self, *args: Any, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        kwargs.setdefault("max_length", MAX_FILTER_LEN)
        super().__init__(*args, **kwargs)

    def clean(self, value: Any) -> dt.datetime | None:
        text = super().clean(value)
        if not text:
            return None
        when = parse_when(text, self.end_of_day)
        if when is None:
            raise forms.ValidationError("must be a date or ISO 8601 date-time.")
        return when


class WhenFilter(django_filters.Filter):
    field_class = WhenField


class AuditFilter(django_filters.FilterSet):
    """Filters of the audit page, its export and ``GET /api/v1/audit`` (stable names).

    ``target`` takes a target as the log shows it (``topic:local/demo.orders``, ``broker:local/2``,
    ``log_dir:local/2:d1``, ``workflow:12``) or as the workflow list does (``topic:demo.orders``:
    with ``cluster``, on that cluster, else on any); ``cluster`` with ``topic``, ``broker`` or
    ``log_dir`` (``<broker id>:<dir>``) says the same as a pair; ``cluster`` alone, every event
    about that cluster. A topic, broker or dir matches its own events whatever their form
    (:mod:`audit.targets`) and the events of the workflows that change it."""

    actor = FilterText(field_name="actor_name")
    action = FilterText(field_name="action", lookup_expr="startswith")
    kind = FilterText(field_name="workflow__kind")
    # Read together in filter_queryset (a target and its cluster make one condition).
    target = FilterText(method="together")
    cluster = FilterText(method="together")
    topic = FilterText(method="together")
    broker = IntegerFilter(method="together")
    log_dir = FilterText(method="together")
    workflow = IntegerFilter(field_name="workflow_id")
    outcome = django_filters.ChoiceFilter(choices=AuditOutcome.CHOICES)
    context = django_filters.ChoiceFilter(choices=AuditContext.CHOICES)
    since = WhenFilter(field_name="created_at", lookup_expr="gte")
    until = WhenFilter(field_name="created_at", lookup_expr="lte", end_of_day=True)

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def together(self, qs: QuerySet[AuditEvent], name: str, value: Any) -> QuerySet[AuditEvent]:
        return qs  # see filter_queryset

    def filter_queryset(self, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        data = self.form.cleaned_data
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise InvalidFilter("since is after until: no event can match; swap them.")
        qs = super().filter_queryset(queryset)
        cluster = data.get("cluster") or ""
        wanted = []
        if data.get("target"):
            wanted.append(targets.parse_text(data["target"], cluster))
        if data.get("topic"):
            wanted.append(targets.Target(targets.TOPIC, cluster, data["topic"]))
        if data.get("broker") is not None:
            wanted.append(targets.Target(targets.BROKER, cluster, str(data["broker"])))
        if data.get("log_dir"):
            broker_id, sep, _ = data["log_dir"].partition(":")
            if not (sep and broker_id.isdigit()):
                raise InvalidFilter("log_dir: <broker id>:<dir>, e.g. 2:d1.")
            wanted.append(targets.Target(targets.LOG_DIR, cluster, data["log_dir"]))
        for target in wanted:
            qs = qs.filter(targets.matching(target))
        if cluster and not any(t.cluster == cluster for t in wanted):
            qs = qs.filter(targets.cluster_events(cluster))
        return qs


def apply_filterset(
    filterset_class: type[django_filters.FilterSet], params: Any, queryset: QuerySet[_M]
) -> tuple[QuerySet[_M], dict[str, str]]:
    """``queryset`` filtered by ``params`` (a QueryDict or dict) through ``filterset_class``;
    returns it with the filters that were applied (their text, for the page's form and links).
    A value the filter's form refuses raises :class:`InvalidFilter` naming the filter."""
    # A QueryDict's ``get`` gives a key's last value, as the hand-written filters read it.
    data = {k: str(params.get(k)).strip() for k in params if params.get(k) is not None}
    fs = filterset_class(data, queryset=queryset)
    if not fs.is_valid():
        name, errors = next(iter(fs.errors.items()))
        raise InvalidFilter(f"{name}: {' '.join(errors)}")
    applied = {
        name: data[name]
        for name in fs.filters
        if fs.form.cleaned_data.get(name) not in (None, "") and data.get(name)
    }
    return fs.qs, applied


def filter_audit(params: Any) -> tuple[QuerySet[AuditEvent], dict[str, str]]:
    """Apply the audit filters in ``params`` (a QueryDict or dict); returns the queryset (newest
    first) and the filters that were applied, for the page's form and links."""
    return apply_filterset(AuditFilter, params, AuditEvent.objects.order_by("-seq"))


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
