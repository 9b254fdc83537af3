"""What the API and the management commands answer for a workflow (``workflow_out``, stable
field names) and the plan review rows (``plan_summary``) the pages show too."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.utils import timezone

from workflows.kinds import find_kind
from workflows.models import Workflow

__all__ = ["plan_summary", "workflow_out"]


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def plan_summary(wf: Workflow) -> list[dict[str, Any]]:
    """The plan review (stable API field ``plan_summary``): rows of ``what``, ``target``,
    ``before``, ``after``, ``size``, ``destructive``, by the kind's ``review``; empty without a
    plan, or for a plan written by an older version whose fields the kind no longer reads."""
    kind = find_kind(wf.kind)
    if not wf.plan or kind is None:
        return []
    try:
        rows = kind.review(wf.plan, wf.plan_information or {})
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    return [dataclasses.asdict(row) for row in rows]


def workflow_out(wf: Workflow, *, steps: bool = False) -> dict[str, Any]:
    now = timezone.now()
    as_of = wf.approvals_as_of(now)  # approvals are read as the pages read them
    out: dict[str, Any] = {
        "id": wf.pk,
        "kind": wf.kind,
        "cluster": wf.cluster,
        "target": wf.target,
        "state": wf.state,
        "params": wf.parameters,
        "plan": wf.plan,
        "plan_hash": wf.plan_hash,
        "plan_summary": plan_summary(wf),
        "plan_information": wf.plan_information,
        "plan_information_at": _iso(wf.plan_information_at),
        "plan_diff": wf.plan_diff,
        "approvals_required": wf.approvals_required,
        "approvals_valid": len(wf.counted_approvals(now)),
        "approvals": [
            {
                "approver": a.approver.get_username(),
                "decision": a.decision,
                "plan_hash": a.plan_hash,
                "comment": a.comment,
                "created_at": _iso(a.created_at),
                "voided": a.voided_at is not None or a.is_expired(as_of),
                "void_reason": a.void_reason or ("expired" if a.is_expired(as_of) else ""),
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
