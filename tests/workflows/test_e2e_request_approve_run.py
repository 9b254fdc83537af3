"""In Chromium: an operator requests through the form (plan preview first), another user
approves on the approval page, and the workflow page shows progress live until success."""

from __future__ import annotations

import re

import pytest

from tests.conftest import login
from workflows.models import Workflow

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_request_approve_and_watch_it_succeed(
    browser, live_server, workflow_worker, operator, approver
):
    workflow_worker()
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, operator.username)
    page.goto("/workflows/new?kind=noop_check&cluster=lab&topic=browser&partitions=3")
    plan_hash = page.get_by_test_id("plan-hash").inner_text()
    page.fill("#f-reason", "browser self-test")
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    wf = Workflow.objects.get()
    assert wf.plan_hash == plan_hash and wf.state == "pending_approval"
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
