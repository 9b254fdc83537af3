"""Read helpers of the workflow pages and API: the list's filters, serialisation.

The workflow list paginates on the server. Its filters are a django-filter ``FilterSet`` applied
by the audit app's ``apply_filterset`` (one rule for what a valid filter value is, one error).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet

from audit.queries import FilterText, InvalidFilter, apply_filterset
from workflows.choices import WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.models import Approval, Workflow

__all__ = ["filter_workflows", "with_decisions"]


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
