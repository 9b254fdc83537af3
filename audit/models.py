"""The tamper-evident audit log.

Append only, enforced by PostgreSQL: a pgtrigger ``Protect`` refuses UPDATE and DELETE, and the
application's role holds only INSERT and SELECT (``manage.py grant_app_role``), so it cannot
bypass the trigger. A keyed chain (HMAC under a key outside PostgreSQL, ``key_id``; ``seq``
without gaps) breaks on any edited, deleted or re-ordered row even if an owner disabled the
trigger; signed checkpoints (:mod:`audit.checkpoints`) catch a removed tail. Written only by
``audit.trail.record()`` inside the change's transaction.
"""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import F
from django.db.models.fields.json import KeyTransform

from audit.choices import AuditContext, AuditOutcome

__all__ = ["AuditEvent", "ChainVerification"]


class AuditEvent(models.Model):
    seq = models.BigIntegerField(unique=True, help_text="1, 2, 3, ... in append order.")
    created_at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,  # users with history are deactivated, never deleted
        related_name="audit_events",
    )
    actor_name = models.CharField(
        max_length=150, db_index=True, help_text="Username, or the process (worker, beat)."
    )
    context = models.CharField(max_length=16, choices=AuditContext.CHOICES)
    action = models.CharField(max_length=100, db_index=True)
    target_type = models.CharField(max_length=50, blank=True)
    target_id = models.CharField(max_length=255, blank=True)
    workflow = models.ForeignKey(
        "workflows.Workflow",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="audit_events",
        help_text="The workflow this event belongs to, for its timeline.",
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=AuditOutcome.CHOICES, default=AuditOutcome.SUCCESS, db_index=True
    )
    extra = models.JSONField(default=dict, blank=True)
    key_id = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="Id of the audit key the hash is an HMAC under (empty: unkeyed SHA-256).",
    )
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        # The table keeps the name it had when the model lived in ``workflows``: moving the app
        # moved no row (migrations audit 0001 / workflows 0003 move the model's state only).
        db_table = "workflows_auditevent"
        ordering = ["-seq"]
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
            # "was this command already applied?" (workflows.kinds.commands.applied_before):
            # asked once per step and per fan-out acknowledgement (#17)
            models.Index(
                F("workflow"),
                F("action"),
                KeyTransform("idempotency_key", "extra"),
                name="audit_workflow_key_idx",
            ),
        ]
        triggers = [
            pgtrigger.Protect(
                name="audit_append_only",
                operation=pgtrigger.Update | pgtrigger.Delete,
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} by {self.actor_name}"

    #: The page of the event's target, set by the pages that list events (``audit.views``);
    #: not stored.
    target_url: str | None = None

    @property
    def target_label(self) -> str:
        return f"{self.target_type}:{self.target_id}" if self.target_type else self.target_id


class ChainVerification(models.Model):
    """One run of :func:`audit.trail.verify_chain` asked for from the audit page ("Verify the
    chain now"). The request only creates this row; a worker walks the chain (it reads every
    event, which a web request must not do on a large log) and stores what it found. At most
    one is queued or running at a time."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    ok = models.BooleanField(null=True, blank=True)
    #: ``VerifyResult.as_dict()`` (events, first_broken, head_seq, checkpoints, problems, ...)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"chain verification #{self.pk} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED)
