"""The audit log is a linear SHA-256 hash chain written in the transaction of the change."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection, transaction

from audit import trail
from audit.choices import AuditContext
from audit.keys import signing_key
from audit.models import AuditEvent
from audit.trail import GENESIS_HASH, AuditError, compute_hash, event_payload, verify_chain
from workflows.models import Workflow

pytestmark = pytest.mark.django_db


def _record(action: str = "test.thing", **kw) -> AuditEvent:
    with transaction.atomic():
        return trail.record(action, context=AuditContext.CLI, actor=None, **kw)


def test_events_chain_each_hash_to_the_previous_one():
    start = AuditEvent.objects.count()
    events = [_record(target_type="topic", target_id=f"t{i}", after={"i": i}) for i in range(5)]
    assert [e.seq for e in events] == list(range(start + 1, start + 6))
    for prev, event in itertools.pairwise(events):
        assert event.prev_hash == prev.hash
    first = AuditEvent.objects.get(seq=1)
    assert first.prev_hash == GENESIS_HASH
    row = AuditEvent.objects.filter(pk=events[-1].pk).values().get()
    assert compute_hash(event_payload(row), signing_key()) == events[-1].hash
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
def test_record_outside_a_transaction_is_refused_in_autocommit():
    with pytest.raises(AuditError):
        trail.record("test.thing", context=AuditContext.CLI)
    assert not AuditEvent.objects.filter(action="test.thing").exists()


def test_record_without_a_context_is_refused():
    with pytest.raises(AuditError), transaction.atomic():
        trail.record("test.thing")


def test_a_failing_audit_write_rolls_the_change_back(operator):
    """Fail closed: no audit, no change."""
    before = Workflow.objects.count()
    with pytest.raises(ValueError), transaction.atomic():
        Workflow.objects.create(
            kind="noop_check", cluster="c", target="noop:x", plan_hash="h", requester=operator
        )
        trail.record("test.bad", context=AuditContext.CLI, after={"x": float("nan")})
    assert Workflow.objects.count() == before


def test_json_values_hash_the_same_after_a_round_trip_through_jsonb():
    value = {
        "float": 1.0,
        "big": 1e20,
        "neg0": -0.0,
        "frac": 0.1,
        "nested": [{"b": 2, "a": 1}],
        "text": "ümlaut ✓",
        "nul": "a\x00b",
    }
    event = _record(after=value, extra={"when": "x"})
    row = AuditEvent.objects.filter(pk=event.pk).values().get()
    assert compute_hash(event_payload(row), signing_key()) == event.hash


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_produce_one_linear_chain():
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(15):
                with transaction.atomic():
                    trail.record(
                        "test.concurrent", context=AuditContext.WORKER, target_id=f"{n}-{i}"
                    )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert AuditEvent.objects.filter(action="test.concurrent").count() == 60
    result = verify_chain()
    assert result.ok and result.events == len(seqs)
