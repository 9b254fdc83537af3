"""Workflow and audit pages (write side).

Rules: every page is behind login (project middleware); actions go through the ``do_*``
functions, which check roles; refusals come back as messages (never a 500 on bad input). Lists
paginate on the server: workflows by page number, the audit log by key (``seq``). The workflow
page polls its live partial only while the workflow is active and gets 286 when it ends; the
workflows list polls its table partial (same URL, htmx target ``wf-list``) while a workflow on
it is open and gets 286 once none is. Partials sit behind the same gate as their pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.roles import Role, has_role
from audit.choices import AuditContext
from audit.models import AuditEvent
from console.choices import DisablePolicy
from console.models import Broker, Cluster, LogDir, Topic
from workflows import actions
from workflows.actions.workflows import MAX_REASON
from workflows.choices import ApprovalDecision, StepState, WorkflowState
from workflows.errors import WorkflowError
from workflows.kinds import CLUSTER_FIELD, MAX_TEXT, Refusal, all_kinds, get_kind
from workflows.models import Workflow
from workflows.queries import (
    filter_workflows,
    with_current_step,
    with_decisions,
)

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        """A request through django-htmx's middleware (its documented typing recipe)."""

        htmx: HtmxDetails


PAGE_SIZE = 25
#: How often the workflows list refreshes while a workflow on the page is open.
LIST_REFRESH_SECONDS = 5
#: The id of the list's polled partial (its htmx target).
LIST_PARTIAL_ID = "wf-list"
AUDIT_PAGE_SIZE = 50
TIMELINE_LIMIT = 200
EXPORT_CHUNK = 2000
#: What the request form posts besides the kind's parameters.
FORM_CONTROLS = frozenset(
    {"kind", "check", "reason", "break_glass", "break_glass_reason", "csrfmiddlewaretoken"}
)


# --- workflows ---------------------------------------------------------------------------


@require_GET
def running_panel(request: HttpRequest) -> HttpResponse:
    """The Overview's "Running workflows" panel (loaded by htmx): the newest active ones."""
    active = Workflow.objects.filter(state__in=WorkflowState.ACTIVE).order_by("-created_at")
    return render(
        request,
        "workflows/partials/running.html",
        {"workflows": active[:8], "now": timezone.now()},
    )


@require_GET
def disablement_driver(request: HttpRequest) -> HttpResponse:
    """Who drives a DISABLING topic (loaded by htmx into the topic page, since the console app
    does not read workflows): the open workflow on ``topic:<name>``, or "no driver" and, for an
    operator, the request that takes the disablement over at its epoch and policy."""
    cluster = request.GET.get("cluster", "")[:MAX_TEXT]
    name = request.GET.get("topic", "")[:MAX_TEXT]
    wf = (
        Workflow.objects.filter(
            cluster=cluster, target=f"topic:{name}", state__in=WorkflowState.OPEN
        )
        .order_by("-created_at")
        .first()
    )
    topic = (
        Topic.objects.filter(cluster__name=cluster, name=name)
        .only("tiered_state", "tiered_epoch", "disable_policy", "tiering_acks")
        .first()
    )
    adopt_url = None
    if topic is not None and wf is None and has_role(request.user, Role.OPERATOR):
        adopt_url = (
            reverse("workflows:new")
            + "?"
            + urlencode(
                {
                    "kind": "disable_tiering",
                    "cluster": cluster,
                    "topic": name,
                    "policy": topic.disable_policy or DisablePolicy.DEFAULT,
                }
            )
        )
    return render(
        request,
        "workflows/partials/disablement_driver.html",
        {"wf": wf, "topic": topic, "name": name, "adopt_url": adopt_url},
    )


