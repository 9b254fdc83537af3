"""Requests and human decisions on workflows (DESIGN.md "Access, approvals and audit").

Operators request (parameters frozen, state ``planning``; a worker plans); approvers approve or
reject naming the plan hash they reviewed (stale: 409 ``PLAN_CHANGED``), never their own request
(403 ``SELF_APPROVAL_FORBIDDEN``) nor twice (409 ``ALREADY_DECIDED``). Any rejection rejects;
enough valid approvals make it ``approved``, enqueued after commit. Break-glass (admins, with a
written reason) approves at once, flagged. One open workflow per (cluster, target): 409
``WORKFLOW_CONFLICT`` (a partial unique index). Refused actions change nothing and leave a
``denied`` audit event.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.roles import Role, has_role
from audit.choices import AuditOutcome
from audit.denials import record_denial
from console import capabilities
from console.choices import ClusterBackend
from console.models import Cluster
from workflows.choices import ApprovalDecision, AuditAction, StepState, WorkflowState
from workflows.errors import ErrorCode, WorkflowError
from workflows.events import record_change, record_ready, workflow_snapshot
from workflows.kinds import Params, get_kind
from workflows.models import Approval, Workflow, WorkflowStep
from workflows.queue import enqueue_run

__all__ = [
    "RequestPreview",
    "do_approve_workflow",
    "do_cancel_workflow",
    "do_confirm_step",
    "do_reject_workflow",
    "do_request_workflow",
    "preview_plan",
]

MAX_REASON = 2000

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _refused(
    exc: WorkflowError,
    action: str,
    *,
    actor: Any,
    context: str | None,
    wf_id: Any = None,
    extra: dict[str, Any] | None = None,
) -> WorkflowError:
    """Leave a ``denied`` audit event for a refused action, then hand the error back.

    Identical refusals (same actor, action, workflow and error code) within a window are
    counted and written as one event when the window closes (:mod:`audit.denials`)."""
    record_denial(
        action,
        error=exc.code,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        context=context,
        target_type="workflow" if wf_id else "",
        target_id=str(wf_id or "")[:255],
        workflow=wf_id
        if isinstance(wf_id, int)
        and 0 < wf_id < 2**63
        and Workflow.objects.filter(pk=wf_id).exists()
        else None,
        outcome=AuditOutcome.DENIED,
        extra={"error": exc.code, "message": exc.message, **(extra or {})},
    )
    return exc


def _audited_refusals(action: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorator: a WorkflowError raised by the action is audited as ``denied`` and re-raised.
    The action's signature is kept (the callers' types are checked against it); its workflow id
    is its one positional argument, when it has one."""

    def decorator(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            workflow_id = args[0] if args else None
            try:
                return fn(*args, **kwargs)
            except WorkflowError as exc:
                context = kwargs.get("context")  # every action's ``context: str | None``
                raise _refused(
                    exc,
                    action,
                    actor=kwargs.get("actor"),
                    context=context if isinstance(context, str) else None,
                    wf_id=workflow_id,
                ) from None

        return wrapped

    return decorator


def _clean_text(value: Any, name: str, *, max_len: int = MAX_REASON) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} must be a string.")
    text = value.strip()
    if len(text) > max_len:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} is longer than {max_len}.")
    if "\x00" in text:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"{name} contains a NUL character.")
    return text


