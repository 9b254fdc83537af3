"""Workflows, their steps, approvals and step logs: the source of truth of the write side.

The row is the truth and Celery carries only primary keys; a run holds the workflow's lease
(``lease_owner`` + ``lease_expires_at``), and the reconciler resumes one whose lease expired.
One open workflow per ``(cluster, target)`` is a partial unique index, so concurrent requests
cannot both pass. ``plan_hash`` covers ``plan`` (the actions) only, never ``plan_information``.
Steps are created when execution starts, from the plan re-computed then, so they describe
exactly the actions the approvers approved.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows.choices import ApprovalDecision, StepState, WorkflowState

__all__ = ["Approval", "StepLog", "Workflow", "WorkflowStep"]


class WorkflowQuerySet(models.QuerySet["Workflow"]):
    def open(self) -> WorkflowQuerySet:
        return self.filter(state__in=WorkflowState.OPEN)

    def past(self) -> WorkflowQuerySet:
        return self.filter(state__in=WorkflowState.TERMINAL)


class Workflow(models.Model):
    kind = models.CharField(max_length=50, db_index=True)
    cluster = models.CharField(max_length=100)
    target = models.CharField(
        max_length=255, help_text="What the workflow changes, e.g. topic:orders, logdir:2:/d1."
    )
    parameters = models.JSONField(default=dict)
    plan = models.JSONField(default=dict, help_text="The actions: what the steps will do.")
    plan_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the actions.")
    plan_information = models.JSONField(
        default=dict, blank=True, help_text="Figures that drift under traffic; never hashed."
    )
    plan_information_at = models.DateTimeField(null=True, blank=True)
    plan_diff = models.JSONField(
        default=list,
        blank=True,
        help_text="What changed in the actions when approvals were last voided (old → new).",
    )
    plan_attempts = models.PositiveIntegerField(
        default=0, help_text="Planning attempts that found the cluster unavailable."
    )
    expected_plan_hash = models.CharField(
        max_length=64, blank=True, help_text="The hash the requester expects (API clients)."
    )
    state = models.CharField(
        max_length=20, choices=WorkflowState.CHOICES, default=WorkflowState.PLANNING
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workflows_requested"
    )
    reason = models.TextField(blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    break_glass = models.BooleanField(default=False)
    break_glass_reason = models.TextField(blank=True)

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    current_step = models.CharField(max_length=100, blank=True)
    waiting_reason = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)

    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    resume_at = models.DateTimeField(
        null=True, blank=True, help_text="Earliest time the engine continues (backoff, wait)."
    )

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "target"],
                condition=Q(state__in=WorkflowState.OPEN),
                name="workflow_one_open_per_target",
            ),
            models.CheckConstraint(
                condition=Q(state__in=WorkflowState.ALL), name="workflow_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(break_glass=False) | ~Q(break_glass_reason=""),
                name="workflow_break_glass_has_reason",
            ),
        ]
        indexes = [models.Index(fields=["state", "lease_expires_at"], name="workflow_lease_idx")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.cluster}/{self.target} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in WorkflowState.OPEN

    @property
    def is_terminal(self) -> bool:
        return self.state in WorkflowState.TERMINAL

    @property
    def is_active(self) -> bool:
        return self.state in WorkflowState.ACTIVE

    def valid_approvals(self, now: dt.datetime | None = None) -> models.QuerySet[Approval]:
        """Approvals that still count: for the current plan hash, not voided, not expired (the
        query form of ``Approval.counts_for``, for the actions and the engine, which decide on a
        locked row)."""
        now = now or timezone.now()
        ttl = dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS)
        return self.approvals.filter(
            decision=ApprovalDecision.APPROVE,
            plan_hash=self.plan_hash,
            voided_at__isnull=True,
            created_at__gt=now - ttl,
        )

    def approvals_as_of(self, now: dt.datetime | None = None) -> dt.datetime:
        """The moment at which approvals are counted for the pages and the API: now while they
        still decide (planning, pending approval, approved and not yet started); once it
        started, the moment it was approved; once it ended before that (rejected, cancelled),
        the moment it ended. A workflow that ran on one approval reads "1 / 1" for good, not
        "0 / 1" once that approval's TTL has passed."""
        now = now or timezone.now()
        if self.state in WorkflowState.CANCELLABLE:
            return now
        return self.approved_at or self.finished_at or now

    def counted_approvals(self, now: dt.datetime | None = None) -> list[Approval]:
        """The approvals that count (``Approval.counts_for`` at ``approvals_as_of``): what the
        workflow page, the workflows list, the approve page and the API show as "n / required".
        Reads ``self.approvals.all()``: a list prefetches them (``queries.with_decisions``), so
        it costs no query per row."""
        as_of = self.approvals_as_of(now)
        return [a for a in self.approvals.all() if a.counts_for(self.plan_hash, as_of)]

    def standing_decision(self, user: Any, now: dt.datetime | None = None) -> Approval | None:
        """``user``'s decision that still stands (the action refuses a second one,
        ``ALREADY_DECIDED``): a rejection, or an approval not voided and not expired. None when
        they may decide (again). Reads ``self.approvals.all()`` like ``counted_approvals``."""
        if not getattr(user, "pk", None):
            return None
        as_of = self.approvals_as_of(now)
        for a in self.approvals.all():
            if a.approver_id != user.pk or a.voided_at is not None:
                continue
            if a.decision == ApprovalDecision.REJECT or not a.is_expired(as_of):
                return a
        return None