@require_GET
def workflow_list(request: HtmxHttpRequest) -> HttpResponse:
    error = None
    try:
        qs, applied = filter_workflows(request.GET)
    except WorkflowError as exc:
        qs, applied, error = Workflow.objects.none(), {}, exc.message
    paginator = Paginator(with_current_step(with_decisions(qs)), PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    # the list refreshes itself while a workflow on it can still move (approvals included)
    live = any(w.state in WorkflowState.OPEN for w in page.object_list)
    context = {
        "page": page,
        "applied": applied,
        "query": urlencode(applied),
        "error": error,
        "states": WorkflowState.ALL,
        "kinds": all_kinds(include_hidden=True),
        "now": timezone.now(),
        "can_request": has_role(request.user, Role.OPERATOR),
        "live": live,
        "live_seconds": LIST_REFRESH_SECONDS,
    }
    if request.htmx and request.htmx.target == LIST_PARTIAL_ID:
        # the list's poll gets its partial only; 286 (htmx: stop polling) once nothing on it
        # can move, with the final rows swapped in
        return render(
            request, "workflows/partials/workflow_table.html", context, status=200 if live else 286
        )
    return render(request, "workflows/workflow_list.html", context, status=400 if error else 200)


MAX_PK = 2**63 - 1


def _pk(value: int) -> int:
    """A URL integer that fits a bigint, else 404 (never a database error)."""
    if not 0 < value <= MAX_PK:
        raise Http404("No such object.")
    return value


def _workflow(pk: int) -> Workflow:
    return get_object_or_404(
        with_decisions(Workflow.objects.select_related("requester")), pk=_pk(pk)
    )


def _live_context(request: HttpRequest, wf: Workflow) -> dict[str, Any]:
    steps = list(wf.steps.select_related("confirmed_by").order_by("position"))
    gate = next(
        (s for s in steps if s.gate and s.state == StepState.WAITING and not s.confirmed_at), None
    )
    per_broker = [s for s in steps if s.broker is not None]
    return {
        "wf": wf,
        "steps": steps,
        # the step the engine runs (as ``queries.with_current_step`` finds it for the list)
        "current": next((s for s in steps if s.state != StepState.SUCCEEDED), None),
        "per_broker": per_broker,
        "gate": gate,
        "can_confirm": gate is not None and has_role(request.user, Role.OPERATOR),
        "done_steps": sum(1 for s in steps if s.state == StepState.SUCCEEDED),
        "now": timezone.now(),
        # the live partial also refreshes the page's timeline and state badge (htmx OOB swaps)
        "timeline": list(AuditEvent.objects.filter(workflow=wf).order_by("seq")[:TIMELINE_LIMIT]),
    }


@require_GET
def workflow_detail(request: HttpRequest, pk: int) -> HttpResponse:
    wf = _workflow(pk)
    user = request.user
    context = _live_context(request, wf)
    now = timezone.now()
    counted = wf.counted_approvals(now)
    # a decision of yours that stands replaces the button with "You approved at T"
    my_decision = wf.standing_decision(user, now)
    context.update(
        approvals=list(wf.approvals.all()),
        approvals_valid=len(counted),
        counted_ids={a.pk for a in counted},
        my_decision=my_decision,
        can_decide=(
            wf.state == WorkflowState.PENDING_APPROVAL
            and has_role(user, Role.APPROVER)
            and wf.requester_id != user.pk  # nobody approves their own request
            and my_decision is None
        ),
        can_cancel=wf.state in WorkflowState.CANCELLABLE
        and (wf.requester_id == user.pk or has_role(user, Role.ADMIN)),
        # once it has started, an admin may still stop it (with a reason)
        can_stop=wf.state in WorkflowState.OPEN
        and wf.state not in WorkflowState.CANCELLABLE
        and has_role(user, Role.ADMIN),
        logs=list(wf.logs.select_related("step").order_by("-created_at", "-id")[:50]),
        max_reason=MAX_REASON,
    )
    return render(request, "workflows/workflow_detail.html", context)


@require_GET
def workflow_live(request: HttpRequest, pk: int) -> HttpResponse:
    """The live partial (state, steps, progress, gate): polled while the workflow is active;
    answers 286 once it is not, which stops htmx polling. A page that was showing "planning"
    reloads whole (``HX-Refresh``) once the plan is there, so its plan panel shows it."""
    wf = get_object_or_404(Workflow.objects.select_related("requester"), pk=_pk(pk))
    response = render(request, "workflows/partials/workflow_live.html", _live_context(request, wf))
    if request.GET.get("was") == WorkflowState.PLANNING and wf.state != WorkflowState.PLANNING:
        response["HX-Refresh"] = "true"
    if not wf.is_active:
        response.status_code = 286
    return response


@require_http_methods(["GET", "POST"])
def workflow_approve(request: HttpRequest, pk: int) -> HttpResponse:
    """The approval page: the plan, its hash, who asked and why; approve or reject."""
    wf = _workflow(pk)
    if request.method == "POST":
        decision = request.POST.get("decision")
        try:
            if decision == ApprovalDecision.APPROVE:
                actions.do_approve_workflow(
                    wf.pk,
                    actor=request.user,
                    plan_hash=request.POST.get("plan_hash"),
                    comment=request.POST.get("comment", ""),
                    context=AuditContext.WEB,
                )
                messages.success(request, f"You approved workflow #{wf.pk}.")
            elif decision == "reject":
                actions.do_reject_workflow(
                    wf.pk,
                    actor=request.user,
                    plan_hash=request.POST.get("plan_hash"),
                    comment=request.POST.get("comment", ""),
                    context=AuditContext.WEB,
                )
                messages.success(request, f"You rejected workflow #{wf.pk}.")
            else:
                messages.error(request, "Choose approve or reject.")
                return HttpResponseRedirect(reverse("workflows:approve", args=[wf.pk]))
        except WorkflowError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            return HttpResponseRedirect(reverse("workflows:approve", args=[wf.pk]))
        return HttpResponseRedirect(reverse("workflows:detail", args=[wf.pk]))
    now = timezone.now()
    return render(
        request,
        "workflows/workflow_approve.html",
        {
            "wf": wf,
            "approvals": list(wf.approvals.all()),
            "my_decision": wf.standing_decision(request.user, now),
            "valid_count": len(wf.counted_approvals(now)),
            "is_requester": wf.requester_id == request.user.pk,
            "is_approver": has_role(request.user, Role.APPROVER),
            "ttl_hours": settings.STRATA_APPROVAL_TTL_HOURS,
            "now": now,
            "max_reason": MAX_REASON,
        },
    )


def _simple_action(request: HttpRequest, pk: int, action: Any, done: str) -> HttpResponse:
    _pk(pk)
    try:
        action(
            pk,
            actor=request.user,
            comment=request.POST.get("comment", ""),
            context=AuditContext.WEB,
        )
        messages.success(request, done.format(pk=pk))
    except WorkflowError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from None
        messages.error(request, f"{exc.code}: {exc.message}")
    return HttpResponseRedirect(reverse("workflows:detail", args=[pk]))


@require_POST
def workflow_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _simple_action(request, pk, actions.do_cancel_workflow, "Workflow #{pk} cancelled.")


@require_POST
def workflow_confirm(request: HttpRequest, pk: int) -> HttpResponse:
    return _simple_action(
        request, pk, actions.do_confirm_step, "Confirmed; workflow #{pk} goes on."
    )


#: At most this many suggestions per field in the request form (a datalist, not a menu).
SUGGESTIONS_LIMIT = 500


def _suggestions(cluster_name: str, broker: str | None) -> dict[str, list[str]]:
    """Values the request form suggests (an HTML datalist), from the synced inventory in
    PostgreSQL: clusters; the chosen cluster's topics, brokers and log dirs (of the chosen
    broker when one is given). Free text stays allowed: the inventory may lag the cluster."""
    out: dict[str, list[str]] = {
        "cluster": list(Cluster.objects.order_by("name").values_list("name", flat=True)[:200])
    }
    cluster = Cluster.objects.filter(name=cluster_name).first() if cluster_name else None
    if cluster is None:
        return out
    out["topic"] = list(
        Topic.objects.filter(cluster=cluster)
        .order_by("name")
        .values_list("name", flat=True)[:SUGGESTIONS_LIMIT]
    )
    out["broker"] = [
        str(b)
        for b in Broker.objects.filter(cluster=cluster)
        .order_by("broker_id")
        .values_list("broker_id", flat=True)[:SUGGESTIONS_LIMIT]
    ]
    dirs = LogDir.objects.filter(cluster=cluster)
    if broker and broker.isdigit():
        dirs = dirs.filter(broker__broker_id=int(broker))
    out["log_dir"] = list(
        dirs.order_by("name").values_list("name", flat=True).distinct()[:SUGGESTIONS_LIMIT]
    )
    return out


@require_http_methods(["GET", "POST"])
def workflow_new(request: HttpRequest) -> HttpResponse:
    """The generic request form, driven by the kind registry.

    "Check request" (a POST with ``check``, or a GET with ``kind`` and the fields, as the
    console's links send) shows the form and, once the fields are complete, the validated
    request: target, approvals needed, and any open workflow it would conflict with. It reads
    PostgreSQL only. The check posts what was typed, so no value can outgrow the request line
    a server takes (gunicorn refused a long one before Django saw it). POST without ``check``
    creates the workflow in ``planning``; a worker computes the plan, and the workflow page
    shows it as soon as it is there."""
    data = request.POST if request.method == "POST" else request.GET
    checking = request.method == "GET" or "check" in data
    kind_name = data.get("kind") or ""
    kind = None
    preview = None
    error = None
    error_workflow = None
    status = 200
    if kind_name:
        try:
            kind = get_kind(kind_name)
        except Refusal as exc:
            error, status = exc.message, 400
    # The kind's fields (and the cluster), and any other parameter a link or a hand-typed URL
    # sends, which the kind refuses in the words the API and the CLI use (a misspelt one).
    names = ["cluster", *(f.name for f in kind.fields)] if kind is not None else ["cluster"]
    names += [n for n in data if n not in names and n not in FORM_CONTROLS]
    raw = {name: data.get(name) or None for name in names}
    if kind is not None and (request.method == "POST" or raw.get("cluster")):
        try:
            preview = actions.preview_plan(kind.name, raw)
        except WorkflowError as exc:
            error, status = f"{exc.code}: {exc.message}", 400
    if not checking and preview is not None:
        try:
            wf = actions.do_request_workflow(
                actor=request.user,
                kind=preview.kind.name,
                params=raw,
                reason=data.get("reason", ""),
                break_glass=bool(data.get("break_glass")),
                break_glass_reason=data.get("break_glass_reason", ""),
                context=AuditContext.WEB,
            )
        except WorkflowError as exc:
            error, status = f"{exc.code}: {exc.message}", exc.status
            error_workflow = exc.workflow_id
        else:
            messages.success(
                request, f"Workflow #{wf.pk} requested: a worker is computing its plan."
            )
            return HttpResponseRedirect(reverse("workflows:detail", args=[wf.pk]))
    fields = []
    if kind is not None:
        for f in kind.fields:
            fields.append(
                {
                    "field": f,
                    "value": data.get(f.name) or (f.default if f.default is not None else ""),
                }
            )
    return render(
        request,
        "workflows/workflow_new.html",
        {
            "kind": kind,
            "kinds": all_kinds(include_hidden=False),
            "fields": fields,
            "cluster_field": CLUSTER_FIELD,
            "max_reason": MAX_REASON,  # what the action accepts; the page counts down to it
            "cluster": data.get("cluster") or "",
            "suggestions": _suggestions(data.get("cluster") or "", data.get("broker"))
            if kind is not None
            else {},
            "reason": data.get("reason") or "",
            "preview": preview,
            "error": error,
            "error_workflow": error_workflow,
            "can_request": has_role(request.user, Role.OPERATOR),
            "is_admin": has_role(request.user, Role.ADMIN),
            "now": timezone.now(),
        },
        status=status,
    )
