"""PostgreSQL refuses UPDATE and DELETE on audit rows; tampering behind its back is caught by
``verify_audit``."""

from __future__ import annotations

import io

import pgtrigger
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from audit.trail import verify_chain

pytestmark = pytest.mark.django_db

TRIGGER = "audit.AuditEvent:audit_append_only"


@pytest.fixture
def events() -> list[AuditEvent]:
    out = []
    for i in range(5):
        with transaction.atomic():
            out.append(
                trail.record(
                    "test.event",
                    context=AuditContext.CLI,
                    actor=None,
                    target_type="topic",
                    target_id=f"t{i}",
                    after={"n": i},
                )
            )
    return out


def test_update_of_an_audit_row_fails_in_postgresql(events):
    with pytest.raises(DatabaseError, match="Cannot update or delete"), transaction.atomic():
        AuditEvent.objects.filter(pk=events[0].pk).update(outcome="failure")
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE workflows_auditevent SET actor_name = 'mallory'")
    assert AuditEvent.objects.get(pk=events[0].pk).outcome == "success"


def test_delete_of_an_audit_row_fails_in_postgresql(events):
    with pytest.raises(DatabaseError, match="Cannot update or delete"), transaction.atomic():
        AuditEvent.objects.filter(pk=events[1].pk).delete()
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM workflows_auditevent WHERE id = %s", [events[1].pk])
    assert AuditEvent.objects.filter(pk=events[1].pk).exists()


def test_verify_audit_passes_on_an_intact_chain(events):
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert "Audit chain intact" in out.getvalue()


def test_a_row_altered_with_the_trigger_ignored_is_named_by_verify_audit(events):
    victim = events[2]
    with pgtrigger.ignore(TRIGGER):
        AuditEvent.objects.filter(pk=victim.pk).update(after={"n": 999})
    with pytest.raises(CommandError) as err:
        call_command("verify_audit")
    assert f"event #{victim.seq} " in str(err.value)
    assert "hash does not match" in str(err.value)
    assert verify_chain().first_broken["seq"] == victim.seq


def test_a_row_deleted_with_the_trigger_disabled_is_named_by_verify_audit(events):
    victim = events[3]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks before ALTER
        cursor.execute("ALTER TABLE workflows_auditevent DISABLE TRIGGER ALL")
        cursor.execute("DELETE FROM workflows_auditevent WHERE id = %s", [victim.pk])
        cursor.execute("ALTER TABLE workflows_auditevent ENABLE TRIGGER ALL")
    with pytest.raises(CommandError, match=f"event #{victim.seq + 1} "):
        call_command("verify_audit")
    assert "sequence gap" in verify_chain().first_broken["reason"]


def test_a_re_hashed_row_still_breaks_the_chain_at_the_next_event(events):
    """Re-computing the edited row's own hash is not enough: the next event points at the old."""
    victim = events[1]
    row = AuditEvent.objects.filter(pk=victim.pk).values().get()
    row["actor_name"] = "mallory"
    new_hash = trail.compute_hash(trail.event_payload(row))
    with pgtrigger.ignore(TRIGGER):
        AuditEvent.objects.filter(pk=victim.pk).update(actor_name="mallory", hash=new_hash)
    broken = verify_chain().first_broken
    assert broken["seq"] == victim.seq + 1 and "prev_hash" in broken["reason"]


def test_verify_audit_head_detects_a_truncated_tail(events):
    head = f"{events[-1].seq}:{events[-1].hash}"
    call_command("verify_audit", "--head", head, stdout=io.StringIO())
    with pytest.raises(CommandError, match="missing or differs"):
        call_command("verify_audit", "--head", f"{events[-1].seq}:{'0' * 64}")
