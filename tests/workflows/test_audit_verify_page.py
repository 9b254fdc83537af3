"""The audit page's "Verify the chain now" (issue #15): the request only creates a row (one
open at a time), a worker walks the chain, and the card shows intact or where it broke."""

from __future__ import annotations

import datetime as dt

import pgtrigger
import pytest
from django.db import transaction
from django.utils import timezone

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent, ChainVerification
from audit.tasks import verify_now

pytestmark = pytest.mark.django_db

TRIGGER = "audit.AuditEvent:audit_append_only"


@pytest.fixture
def events() -> list[AuditEvent]:
    out = []
    for i in range(3):
        with transaction.atomic():
            out.append(trail.record(f"test.e{i}", context=AuditContext.CLI, actor=None))
    return out


def _card(client) -> str:
    html = client.get("/audit/").content.decode()
    return html[html.index('data-testid="chain-verification"') :].split("</section>")[0]


def test_a_request_queues_one_verification_and_a_worker_reports_the_chain_intact(
    client, viewer, events
):
    client.force_login(viewer)
    assert "Not verified from this page yet" in _card(client)
    assert client.post("/audit/verify/").status_code == 302
    assert client.post("/audit/verify/").status_code == 302  # the open one, not a second
    [row] = ChainVerification.objects.all()
    assert row.state == ChainVerification.State.QUEUED and row.requested_by == viewer
    card = _card(client)
    assert "a worker is walking the chain" in card and "hx-trigger" in card
    assert verify_now(row.pk) == "ok"  # what the worker runs
    row.refresh_from_db()
    assert (row.state, row.ok, row.result["events"]) == ("done", True, AuditEvent.objects.count())
    card = _card(client)
    assert 'data-testid="chain-intact"' in card and "hx-trigger" not in card
    assert client.get(f"/audit/verify/{row.pk}/").status_code == 286  # polling stops


def test_an_edited_event_is_reported_where_the_chain_breaks(client, viewer, events):
    with pgtrigger.ignore(TRIGGER):
        AuditEvent.objects.filter(pk=events[1].pk).update(actor_name="mallory")
    client.force_login(viewer)
    client.post("/audit/verify/")
    row = ChainVerification.objects.get()
    assert verify_now(row.pk) == "broken"
    card = _card(client)
    assert 'data-testid="chain-broken"' in card
    assert f'href="/audit/{events[1].seq}/">#{events[1].seq}</a>' in card


def test_a_verification_whose_worker_died_does_not_block_the_next(client, viewer, events):
    lost = ChainVerification.objects.create(state=ChainVerification.State.RUNNING)
    ChainVerification.objects.filter(pk=lost.pk).update(
        requested_at=timezone.now() - dt.timedelta(hours=1)
    )
    client.force_login(viewer)
    client.post("/audit/verify/")
    lost.refresh_from_db()
    assert lost.state == ChainVerification.State.FAILED and "lost" in lost.error
    assert ChainVerification.objects.filter(state=ChainVerification.State.QUEUED).count() == 1


def test_verifying_needs_a_post_and_a_role(client, events):
    assert client.post("/audit/verify/").status_code in (302, 401, 403)  # anonymous: login
    assert not ChainVerification.objects.exists()
