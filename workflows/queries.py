"""Read helpers of the workflow pages and API: the list's filters, serialisation.

The workflow list paginates on the server. Its filters are a django-filter ``FilterSet`` applied
by the audit app's ``apply_filterset`` (one rule for what a valid filter value is, one error).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from audit.queries import FilterText, InvalidFilter, apply_filterset
from workflows.choices import StepState, WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.models import Approval, Workflow, WorkflowStep

__all__ = ["filter_workflows", "with_current_step", "with_decisions"]


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

    def filter_state(self, qs: QuerySet[Workflow], name: str, value: str) -> QuerySet[Workflow]:
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


def with_current_step(qs: QuerySet[Workflow]) -> QuerySet[Workflow]:
    """Annotate each workflow with its current step's failures and their limit
    (``step_failures``, ``step_max_attempts``; None before its steps exist): the first step not
    yet succeeded, the one the engine runs. Two subqueries in the list's one query, none per
    row."""
    current = (
        WorkflowStep.objects.filter(workflow=OuterRef("pk"))
        .exclude(state=StepState.SUCCEEDED)
        .order_by("position")
    )
    return qs.annotate(
        step_failures=Subquery(current.values("failures")[:1]),
        step_max_attempts=Subquery(current.values("max_attempts")[:1]),
    )