class RequestPreview:
    """What a request would freeze, validated without touching the cluster: kind, cleaned
    params, target, approvals required, and the open workflow it would conflict with.

    The plan itself is computed by a worker once the request exists (state ``planning``): a web
    request never calls a broker agent, nor scans a Spark plan."""

    def __init__(self, kind_name: str, raw: dict[str, Any]) -> None:
        self.kind = get_kind(kind_name)
        #: The request as the kind's model, and as stored (``Workflow.parameters``).
        self.request: Params = self.kind.clean(raw)
        self.params = self.kind.dump_params(self.request)
        cluster = self.request.cluster
        if self.kind.needs_cluster:
            _check_cluster(cluster, self.kind.name)
        self.target = self.kind.target(self.request)
        self.approvals_required = self.kind.approvals_required(self.request)
        self.conflict = Workflow.objects.open().filter(cluster=cluster, target=self.target).first()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.name,
            "cluster": self.request.cluster,
            "target": self.target,
            "params": self.params,
            "plan": None,
            "plan_hash": None,
            "planned_by": "worker",
            "approvals_required": self.approvals_required,
            "conflict": self.conflict.pk if self.conflict else None,
        }


def _check_cluster(name: str, kind: str) -> None:
    """The cluster exists and its backend can run ``kind``. On a ``kafka`` cluster only the
    kinds whose steps speak Kafka's protocol run (``capabilities.KAFKA_KINDS``, #36), and only
    with the capability they need; any other is refused up front, with the capability it lacks
    when there is one, rather than planned and failed at its first step."""
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"Unknown cluster {name!r}.")
    if cluster.backend != ClusterBackend.KAFKA:
        return
    missing = capabilities.kind_unsupported(cluster, kind)
    why = f" {missing.label}: {missing.reason}." if missing else ""
    if not capabilities.kind_runs_on(cluster, kind):
        raise WorkflowError(
            ErrorCode.INVALID_REQUEST,
            f"Cluster {name!r} is read through Kafka's protocol, where Strata does not run "
            f"{kind} yet.{why}",
        )
    if missing is not None:
        raise WorkflowError(ErrorCode.INVALID_REQUEST, f"Cluster {name!r} cannot run {kind}:{why}")


def preview_plan(kind_name: Any, raw: dict[str, Any]) -> RequestPreview:
    """Validate a request without recording anything (the request form's preview)."""
    return RequestPreview(kind_name, raw)


@_audited_refusals(AuditAction.WORKFLOW_REQUESTED)
def do_request_workflow(
    *,
    actor: Any,
    kind: Any,
    params: dict[str, Any],
    reason: Any = "",
    break_glass: bool = False,
    break_glass_reason: Any = "",
    expected_plan_hash: str | None = None,
    context: str | None = None,
) -> Workflow:
    """Create a workflow in ``planning`` and enqueue its planning on commit.

    A worker computes the plan (``workflows.engine``) and moves it to ``pending_approval``
    (``approved`` for break-glass or a kind that needs no approval), or to ``refused``.
    ``expected_plan_hash``, when given, must equal the actions' hash the worker computes, else
    the workflow is refused with ``PLAN_CHANGED``."""
    if not has_role(actor, Role.OPERATOR):
        raise WorkflowError(
            ErrorCode.FORBIDDEN, "Requesting a workflow needs the operator role.", 403
        )
    reason = _clean_text(reason, "reason")
    break_glass_reason = _clean_text(break_glass_reason, "break_glass_reason")
    if break_glass:
        if not has_role(actor, Role.ADMIN):
            raise WorkflowError(ErrorCode.FORBIDDEN, "Break-glass needs the admin role.", 403)
        if not break_glass_reason:
            raise WorkflowError(
                ErrorCode.BREAK_GLASS_REASON_REQUIRED,
                "Break-glass runs without approval only with a written reason.",
            )
    if expected_plan_hash is not None and not isinstance(expected_plan_hash, str):
        raise WorkflowError(ErrorCode.INVALID_REQUEST, "expected_plan_hash must be a string.")
    preview = RequestPreview(kind, params)
    if preview.conflict is not None:
        raise _conflict(preview.conflict)
    now = timezone.now()
    try:
        with transaction.atomic():
            wf = Workflow.objects.create(
                kind=preview.kind.name,
                cluster=preview.request.cluster,
                target=preview.target,
                parameters=preview.params,
                state=WorkflowState.PLANNING,
                expected_plan_hash=(expected_plan_hash or "")[:64],
                requester=actor,
                reason=reason,
                approvals_required=preview.approvals_required,
                break_glass=bool(break_glass),
                break_glass_reason=break_glass_reason if break_glass else "",
                created_at=now,
            )
            record_change(
                wf,
                AuditAction.WORKFLOW_REQUESTED,
                None,
                actor=actor,
                context=context,
                after={**workflow_snapshot(wf), "kind": wf.kind, "params": wf.parameters},
                extra={
                    "cluster": wf.cluster,
                    "target": wf.target,
                    "reason": reason,
                    "break_glass": wf.break_glass,
                    "break_glass_reason": wf.break_glass_reason,
                },
            )
            enqueue_run(wf.pk)
    except IntegrityError:
        existing = (
            Workflow.objects.open()
            .filter(cluster=preview.request.cluster, target=preview.target)
            .first()
        )
        if existing is None:
            raise
        raise _conflict(existing) from None
    return wf


