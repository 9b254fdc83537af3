"""Planning: computing a kind's plan, adopting it on a workflow, and refreshing the plans that
wait for approval. Runs in workers only (the engine's ``_Run.plan`` / ``_Run.start`` and the beat
task ``refresh_plans``); a web request never computes a plan.

A plan is two parts (``workflows.kinds.Plan``): the actions (the kind's typed model, stored as
its JSON), hashed and approved, and the information, shown with its age and never hashed. See DESIGN.md "Approvals and audit".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit import trail
from audit.choices import AuditContext
from audit.queries import diff
from console.sync import inventory_missing
from workflows.choices import AuditAction, WorkflowState
from workflows.errors import WorkflowError
from workflows.events import record_change, workflow_snapshot
from workflows.kinds import PlanUnavailable, get_kind, plan_hash
from workflows.kinds.commands import is_unreachable
from workflows.models import Workflow

__all__ = [
    "PLAN_FIELDS",
    "PlanOutcome",
    "adopt_plan",
    "approval_ttl",
    "compute_plan",
    "refresh_pending_plans",
    "void_for_plan_change",
]

log = logging.getLogger(__name__)


def approval_ttl() -> dt.timedelta:
    return dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS)


@dataclasses.dataclass(frozen=True)
class StoredPlan:
    """A computed plan as the workflow row stores it: the actions' JSON and the information."""

    actions: dict[str, Any]
    information: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class PlanOutcome:
    """What computing a plan gave: a plan (actions normalised, their hash), a refusal, or the
    reason it could not be computed now (``unavailable``: the cluster did not answer;
    ``error``: anything else, retried a few times)."""

    plan: StoredPlan | None = None
    actions_hash: str = ""
    refusal: WorkflowError | None = None
    unavailable: str = ""
    error: str = ""


def compute_plan(wf: Workflow) -> PlanOutcome:
    """Run the kind's plan for ``wf`` (in a worker). Never raises for the cluster's sake."""
    kind = get_kind(wf.kind)
    if wf.cluster and inventory_missing(wf.cluster):
        return PlanOutcome(
            unavailable=f"the inventory of cluster {wf.cluster} is being rebuilt (its partitions "
            "are missing after a database restart); the next sync restores it"
        )
    try:
        plan = kind.plan(kind.read_params(wf.parameters))
    except PlanUnavailable as exc:
        return PlanOutcome(unavailable=exc.message)
    except WorkflowError as exc:
        return PlanOutcome(refusal=exc)
    except Exception as exc:
        if is_unreachable(exc):
            return PlanOutcome(unavailable=f"{type(exc).__name__}: {str(exc)[:300]}")
        log.warning("planning %s failed", wf, exc_info=True)
        return PlanOutcome(error=f"{type(exc).__name__}: {str(exc)[:300]}")
    actions = trail.normalise(plan.actions.dump())
    stored = StoredPlan(actions=actions, information=trail.normalise(plan.information))
    return PlanOutcome(plan=stored, actions_hash=plan_hash(kind.name, wf.parameters, actions))


def adopt_plan(wf: Workflow, outcome: PlanOutcome, now: dt.datetime) -> list[dict[str, Any]]:
    """Put a computed plan on ``wf`` (not saved); returns what changed in the actions."""
    assert outcome.plan is not None
    changes = diff(wf.plan, outcome.plan.actions) if wf.plan_hash else []
    wf.plan, wf.plan_hash = outcome.plan.actions, outcome.actions_hash
    wf.plan_information, wf.plan_information_at = outcome.plan.information, now
    wf.plan_attempts = 0
    return changes


PLAN_FIELDS = ("plan", "plan_hash", "plan_information", "plan_information_at", "plan_attempts")


def void_for_plan_change(wf: Workflow, changes: list[dict[str, Any]], now: dt.datetime) -> int:
    """The actions changed: every decision so far is void; the page shows ``plan_diff``."""
    wf.plan_diff = [{**c, "at": now.isoformat()} for c in changes]
    return wf.approvals.filter(voided_at__isnull=True).update(
        voided_at=now, void_reason="plan changed"
    )


def refresh_pending_plans(now: dt.datetime | None = None, limit: int = 20) -> list[int]:
    """Beat: re-plan workflows pending approval whose information is older than
    ``STRATA_PLAN_REFRESH_SECONDS``. Same actions → the information and its age are refreshed
    (not audited: nothing is decided on it). Different actions → the approvals are voided, the
    diff is kept and the change audited, so approvers see it *before* they approve. A cluster
    that does not answer leaves the information as it was (its age shows it)."""
    now = now or timezone.now()
    stale_before = now - dt.timedelta(seconds=settings.STRATA_PLAN_REFRESH_SECONDS)
    rows = list(
        Workflow.objects.filter(state=WorkflowState.PENDING_APPROVAL)
        .filter(Q(plan_information_at__isnull=True) | Q(plan_information_at__lt=stale_before))
        .order_by("plan_information_at", "pk")[:limit]
    )
    changed: list[int] = []
    for wf in rows:
        outcome = compute_plan(wf)
        if outcome.plan is None:
            continue
        with transaction.atomic():
            locked = (
                Workflow.objects.select_for_update()
                .filter(pk=wf.pk, state=WorkflowState.PENDING_APPROVAL, plan_hash=wf.plan_hash)
                .first()
            )
            if locked is None:  # decided, cancelled or re-planned meanwhile
                continue
            before = workflow_snapshot(locked)
            old_hash, old_plan = locked.plan_hash, locked.plan
            changes = adopt_plan(locked, outcome, timezone.now())
            if locked.plan_hash == old_hash:
                locked.save(update_fields=[*PLAN_FIELDS, "updated_at"])
                continue
            voided = void_for_plan_change(locked, changes, timezone.now())
            locked.save(update_fields=[*PLAN_FIELDS, "plan_diff", "updated_at"])
            record_change(
                locked,
                AuditAction.WORKFLOW_PLAN_CHANGED,
                {**before, "plan": old_plan},
                context=AuditContext.BEAT,
                extra={
                    "old_plan_hash": old_hash,
                    "new_plan_hash": locked.plan_hash,
                    "approvals_voided": voided,
                    "changes": changes,
                    "new_plan": locked.plan,
                },
            )
            changed.append(locked.pk)
    return changed
