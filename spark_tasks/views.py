"""The Spark jobs page: runs, their progress and log, their plans, and operators' dry runs.

Reads only PostgreSQL and the runs' own output files (a plan is read with pyarrow in batches, a
page of topics at a time; it is never loaded whole). Bad input never 500s: unknown runs are 404,
bad page numbers fall back to the first page, a missing plan says so.
"""

from __future__ import annotations

from pathlib import Path

import django_filters
import pyarrow.dataset as ds
from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.roles import Role, has_role, require_role
from console.models import Cluster
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.tasks import enqueue_run

RUNS_PER_PAGE = 25
TOPICS_PER_PAGE = 50
HTMX_STOP_POLLING = 286


class DryRunForm(forms.Form):
    job = forms.ChoiceField(
        choices=[(j, label) for j, label in SparkJob.CHOICES if j in SparkJob.OPERATOR_DRY_RUN]
    )
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.order_by("name"), to_field_name="name", empty_label=None
    )


class RunFilter(django_filters.FilterSet):
    """Filters of the runs list: ``job``, one of :class:`SparkJob`'s. A value that names no job
    filters nothing (the page never refuses its input): the filter set drops a field its form
    refuses."""

    job = django_filters.ChoiceFilter(choices=SparkJob.CHOICES)

    class Meta:
        model = SparkJobRun
        fields: list[str] = []


def _page_number(request: HttpRequest) -> str:
    value = request.GET.get("page", "1")
    return value if value.isdigit() else "1"


@require_http_methods(["GET"])
def run_list(request: HttpRequest) -> HttpResponse:
    runs = RunFilter(request.GET, queryset=SparkJobRun.objects.select_related("requested_by")).qs
    job = request.GET.get("job", "")
    page = Paginator(runs, RUNS_PER_PAGE).get_page(_page_number(request))
    context = {
        "page": page,
        "runs": page.object_list,
        "job": job,
        "jobs": SparkJob.CHOICES,
        "form": DryRunForm(),
        "can_start": has_role(request.user, Role.OPERATOR),
        "any_active": any(not r.is_terminal for r in page.object_list),
        "now": timezone.now(),
    }
    if getattr(request, "htmx", False) and request.GET.get("partial") == "runs":
        response = render(request, "spark_tasks/partials/run_rows.html", context)
        if not context["any_active"]:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "spark_tasks/run_list.html", context)


@require_POST
@require_role(Role.OPERATOR)
def start_dry_run(request: HttpRequest) -> HttpResponse:
    form = DryRunForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a job and a registered cluster.")
        return redirect("spark_tasks:run-list")
    run = enqueue_run(
        form.cleaned_data["job"],
        {},
        dry_run=True,
        cluster=form.cleaned_data["cluster"].name,
        requested_by=request.user,
    )
    messages.success(request, f"Dry run #{run.pk} of {run.get_job_display()} queued.")
    return redirect("spark_tasks:run-detail", pk=run.pk)


#: The workflow kind that executes a reviewed dry run of each job (``workflows.kinds.spark``;
#: named here because this app sits below workflows; a workflows test keeps the two in step).
EXECUTED_BY = {SparkJob.PURGE: "remote_purge", SparkJob.ORPHANS: "orphan_sweep"}


@require_http_methods(["GET"])
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(SparkJobRun.objects.select_related("requested_by"), pk=pk)
    executable = run.dry_run and run.state == SparkRunState.SUCCEEDED and bool(run.plan_rows)
    context = {
        "run": run,
        "summary": run.output_summary or {},
        "execute_kind": EXECUTED_BY.get(run.job) if executable else None,
        "now": timezone.now(),
    }
    if getattr(request, "htmx", False):
        response = render(request, "spark_tasks/partials/run_status.html", context)
        if run.is_terminal:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "spark_tasks/run_detail.html", context)


def plan_by_topic(plan_dir: Path) -> list[dict]:
    """Segments and bytes per (cluster, topic) of a plan, streamed batch by batch."""
    totals: dict[tuple[str, str], list[int]] = {}
    dataset = ds.dataset(str(plan_dir), format="parquet")
    for batch in dataset.to_batches(columns=["cluster", "topic", "size_bytes"], batch_size=65536):
        cols = batch.to_pydict()
        for cluster, topic, size in zip(
            cols["cluster"], cols["topic"], cols["size_bytes"], strict=True
        ):
            entry = totals.setdefault((cluster or "", topic or "(no topic)"), [0, 0])
            entry[0] += 1
            entry[1] += size or 0
    return [
        {"cluster": c, "topic": t, "segments": v[0], "bytes": v[1]}
        for (c, t), v in sorted(totals.items())
    ]


@require_http_methods(["GET"])
def run_plan(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(SparkJobRun, pk=pk)
    plan_dir = Path(run.output_dir or "/nonexistent") / "plan"
    rows: list[dict] = []
    error = ""
    if not run.has_plan:
        error = "This job writes no plan."
    elif not plan_dir.exists():
        error = (
            "The plan is not there: the run has not written it yet, or its files were removed "
            f"{settings.SPARK_RUN_FILES_DAYS} days after it finished (SPARK_RUN_FILES_DAYS). "
            "The summary below is kept."
        )
    else:
        try:
            rows = plan_by_topic(plan_dir)
        except (OSError, ValueError) as exc:
            error = f"The plan could not be read: {exc}"
    page = Paginator(rows, TOPICS_PER_PAGE).get_page(_page_number(request))
    return render(
        request,
        "spark_tasks/run_plan.html",
        {"run": run, "page": page, "error": error, "summary": run.output_summary or {}},
    )
