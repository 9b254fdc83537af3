"""Reviewers read the audit log: API and page filters, key-set pagination, event detail with a
before/after diff, per-workflow timeline, verify endpoint."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit import trail
from audit.choices import AuditContext
from workflows.choices import AuditAction

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def _event(action="test.change", **kw):
    with transaction.atomic():
        return trail.record(action, context=kw.pop("context", AuditContext.CLI), **kw)


def test_api_lists_newest_first_with_keyset_pages(api, viewer):
    for i in range(7):
        _event(target_type="topic", target_id=f"t{i}", actor=None)
    first = api(viewer).get("/audit", action="test.", limit=3).json()
    assert [e["target_id"] for e in first["items"]] == ["t6", "t5", "t4"]
    second = api(viewer).get("/audit", action="test.", limit=3, before=first["next_before"]).json()
    assert [e["target_id"] for e in second["items"]] == ["t3", "t2", "t1"]
    last = api(viewer).get("/audit", action="test.", limit=3, before=second["next_before"]).json()
    assert [e["target_id"] for e in last["items"]] == ["t0"] and last["next_before"] is None


def test_api_filters_by_actor_kind_target_outcome_context_and_time(api, operator, approver):
    wf = approve(request_noop(operator), approver)
    _event(actor=None, actor_name="mallory", outcome="denied", target_type="topic", target_id="x")
    client = api(approver)
    assert {e["action"] for e in client.get("/audit", kind="noop_check").json()["items"]} >= {
        AuditAction.WORKFLOW_REQUESTED,
        AuditAction.WORKFLOW_APPROVED,
    }
    by_actor = client.get("/audit", actor="mallory").json()["items"]
    assert [e["outcome"] for e in by_actor] == ["denied"]
    assert len(client.get("/audit", target="topic:x").json()["items"]) == 1
    assert len(client.get("/audit", outcome="denied").json()["items"]) == 1
    assert all(e["context"] == "cli" for e in client.get("/audit", context="cli").json()["items"])
    timeline = client.get("/audit", workflow=wf.pk).json()["items"]
    assert {e["workflow_id"] for e in timeline} == {wf.pk}
    assert client.get("/audit", since="2999-01-01").json()["items"] == []
    assert client.get("/audit", until="2000-01-01").json()["items"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"since": "soon"},
        {"outcome": "meh"},
        {"context": "x"},
        {"workflow": "abc"},
        {"before": "-1"},
        {"limit": "x"},
        {"workflow": "99999999999999999999999"},
        {"since": "2026-11-24", "until": "2026-11-23"},
    ],
)
def test_api_bad_filters_are_400_invalid_request(api, viewer, params):
    response = api(viewer).get("/audit", **params)
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"


def test_verify_endpoint_reports_ok_events_and_first_broken(api, viewer):
    _event(actor=None)
    body = api(viewer).get("/audit/verify").json()
    assert body["ok"] is True and body["first_broken"] is None and body["events"] >= 1


def test_audit_page_filters_and_pages_on_the_server(client, viewer):
    for i in range(60):
        _event(action="test.page", target_id=f"p{i}", actor=None)
    client.force_login(viewer)
    html = client.get("/audit/?action=test.page").content.decode()
    assert "p59" in html and "p10" in html and "p9<" not in html and "Older →" in html
    older = html.split('href="?')[-1].split('"')[0].replace("&amp;", "&")
    page2 = client.get(f"/audit/?{older}").content.decode()
    assert "p9<" in page2 and "p59" not in page2


@pytest.mark.parametrize("query", ["?since=never", "?workflow=x", "?outcome=?", "?before=zz"])
def test_audit_page_bad_filters_never_500(client, viewer, query):
    client.force_login(viewer)
    assert client.get("/audit/" + query).status_code == 400


def test_since_after_until_is_said_and_one_day_is_the_whole_day(client, viewer):
    client.force_login(viewer)
    response = client.get("/audit/?since=2026-11-24&until=2026-11-23")
    assert response.status_code == 400 and "since is after until" in response.content.decode()
    event = _event(actor=None)
    day = event.created_at.date().isoformat()
    html = client.get(f"/audit/?since={day}&until={day}").content.decode()
    assert f'href="/audit/{event.seq}/"' in html


def test_event_detail_shows_a_before_after_diff(client, viewer):
    event = _event(
        actor=None,
        before={"state": "pending_approval", "gone": 1},
        after={"state": "approved", "new": [1, 2]},
    )
    client.force_login(viewer)
    html = client.get(f"/audit/{event.seq}/").content.decode()
    assert "<code>state</code>" in html and "pending_approval" in html and "approved" in html
    assert "removed" in html and "added" in html and event.hash in html


def test_workflow_timeline_lists_its_events_in_order(client, operator, approver):
    wf = approve(request_noop(operator), approver)
    client.force_login(operator)
    html = client.get(f"/workflows/{wf.pk}/").content.decode()
    order = [
        html.index(a)
        for a in (
            AuditAction.WORKFLOW_REQUESTED,
            AuditAction.WORKFLOW_APPROVED,
            AuditAction.WORKFLOW_READY,
        )
    ]
    assert order == sorted(order)
    assert "timeline" in client.get(f"/audit/?workflow={wf.pk}").content.decode()