def _conflict(existing: Workflow) -> WorkflowError:
    return WorkflowError(
        ErrorCode.WORKFLOW_CONFLICT,
        f"Workflow #{existing.pk} ({existing.kind}, {existing.state}) is already open on "
        f"{existing.cluster}/{existing.target}.",
        409,
        workflow_id=existing.pk,
    )


def _locked(workflow_id: Any) -> Workflow:
    try:
        pk = int(workflow_id)
    except (TypeError, ValueError):
        raise WorkflowError(ErrorCode.NOT_FOUND, "No such workflow.", 404) from None
    if not 0 < pk < 2**63:
        raise WorkflowError(ErrorCode.NOT_FOUND, f"No workflow #{pk}.", 404)
    wf = Workflow.objects.select_for_update().filter(pk=pk).first()
    if wf is None:
        raise WorkflowError(ErrorCode.NOT_FOUND, f"No workflow #{pk}.", 404)
    return wf


def _void_expired(wf: Workflow, now: dt.datetime) -> int:
    ttl = dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS)
    return wf.approvals.filter(
        decision=ApprovalDecision.APPROVE, voided_at__isnull=True, created_at__lte=now - ttl
    ).update(voided_at=now, void_reason="expired")


def _check_decider(wf: Workflow, actor: Any, plan_hash_: Any, now: dt.datetime) -> None:
    """Refuse a decision the rules forbid. Expired approvals are voided first, so an approver
    whose approval aged out may decide again (approve anew or reject)."""
    if not has_role(actor, settings.STRATA_APPROVER_ROLE):
        raise WorkflowError(
            ErrorCode.FORBIDDEN, "Deciding on a workflow needs the approver role.", 403
        )
    if wf.requester_id == actor.pk:
        raise WorkflowError(
            ErrorCode.SELF_APPROVAL_FORBIDDEN,
            "Nobody approves or rejects their own request (cancel it instead).",
            403,
        )
    if wf.state != WorkflowState.PENDING_APPROVAL:
        raise WorkflowError(
            ErrorCode.WORKFLOW_NOT_PENDING,
            f"Workflow #{wf.pk} is {wf.state}, not pending approval.",
            409,
        )
    if plan_hash_ is not None and plan_hash_ != wf.plan_hash:
        raise WorkflowError(
            ErrorCode.PLAN_CHANGED,
            f"The plan changed: its hash is now {wf.plan_hash}; review it again.",
            409,
        )
    _void_expired(wf, now)
    if wf.approvals.filter(approver=actor, voided_at__isnull=True).exists():
        raise WorkflowError(ErrorCode.ALREADY_DECIDED, "You already decided on this workflow.", 409)


