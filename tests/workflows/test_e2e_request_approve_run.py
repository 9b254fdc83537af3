"""In Chromium: an operator checks the request on the form and submits it; the workflow page
shows it planning and reloads by itself once a worker planned it; another user approves on the
approval page, and the workflow page shows progress live until success. The workflows list
follows a run the same way; Reject needs a comment, Approve does not."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import login
from workflows.choices import WorkflowState
from workflows.models import Workflow

from .conftest import wait_planned

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_request_approve_and_watch_it_succeed(
    browser, live_server, workflow_worker, operator, approver
):
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, operator.username)
    page.goto("/workflows/new?kind=noop_check&cluster=lab&label=browser&brokers=3")
    # the form checks the request (target, approvals); it computes no plan
    expect(page.get_by_test_id("target")).to_have_text("noop:browser")
    assert page.get_by_test_id("plan-hash").count() == 0
    # the reason counts its characters against the limit the server enforces, as you type
    expect(page.locator("#f-reason-counter")).to_have_text("0 / 2,000 characters")
    page.fill("#f-reason", "browser self-test")
    expect(page.locator("#f-reason-counter")).to_have_text("17 / 2,000 characters")
    assert page.locator("#f-reason").get_attribute("maxlength") == "2000"
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    url = page.url
    wf = Workflow.objects.get()
    assert wf.state == WorkflowState.PLANNING and wf.plan_hash == ""
    # no worker runs yet: the page shows the workflow planning, without a plan
    expect(page.get_by_test_id("wf-state")).to_have_text("Planning")
    expect(page.get_by_test_id("planning")).to_be_visible()
    assert page.get_by_test_id("plan-hash").count() == 0

    workflow_worker()  # a worker plans it; the page, left alone, reloads to show the plan
    wf = wait_planned(wf.pk)
    assert wf.state == WorkflowState.PENDING_APPROVAL and len(wf.plan_hash) == 64
    expect(page.get_by_test_id("plan-hash")).to_have_text(wf.plan_hash, timeout=30_000)
    assert page.url == url
    expect(page.get_by_test_id("wf-state")).to_have_text("Pending approval")
    expect(page.get_by_test_id("plan-actions")).to_contain_text("apply@2")
    plan_hash = wf.plan_hash
    ctx.clear_cookies()

    login(page, approver.username)
    page.goto(f"/workflows/{wf.pk}/approve/")
    assert page.get_by_test_id("plan-hash").inner_text() == plan_hash
    page.get_by_test_id("approve").click()
    page.wait_for_url(f"**/workflows/{wf.pk}/")
    # the live panel polls until the workflow ends, then stops (286)
    page.get_by_test_id("wf-state").filter(has_text="Succeeded").wait_for(timeout=60_000)
    assert page.locator("tr[data-broker]").count() == 3
    assert page.locator("#wf-live[hx-trigger]").count() == 0
    assert not errors
    ctx.close()


def test_the_list_follows_a_run_and_stops_polling_once_it_ended(
    browser, live_server, operator, approver
):
    """The workflows list polls its partial while a workflow on it is open: the row goes from
    Waiting to Succeeded by itself, and the 286 that carried the final rows ended the polling."""
    from audit.choices import AuditContext
    from workflows import engine
    from workflows.actions import do_confirm_step

    from .conftest import approve, request_noop

    wf = approve(request_noop(operator, "listed", mode="gate"), approver)
    engine.run(wf.pk)  # waits at its human gate
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, operator.username)
    page.goto("/workflows/")
    badge = page.locator(f"#wf-list tr:has(a[href='/workflows/{wf.pk}/']) span.badge").first
    expect(badge).to_have_text("Waiting")
    expect(page.locator("#wf-list[hx-trigger]")).to_have_count(1)
    do_confirm_step(wf.pk, actor=operator, context=AuditContext.CLI)
    engine.run(wf.pk)  # the rest of the run, as a worker would
    expect(badge).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator("#wf-list[hx-trigger]")).to_have_count(0)
    assert page.locator("html").count() == 1  # the poll swapped the table, not a whole page in
    assert not errors
    ctx.close()


def test_reject_needs_a_comment_in_the_browser_and_approve_does_not(
    browser, live_server, operator, approver
):
    from .conftest import request_noop

    wf = request_noop(operator, "decide")
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    login(page, approver.username)
    page.goto(f"/workflows/{wf.pk}/approve/")
    page.get_by_test_id("reject").click()  # the browser refuses the empty comment
    assert page.evaluate("document.querySelector('#ap-comment').validity.valueMissing")
    assert page.url.endswith(f"/workflows/{wf.pk}/approve/")
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.PENDING_APPROVAL
    page.get_by_test_id("approve").click()  # approving needs no comment
    page.wait_for_url(f"**/workflows/{wf.pk}/")
    expect(page.get_by_test_id("my-decision")).to_contain_text("You approved this plan at")
    ctx.close()


def test_a_parameter_edited_after_the_check_waits_for_a_new_check(browser, live_server, operator):
    """ "Request" sends the checked parameters: seen under make run, choosing policy delete after
    the check and pressing Request asked for retain. Now an edit marks the check out of date and
    Request waits until Check request is pressed again."""
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    login(page, operator.username)
    page.goto("/workflows/new/?kind=noop_check&cluster=lab&label=edit&mode=plain")
    expect(page.get_by_test_id("checked-params")).to_contain_text("mode=plain")
    submit = page.get_by_test_id("submit-request")
    expect(submit).to_be_enabled()
    page.select_option("#f-mode", "gate")
    expect(submit).to_be_disabled()
    expect(page.locator("[data-stale-note]")).to_be_visible()
    page.get_by_role("button", name="Check request").click()
    expect(page.get_by_test_id("checked-params")).to_contain_text("mode=gate")
    expect(page.get_by_test_id("submit-request")).to_be_enabled()
    ctx.close()
