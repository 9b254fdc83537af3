"""Audit pages: the log (filters, key-set pages), one event with its diff, the streaming export.

Every page is behind the access gate (any Strata role may read the log). The log pages by key
(``seq``) so a page costs the same whatever the log's size; a bad filter answers 400 with the
reason. Events that belong to a workflow link to it; the workflow model is reached through
``AuditEvent.workflow``, so this app imports nothing of the workflows app.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from audit import targets
from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent, ChainVerification
from audit.queries import (
    AUDIT_EXPORT_FIELDS,
    InvalidFilter,
    diff,
    export_rows,
    filter_audit,
    page_by_seq,
)
from audit.tasks import request_verification

AUDIT_PAGE_SIZE = 50
EXPORT_CHUNK = 2000
MAX_SEQ = 2**63 - 1


#: htmx stops polling on this status (a finished verification).
HTMX_STOP_POLLING = 286


def _seq(value: int) -> int:
    """A URL integer that fits a bigint, else 404 (never a database error)."""
    if not 0 < value <= MAX_SEQ:
        raise Http404("No such event.")
    return value


def _workflow_model() -> type[Model]:
    """The model behind ``AuditEvent.workflow`` (for the workflow filter's header and kinds)."""
    return AuditEvent._meta.get_field("workflow").related_model


def _link_targets(events: list[AuditEvent]) -> None:
    """Set ``target_url`` on each event (its target's page). An old-form topic, broker or dir
    (no cluster in its id) takes its workflow's cluster: one query for the page."""
    ids = {
        e.workflow_id for e in events if e.workflow_id and e.target_type in targets.CLUSTER_SCOPED
    }
    clusters = (
        dict(_workflow_model()._default_manager.filter(pk__in=ids).values_list("pk", "cluster"))
        if ids
        else {}
    )
    for e in events:
        e.target_url = targets.target_url(
            e.target_type, e.target_id, clusters.get(e.workflow_id, "")
        )


@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    error = None
    try:
        qs, applied = filter_audit(request.GET)
        events, next_before = page_by_seq(qs, request.GET, AUDIT_PAGE_SIZE)
    except InvalidFilter as exc:
        events, applied, next_before, error = [], {}, None, exc.message
    _link_targets(events)
    subject = None
    if applied.get("target"):
        about = targets.parse_text(applied["target"], applied.get("cluster", ""))
        url = targets.target_url(about.type, about.name, about.cluster)
        subject = {"label": about.label, "url": url} if url else None
    query = urlencode(applied)
    workflows = _workflow_model()
    workflow = None
    if applied.get("workflow"):
        workflow = workflows._default_manager.filter(pk=applied["workflow"]).first()
    return render(
        request,
        "audit/audit_list.html",
        {
            "events": events,
            "applied": applied,
            "query": query,
            "next_url": f"?{urlencode({**applied, 'before': next_before})}"
            if next_before
            else None,
            "paged": bool(request.GET.get("before")),
            "error": error,
            "outcomes": AuditOutcome.ALL,
            "contexts": AuditContext.ALL,
            "kinds": workflows._default_manager.order_by("kind")
            .values_list("kind", flat=True)
            .distinct(),
            "workflow": workflow,
            "subject": subject,
            # filters the form has no field for, kept when it is submitted again
            "hidden": [(k, applied[k]) for k in ("topic", "broker", "log_dir") if k in applied],
            "now": timezone.now(),
            "verification": ChainVerification.objects.select_related("requested_by").first(),
        },
        status=400 if error else 200,
    )


@require_GET
def audit_detail(request: HttpRequest, seq: int) -> HttpResponse:
    event = get_object_or_404(AuditEvent.objects.select_related("actor", "workflow"), seq=_seq(seq))
    cluster = getattr(event.workflow, "cluster", "")
    event.target_url = targets.target_url(event.target_type, event.target_id, cluster)
    return render(
        request,
        "audit/audit_detail.html",
        {
            "e": event,
            "changes": diff(event.before, event.after),
            "previous": AuditEvent.objects.filter(seq=seq - 1)
            .values_list("seq", flat=True)
            .first(),
            "following": AuditEvent.objects.filter(seq=seq + 1)
            .values_list("seq", flat=True)
            .first(),
        },
    )


class _Echo:
    """A file-like object whose write returns the line: csv.writer into a generator."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(AUDIT_EXPORT_FIELDS)
    batch: list[str] = []
    for row in rows:
        batch.append(writer.writerow([_csv_cell(row[f]) for f in AUDIT_EXPORT_FIELDS]))
        if len(batch) >= 500:
            yield "".join(batch)
            batch = []
    if batch:
        yield "".join(batch)


#: A spreadsheet reads a cell starting with one of these as a formula (CSV injection, OWASP).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        # A leading apostrophe makes a spreadsheet show the text instead of evaluating it; the
        # JSON lines export keeps every value exactly as logged.
        return "'" + value
    return value


def _jsonl_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    batch: list[str] = []
    for row in rows:
        row = {**row, "created_at": row["created_at"].isoformat()}
        batch.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        if len(batch) >= 500:
            yield "".join(batch)
            batch = []
    if batch:
        yield "".join(batch)


@require_GET
def audit_export(request: HttpRequest, fmt: str) -> HttpResponse | StreamingHttpResponse:
    """Streaming export of the filtered audit log (oldest first) as CSV or JSON lines, over a
    server-side cursor: memory stays flat whatever the number of events."""
    try:
        qs, _ = filter_audit(request.GET)
    except InvalidFilter as exc:
        return HttpResponse(
            f"INVALID_REQUEST: {exc.message}\n", status=400, content_type="text/plain"
        )
    rows = export_rows(qs, chunk_size=EXPORT_CHUNK)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
        name = f"strata-audit-{stamp}.csv"
    else:
        response = StreamingHttpResponse(_jsonl_lines(rows), content_type="application/x-ndjson")
        name = f"strata-audit-{stamp}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def verify_request(request: HttpRequest) -> HttpResponse:
    """ "Verify the chain now": creates the verification row (or finds the open one); a worker
    walks the chain. Back to the audit page, whose card follows it."""
    user = request.user  # signed in (login is enforced globally)
    row, created = request_verification(user if user.is_authenticated else None)
    if created:
        messages.success(request, f"Chain verification #{row.pk} queued: a worker walks the chain.")
    else:
        messages.info(request, f"Chain verification #{row.pk} is already {row.state}.")
    return redirect("audit:list")


@require_GET
def verify_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The verification card, polled (htmx) until the verification finishes (then 286)."""
    row = get_object_or_404(ChainVerification.objects.select_related("requested_by"), pk=pk)
    response = render(request, "audit/partials/verification.html", {"verification": row})
    if row.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response
