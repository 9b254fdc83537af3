"""In Chromium: an operator checks and requests ``disable_tiering``; the workflow page shows the
plan once the worker computed it (it reloads by itself); a second user approves on the approval
page, and the workflow page shows it progress to success."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from broker_agent.contract.choices import TieredState
from tests.conftest import login
from workflows.choices import WorkflowState
from workflows.models import Workflow

from .conftest import wait_planned
from .tiering_sim import CLUSTER, register, sim_cluster, sync, tiered_topic

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data") as s:
        yield s


def test_operator_requests_disable_tiering_and_a_second_user_approves_it(
    browser, live_server, workflow_worker, sim, operator, approver
):
    workflow_worker()
    register(sim)
    tiered_topic(sim, "web.orders", partitions=2, records=100)
    sync()
    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, operator.username)
    page.goto(f"/workflows/new?kind=disable_tiering&cluster={CLUSTER}&topic=web.orders")
    expect(page.get_by_test_id("target")).to_have_text("topic:web.orders")  # checked, no plan
    page.fill("#f-reason", "stop paying for remote storage")
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    wf = wait_planned(Workflow.objects.get().pk)  # the worker plans it
    assert (wf.kind, wf.state) == ("disable_tiering", WorkflowState.PENDING_APPROVAL)
    plan_hash = wf.plan_hash
    # the page the operator was sent to shows the plan, without the operator reloading it
    expect(page.get_by_test_id("plan-hash")).to_have_text(plan_hash, timeout=30_000)
    expect(page.get_by_test_id("plan-actions")).to_contain_text("new_tiered_epoch")
    expect(page.get_by_test_id("plan-information")).to_contain_text("remote_bytes")
    ctx.clear_cookies()

    login(page, approver.username)
    page.goto(f"/workflows/{wf.pk}/approve/")
    assert page.get_by_test_id("plan-hash").inner_text() == plan_hash
    page.get_by_test_id("approve").click()
    page.wait_for_url(f"**/workflows/{wf.pk}/")
    page.get_by_test_id("wf-state").filter(has_text="Succeeded").wait_for(timeout=90_000)
    assert page.locator("tr[data-broker]").count() == 3  # one DisableRemoteTopic row per broker
    assert sim.controller.topic("web.orders").tiered_state == TieredState.DISABLED
    assert not errors
    ctx.close()
