"""PostgreSQL refuses UPDATE and DELETE on audit rows, and the application's role holds no right
that could get around it; tampering by the owner behind its back is caught by ``verify_audit``:
edits, a chain re-computed without the audit key, a removed tail, a forged checkpoint."""

from __future__ import annotations

import io
import json

import pgtrigger
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, ProgrammingError, connection, transaction

from audit import checkpoints, trail
from audit.choices import AuditContext
from audit.keys import AuditKey, key_id_of, signing_key
from audit.models import AuditEvent
from audit.tasks import checkpoint_head
from audit.trail import verify_chain
from tests.conftest import TEST_APP_ROLE

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
    new_hash = trail.compute_hash(trail.event_payload(row), signing_key())
    with pgtrigger.ignore(TRIGGER):
        AuditEvent.objects.filter(pk=victim.pk).update(actor_name="mallory", hash=new_hash)
    broken = verify_chain().first_broken
    assert broken["seq"] == victim.seq + 1 and "prev_hash" in broken["reason"]


def test_verify_audit_head_detects_a_truncated_tail(events):
    head = f"{events[-1].seq}:{events[-1].hash}"
    call_command("verify_audit", "--head", head, stdout=io.StringIO())
    with pytest.raises(CommandError, match="missing or differs"):
        call_command("verify_audit", "--head", f"{events[-1].seq}:{'0' * 64}")


# --- the application role ---------------------------------------------------------------------

DENIED = r"permission denied|must be owner"


def test_the_app_role_can_append_to_the_audit_log_but_never_rewrite_it(events):
    """``grant_app_role``: INSERT and SELECT on the audit table, nothing that edits or removes."""
    role = TEST_APP_ROLE or "strata_test_app"
    attacks = [
        "UPDATE workflows_auditevent SET actor_name = 'mallory'",
        "DELETE FROM workflows_auditevent",
        "TRUNCATE workflows_auditevent CASCADE",
        "ALTER TABLE workflows_auditevent DISABLE TRIGGER ALL",
        "SET LOCAL pgtrigger.ignore = '{audit_append_only}'; "
        "UPDATE workflows_auditevent SET actor_name = 'mallory'",
    ]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL ROLE {role}")
            cursor.execute("SELECT current_user")
            assert cursor.fetchone()[0] == role
        appended = trail.record("test.as_app_role", context=AuditContext.CLI, actor=None)
        for statement in attacks:
            with (
                pytest.raises(ProgrammingError, match=DENIED),
                transaction.atomic(),
                connection.cursor() as cursor,
            ):
                cursor.execute(statement)
        with (
            pytest.raises(ProgrammingError, match=DENIED),
            pgtrigger.ignore(TRIGGER),
            transaction.atomic(),
        ):
            AuditEvent.objects.filter(pk=events[0].pk).update(outcome="failure")
    assert AuditEvent.objects.filter(actor_name="mallory").count() == 0
    assert AuditEvent.objects.count() == len(events) + 1
    assert appended.seq == events[-1].seq + 1
    assert verify_chain().ok


# --- what the owner can do, and verify_audit catches -----------------------------------------


def _rewrite_from(seq: int, key: AuditKey | None, change: dict | None = None) -> None:
    """Re-compute the chain from ``seq`` on, as an owner who disabled the trigger would,
    signing with ``key`` (None: plain SHA-256, the pre-key chain) and applying ``change`` to
    the event at ``seq``."""
    rows = list(AuditEvent.objects.filter(seq__gte=seq).order_by("seq").values())
    prev = AuditEvent.objects.filter(seq=seq - 1).values_list("hash", flat=True).first()
    prev = prev or trail.GENESIS_HASH
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks before ALTER
        cursor.execute("ALTER TABLE workflows_auditevent DISABLE TRIGGER ALL")
    for row in rows:
        if row["seq"] == seq and change:
            row.update(change)
        row["prev_hash"], row["key_id"] = prev, key.key_id if key else ""
        row["hash"] = prev = trail.compute_hash(trail.event_payload(row), key)
        AuditEvent.objects.filter(pk=row["id"]).update(
            **{k: row[k] for k in ("actor_name", "after", "prev_hash", "key_id")},
            hash=f"tmp-{row['id']}",  # hash is unique: free the old values first
        )
    for row in rows:
        AuditEvent.objects.filter(pk=row["id"]).update(hash=row["hash"])
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE workflows_auditevent ENABLE TRIGGER ALL")


