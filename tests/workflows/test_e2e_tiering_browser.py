"""In Chromium: an operator requests ``disable_tiering`` (plan preview first), a second user
approves on the approval page, and the workflow page shows it progress to success."""

from __future__ import annotations

import re

import pytest

from broker_agent.choices import TieredState
from tests.conftest import login
from workflows.models import Workflow

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
    plan_hash = page.get_by_test_id("plan-hash").inner_text()
    assert "new_tiered_epoch" in page.content()  # the plan is shown before submitting
    page.fill("#f-reason", "stop paying for remote storage")
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    wf = Workflow.objects.get()
    assert (wf.kind, wf.plan_hash, wf.state) == ("disable_tiering", plan_hash, "pending_approval")
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