class WorkflowStep(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    label = models.CharField(max_length=200, blank=True)
    broker = models.IntegerField(null=True, blank=True, help_text="Broker id, when per broker.")
    state = models.CharField(max_length=20, choices=StepState.CHOICES, default=StepState.PENDING)
    gate = models.BooleanField(default=False, help_text="Waits for a human confirmation.")
    attempts = models.PositiveIntegerField(
        default=0, help_text="Times the step function was run (every wait's re-run counts)."
    )
    failures = models.PositiveIntegerField(
        default=0,
        help_text="Runs that raised; the step fails when this reaches max_attempts (a step that "
        "waits, e.g. on a Spark run for hours, is not one failure away from the end).",
    )
    max_attempts = models.PositiveIntegerField(default=5)
    last_error = models.TextField(blank=True)
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_unit = models.CharField(max_length=20, blank=True)
    params = models.JSONField(default=dict, blank=True, help_text="From the step definition.")
    output = models.JSONField(default=dict, blank=True, help_text="What the step returned.")
    idempotency_key = models.CharField(max_length=200, unique=True)
    not_before = models.DateTimeField(null=True, blank=True)
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    confirmed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workflow", "position"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "position"], name="step_position_unique"),
        ]

    def __str__(self) -> str:
        where = f" broker {self.broker}" if self.broker is not None else ""
        return f"{self.name}{where} ({self.state})"

    @property
    def progress_percent(self) -> int | None:
        if self.state == StepState.SUCCEEDED:
            return 100
        if not self.progress_total:
            return None
        return max(0, min(100, int(100 * self.progress_done / self.progress_total)))


class Approval(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="approvals")
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals"
    )
    decision = models.CharField(max_length=10, choices=ApprovalDecision.CHOICES)
    plan_hash = models.CharField(max_length=64)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    voided_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # Nobody decides twice on the same workflow (until a plan change voids decisions).
            models.UniqueConstraint(
                fields=["workflow", "approver"],
                condition=Q(voided_at__isnull=True),
                name="approval_once_per_approver",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.decision} by {self.approver} on #{self.workflow_id}"

    def is_expired(self, now: dt.datetime | None = None) -> bool:
        ttl = dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS)
        return (now or timezone.now()) - self.created_at >= ttl

    def counts_for(self, plan_hash: str, now: dt.datetime | None = None) -> bool:
        """The one rule of which approvals count: an approval of this plan hash, not voided, not
        expired at ``now``. ``Workflow.counted_approvals`` applies it for the pages and the API,
        ``Workflow.valid_approvals`` is its query form for the actions and the engine."""
        return (
            self.decision == ApprovalDecision.APPROVE
            and self.plan_hash == plan_hash
            and self.voided_at is None
            and not self.is_expired(now)
        )


class StepLog(models.Model):
    """A line of a step's log. Written in autocommit, outside the step's transaction, so a
    rolled-back step keeps its log (Nautobot's JobResult.log)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="logs")
    step = models.ForeignKey(
        WorkflowStep, null=True, blank=True, on_delete=models.CASCADE, related_name="logs"
    )
    created_at = models.DateTimeField(default=timezone.now)
    level = models.CharField(max_length=10, default="info")
    message = models.TextField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"[{self.level}] {self.message[:60]}"