@_audited_refusals(AuditAction.WORKFLOW_APPROVED)
def do_approve_workflow(
    workflow_id: Any,
    /,
    *,
    actor: Any,
    plan_hash: Any,
    comment: Any = "",
    context: str | None = None,
) -> Workflow:
    """Approve the plan with hash ``plan_hash``; enough valid approvals make it ``approved``."""
    comment = _clean_text(comment, "comment")
    if not isinstance(plan_hash, str) or not plan_hash:
        raise WorkflowError(
            ErrorCode.INVALID_REQUEST, "plan_hash is required: approve what you reviewed."
        )
    now = timezone.now()
    with transaction.atomic():
        wf = _locked(workflow_id)
        _check_decider(wf, actor, plan_hash, now)
        before = workflow_snapshot(wf)
        approval = Approval.objects.create(
            workflow=wf,
            approver=actor,
            decision=ApprovalDecision.APPROVE,
            plan_hash=plan_hash,
            comment=comment,
            created_at=now,
        )
        valid = wf.valid_approvals(now).count()
        ready = valid >= wf.approvals_required
        if ready:
            wf.state = WorkflowState.APPROVED
            wf.approved_at = now
            wf.save(update_fields=["state", "approved_at", "updated_at"])
        record_change(
            wf,
            AuditAction.WORKFLOW_APPROVED,
            before,
            actor=actor,
            context=context,
            extra={
                "approval_id": approval.pk,
                "plan_hash": plan_hash,
                "comment": comment,
                "approvals_valid": valid,
                "approvals_required": wf.approvals_required,
            },
        )
        if ready:
            record_ready(wf, actor=actor, context=context)
            enqueue_run(wf.pk)
    return wf


@_audited_refusals(AuditAction.WORKFLOW_REJECTED)
def do_reject_workflow(
    workflow_id: Any,
    /,
    *,
    actor: Any,
    plan_hash: Any = None,
    comment: Any = "",
    context: str | None = None,
) -> Workflow:
    """Reject: any rejection ends the workflow. ``plan_hash``, when given, must be current;
    ``comment`` is required (a rejection says why)."""
    comment = _clean_text(comment, "comment")
    if plan_hash is not None and not isinstance(plan_hash, str):
        raise WorkflowError(ErrorCode.INVALID_REQUEST, "plan_hash must be a string.")
    now = timezone.now()
    with transaction.atomic():
        wf = _locked(workflow_id)
        _check_decider(wf, actor, plan_hash or None, now)
        if not comment:  # after the decider checks: who may not decide hears that first
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST,
                "comment is required to reject: say why, so the requester can act on it.",
            )
        before = workflow_snapshot(wf)
        Approval.objects.create(
            workflow=wf,
            approver=actor,
            decision=ApprovalDecision.REJECT,
            plan_hash=wf.plan_hash,
            comment=comment,
            created_at=now,
        )
        wf.state = WorkflowState.REJECTED
        wf.finished_at = now
        wf.save(update_fields=["state", "finished_at", "updated_at"])
        record_change(
            wf,
            AuditAction.WORKFLOW_REJECTED,
            before,
            actor=actor,
            context=context,
            extra={"comment": comment, "plan_hash": wf.plan_hash},
        )
    return wf


