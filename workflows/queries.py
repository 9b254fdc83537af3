"""Read helpers of the workflow pages and API: the list's filters, serialisation.

The workflow list paginates on the server. Its filters are a django-filter ``FilterSet`` applied
by the audit app's ``apply_filterset`` (one rule for what a valid filter value is, one error).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from audit.queries import FilterText, InvalidFilter, apply_filterset
from workflows.choices import WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.models import Approval, Workflow

__all__ = ["filter_workflows", "with_decisions", "workflow_out"]


# --- workflows -----------------------------------------------------------------------------


def filter_workflows(params: Any) -> tuple[QuerySet[Workflow], dict[str, str]]:
    """Apply the list's filters in ``params``; a bad value raises ``WorkflowError``
    (``INVALID_REQUEST``)."""
    try:
        return _filter_workflows(params)
    except InvalidFilter as exc:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, exc.message) from None


class WorkflowFilter(django_filters.FilterSet):
    """Filters of the workflows page and ``GET /api/v1/workflows`` (stable names). ``state`` is
    a state, or ``open`` / ``past`` (each with its own order: newest request / newest end)."""

    state = django_filters.ChoiceFilter(
        choices=[("open", "open"), ("past", "past"), *((s, s) for s in WorkflowState.ALL)],
        method="filter_state",
    )
    kind = FilterText()
    cluster = FilterText()
    target = FilterText()
    requester = FilterText(field_name="requester__username")

    class Meta:
        model = Workflow
        fields: list[str] = []

    def filter_state(self, qs: QuerySet, name: str, value: str) -> QuerySet:
        if value == "open":
            return qs.filter(state__in=WorkflowState.OPEN).order_by("-created_at", "-id")
        if value == "past":
            return qs.filter(state__in=WorkflowState.TERMINAL).order_by("-finished_at", "-id")
        return qs.filter(state=value)


def _filter_workflows(params: Any) -> tuple[QuerySet[Workflow], dict[str, str]]:
    return apply_filterset(WorkflowFilter, params, Workflow.objects.select_related("requester"))


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
                "failures": s.failures,
                "max_attempts": s.max_attempts,
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