def test_a_chain_re_computed_with_plain_sha256_is_reported(events):
    victim = events[2]
    _rewrite_from(victim.seq, None, {"actor_name": "mallory"})
    with pytest.raises(CommandError, match=f"event #{victim.seq} .*unkeyed event after keyed"):
        call_command("verify_audit")


def test_a_chain_re_computed_with_another_key_is_reported(events):
    guess = AuditKey(signing_key().key_id, b"not-the-audit-key-but-just-as-long-0123")
    _rewrite_from(events[1].seq, guess, {"after": {"n": 42}})
    with pytest.raises(CommandError, match=f"event #{events[1].seq} .*hash does not match"):
        call_command("verify_audit")
    own = AuditKey(key_id_of(b"x" * 40), b"x" * 40)
    _rewrite_from(events[1].seq, own)
    assert "not configured here" in verify_chain().first_broken["reason"]


def test_a_whole_chain_re_written_unkeyed_is_caught_by_the_checkpoint(events, settings, tmp_path):
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    assert checkpoint_head() == ("written", events[-1].seq)
    _rewrite_from(1, None, {"actor_name": "mallory"})  # no keyed event left to contradict it
    result = verify_chain()
    assert not result.ok and result.keyed_events == 0
    assert "signed checkpoint" in result.first_broken["reason"]
    assert result.first_broken["seq"] == events[-1].seq


def test_a_truncated_tail_is_reported_against_the_signed_checkpoint(events, settings, tmp_path):
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    assert checkpoint_head() == ("written", events[-1].seq)
    assert checkpoint_head() == ("unchanged", events[-1].seq)
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert f"matches 1 signed checkpoints, the latest at #{events[-1].seq}" in out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE workflows_auditevent DISABLE TRIGGER ALL")
        cursor.execute("DELETE FROM workflows_auditevent WHERE seq >= %s", [events[3].seq])
        cursor.execute("ALTER TABLE workflows_auditevent ENABLE TRIGGER ALL")
    with pytest.raises(CommandError, match=f"ends at #{events[2].seq} .*removed from its end"):
        call_command("verify_audit")
    assert checkpoint_head() == ("broken", None)  # nothing signed over a broken chain
    assert len(list(tmp_path.glob("[0-9]*.json"))) == 1


def test_a_forged_or_edited_checkpoint_is_reported(events, settings, tmp_path):
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    checkpoint_head()
    (path,) = tmp_path.glob("[0-9]*.json")
    doc = json.loads(path.read_text())
    doc["hash"] = "0" * 64
    path.write_text(json.dumps(doc))
    with pytest.raises(CommandError, match="signature does not match"):
        call_command("verify_audit")
    forger = AuditKey(key_id_of(b"f" * 40), b"f" * 40)
    doc = {"seq": 99, "hash": "1" * 64, "at": "2026-01-01T00:00:00+00:00", "key_id": forger.key_id}
    doc["signature"] = forger.sign(checkpoints.signed_fields(doc))
    path.write_text(json.dumps(doc))
    path.rename(tmp_path / "audit-checkpoint-000000000099.json")
    result = verify_chain()
    assert not result.ok and result.checkpoints == 0
    assert "not configured" in result.problems[0]


def test_checkpoints_are_off_without_a_key(events, settings, tmp_path):
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    settings.STRATA_AUDIT_KEYS = ""
    assert checkpoint_head() == ("off", None)
    assert not list(tmp_path.iterdir())


def test_without_the_key_the_chain_is_unverifiable_not_intact(events, settings):
    settings.STRATA_AUDIT_KEYS = ""
    with pytest.raises(CommandError, match=f"cannot be verified from event #{events[0].seq} on"):
        call_command("verify_audit")
    assert verify_chain().first_broken["unverifiable"] is True