@_audited_refusals(AuditAction.WORKFLOW_CANCELLED)
def do_cancel_workflow(
    workflow_id: Any, /, *, actor: Any, comment: Any = "", context: str | None = None
) -> Workflow:
    """Cancel a workflow: before execution starts, the requester or an admin; once it runs or
    waits, an admin only, with a reason (the comment).

    Stopping a started workflow (issue #16: a workflow stuck on a lost worker or run could be
    cancelled by nobody) cancels its unfinished steps and clears the lease in the same
    transaction as the audit event. The engine's run that may still hold the lease is fenced: its
    next commit finds the lease gone and changes nothing, and a cancelled workflow is never
    claimed again. What a step already sent is not undone (a topic may stay DISABLING, a purge
    may have deleted part of its plan): the event records the step it stopped at, and the way
    forward is a new, reviewed workflow."""
    comment = _clean_text(comment, "comment")
    now = timezone.now()
    with transaction.atomic():
        wf = _locked(workflow_id)
        is_admin = has_role(actor, Role.ADMIN)
        if not (wf.requester_id == actor.pk or is_admin):
            raise WorkflowError(
                ErrorCode.FORBIDDEN, "Only the requester or an admin may cancel.", 403
            )
        started = wf.state in WorkflowState.OPEN and wf.state not in WorkflowState.CANCELLABLE
        if wf.state not in WorkflowState.CANCELLABLE and not (started and is_admin):
            raise WorkflowError(
                ErrorCode.WORKFLOW_NOT_CANCELLABLE,
                f"Workflow #{wf.pk} is {wf.state}: once it has started, only an admin may stop it."
                if started
                else f"Workflow #{wf.pk} is {wf.state}: it has ended.",
                409,
            )
        if started and not comment.strip():
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST,
                "Stopping a started workflow needs a reason (comment).",
                400,
            )
        before = workflow_snapshot(wf)
        extra: dict[str, Any] = {"comment": comment}
        if started:
            unfinished = wf.steps.exclude(state__in=StepState.TERMINAL)
            extra.update(
                stopped_while=wf.state,
                current_step=wf.current_step,
                steps_cancelled=list(
                    unfinished.order_by("position").values_list("name", flat=True)
                ),
            )
            unfinished.update(state=StepState.CANCELLED, finished_at=now)
            wf.lease_owner, wf.lease_expires_at, wf.resume_at = "", None, None
        wf.state = WorkflowState.CANCELLED
        wf.finished_at = now
        wf.save(
            update_fields=[
                "state",
                "finished_at",
                "lease_owner",
                "lease_expires_at",
                "resume_at",
                "updated_at",
            ]
        )
        record_change(
            wf, AuditAction.WORKFLOW_CANCELLED, before, actor=actor, context=context, extra=extra
        )
    return wf


@_audited_refusals(AuditAction.WORKFLOW_CONFIRMED)
def do_confirm_step(
    workflow_id: Any, /, *, actor: Any, comment: Any = "", context: str | None = None
) -> Workflow:
    """Pass the human gate the workflow waits at (an operator confirms, e.g. disk replaced)."""
    comment = _clean_text(comment, "comment")
    now = timezone.now()
    with transaction.atomic():
        wf = _locked(workflow_id)
        if not has_role(actor, Role.OPERATOR):
            raise WorkflowError(ErrorCode.FORBIDDEN, "Confirming needs the operator role.", 403)
        step = (
            WorkflowStep.objects.select_for_update()
            .filter(workflow=wf, gate=True, state=StepState.WAITING, confirmed_at__isnull=True)
            .order_by("position")
            .first()
        )
        if wf.state != WorkflowState.WAITING or step is None:
            raise WorkflowError(
                ErrorCode.NOT_WAITING_FOR_CONFIRMATION,
                f"Workflow #{wf.pk} is {wf.state} and waits for no confirmation.",
                409,
            )
        before = workflow_snapshot(wf)
        step.confirmed_by = actor
        step.confirmed_at = now
        step.state = StepState.PENDING
        step.save(update_fields=["confirmed_by", "confirmed_at", "state", "updated_at"])
        wf.state = WorkflowState.RUNNING
        wf.waiting_reason = ""
        wf.resume_at = None
        wf.lease_owner, wf.lease_expires_at = "", None
        wf.save(
            update_fields=[
                "state",
                "waiting_reason",
                "resume_at",
                "lease_owner",
                "lease_expires_at",
                "updated_at",
            ]
        )
        record_change(
            wf,
            AuditAction.WORKFLOW_CONFIRMED,
            before,
            actor=actor,
            context=context,
            extra={"step": step.name, "position": step.position, "comment": comment},
        )
        enqueue_run(wf.pk)
    return wf
