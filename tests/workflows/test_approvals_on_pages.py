"""Approvals as the pages show them (issue #15): the list and the workflow page count the same
approvals (``Workflow.counted_approvals``) in every state, with a bounded number of queries; a
user who decided sees when, not the buttons again; a rejection needs a comment in the browser
too."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.choices import AuditContext
from workflows import engine
from workflows.actions import do_reject_workflow
from workflows.models import Approval, Workflow

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def _aged(wf: Workflow, settings, *, workflow_too: bool = False) -> None:
    """Age the workflow's approvals past the TTL (and its approval moment, with them)."""
    past = dt.timedelta(hours=settings.STRATA_APPROVAL_TTL_HOURS, minutes=5)
    for a in Approval.objects.filter(workflow=wf):
        Approval.objects.filter(pk=a.pk).update(created_at=a.created_at - past)
    if workflow_too:
        Workflow.objects.filter(pk=wf.pk).update(approved_at=wf.approved_at - past)


def _shown_on_page(client, wf: Workflow) -> str:
    page = client.get(f"/workflows/{wf.pk}/").content.decode()
    return re.search(r"<dt>Approvals</dt><dd>(\d+ / \d+)</dd>", page).group(1)


def _shown_in_list(listing: str, wf: Workflow) -> str:
    row = listing[listing.index(f">#{wf.pk}<") :].split("</tr>")[0]
    return re.findall(r'<td class="num">(\d+ / \d+)</td>', row)[0]


def test_list_and_page_count_only_the_approvals_that_count_in_every_state(
    client, operator, approver, second_approver, admin, settings
):
    """The list counted every decision: "5 / 1" with voided approvals, "2 / 2" on a rejected
    workflow whose page said 1 / 2. Both now count what the approval rule counts."""
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    expected = {}

    # pending: one approval voided by a plan change, one that counts
    voided = request_noop(operator, "voided")
    approve(voided, approver)
    Approval.objects.filter(workflow=voided).update(
        voided_at=timezone.now(), void_reason="plan_changed"
    )
    approve(voided, second_approver)
    expected[voided.pk] = "1 / 2"

    # pending: an approval that expired (not yet voided: nobody decided since)
    expired = request_noop(operator, "expired")
    approve(expired, approver)
    _aged(expired, settings)
    expected[expired.pk] = "0 / 2"

    # rejected after one approval: the approval counted, the rejection does not
    rejected = request_noop(operator, "rejected")
    approve(rejected, approver)
    do_reject_workflow(rejected.pk, actor=admin, comment="not now", context=AuditContext.CLI)
    expected[rejected.pk] = "1 / 2"

    # succeeded a day ago: its approvals counted when it was approved, and still read so
    ran = request_noop(operator, "ran")
    approve(ran, approver)
    approve(ran, second_approver)
    engine.run(ran.pk)
    ran.refresh_from_db()
    assert ran.state == "succeeded"
    _aged(ran, settings, workflow_too=True)
    expected[ran.pk] = "2 / 2"

    client.force_login(operator)
    listing = client.get("/workflows/").content.decode()
    for pk, shown in expected.items():
        wf = Workflow.objects.get(pk=pk)
        assert _shown_on_page(client, wf) == shown, (wf.target, wf.state)
        assert _shown_in_list(listing, wf) == shown, (wf.target, wf.state)
    # the API says the same
    api = client.get("/api/v1/workflows").json()["items"]
    assert {w["id"]: f"{w['approvals_valid']} / {w['approvals_required']}" for w in api} == (
        expected
    )
    # whose approvals read as they were when it was approved, not expired a day later
    assert [a["voided"] for a in next(w for w in api if w["id"] == ran.pk)["approvals"]] == [
        False,
        False,
    ]
    # and the page's decision table names the expired approval as such
    page = client.get(f"/workflows/{expired.pk}/").content.decode()
    assert "<td>expired</td>" in page


def test_the_list_counts_approvals_without_a_query_per_row(client, operator, approver):
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/workflows/").status_code == 200
        return len(ctx.captured_queries)

    client.force_login(operator)
    approve(request_noop(operator, "first"), approver)
    few = queries()
    for i in range(6):
        wf = request_noop(operator, f"more-{i}")
        if i % 2:
            approve(wf, approver)
    assert queries() == few


def test_after_deciding_the_workflow_page_says_when_instead_of_the_button(
    client, operator, approver, second_approver, settings
):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    client.force_login(approver)
    assert "Review and approve" in client.get(f"/workflows/{wf.pk}/").content.decode()
    approve(wf, approver)
    page = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert "Review and approve" not in page
    mine = Approval.objects.get(workflow=wf, approver=approver)
    when = mine.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")
    assert re.search(
        rf'data-testid="my-decision">You approved this plan at <time [^>]*>{when}<', page
    )
    approve_page = client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    assert 'data-testid="already-approved">You approved this plan at' in approve_page
    assert 'data-testid="approve"' not in approve_page
    # another approver still decides; the requester never does
    client.force_login(second_approver)
    assert "Review and approve" in client.get(f"/workflows/{wf.pk}/").content.decode()
    client.force_login(operator)
    page = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert "Review and approve" not in page and 'data-testid="my-decision"' not in page


def test_an_approver_whose_approval_expired_is_offered_the_decision_again(
    client, operator, approver, settings
):
    """The action lets them decide again (it voids the expired approval first): the pages offer
    it instead of hiding the button behind a decision that no longer stands."""
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    approve(wf, approver)
    _aged(wf, settings)
    client.force_login(approver)
    assert "Review and approve" in client.get(f"/workflows/{wf.pk}/").content.decode()
    assert 'data-testid="approve"' in client.get(f"/workflows/{wf.pk}/approve/").content.decode()


def test_a_rejecter_sees_when_they_rejected(client, operator, approver):
    wf = request_noop(operator)
    do_reject_workflow(wf.pk, actor=approver, comment="wrong topic", context=AuditContext.CLI)
    client.force_login(approver)
    page = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert 'data-testid="my-decision">You rejected this plan at' in page


def test_the_reject_comment_is_required_in_the_browser_but_not_to_approve(
    client, operator, approver
):
    wf = request_noop(operator)
    client.force_login(approver)
    page = client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    textarea = re.search(r"<textarea [^>]*>", page).group(0)
    assert 'name="comment"' in textarea and " required" in textarea
    approve_button = re.search(r'<button [^>]*data-testid="approve"[^>]*>', page).group(0)
    assert "formnovalidate" in approve_button  # approving needs no comment
    reject_button = re.search(r'<button [^>]*data-testid="reject"[^>]*>', page).group(0)
    assert "formnovalidate" not in reject_button
