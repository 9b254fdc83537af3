"""Identical refused workflow actions are one audit event and a counted summary per window."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from audit.choices import AuditOutcome
from audit.denials import DENIAL_KEY_PREFIX, flush_repeated_denials
from audit.models import AuditEvent
from workflows.choices import AuditAction

from .conftest import request_noop

pytestmark = pytest.mark.django_db


def test_repeated_self_approvals_are_counted_not_written_one_by_one(api, admin, operator):
    wf = request_noop(admin)
    for _ in range(7):
        response = api(admin).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
        assert response.status_code == 403
    # A different refusal (another actor, another error) is not part of the count.
    other = api(operator).post(f"/workflows/{wf.pk}/approve", {"plan_hash": wf.plan_hash})
    assert other.status_code == 403

    denied = AuditEvent.objects.filter(
        action=AuditAction.WORKFLOW_APPROVED, outcome=AuditOutcome.DENIED
    ).order_by("seq")
    assert [(e.actor_name, e.extra["error"]) for e in denied] == [
        (admin.username, "SELF_APPROVAL_FORBIDDEN"),
        (operator.username, other.json()["error"]),
    ]

    r = redis.Redis.from_url(settings.REDIS_URL)
    for key in r.scan_iter(match=DENIAL_KEY_PREFIX + "open:*"):
        r.delete(key)  # the windows close
    assert flush_repeated_denials() == 1

    summary = denied.last()
    assert summary.actor_id == admin.pk and summary.workflow_id == wf.pk
    assert summary.extra["error"] == "SELF_APPROVAL_FORBIDDEN"
    assert summary.extra["repeats"] == 6 and summary.extra["first_seq"] == denied.first().seq
