"""In Chromium, against the simulated cluster's real processes and a real worker: an operator
requests ``recover_log_dir`` (replace) for a failed disk, the workflow page shows the plan once
the worker computed it, another user approves, the operator
confirms the new disk at the human gate on the workflow page, and the page follows the
recovery live to success."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from broker_agent.contract.choices import LogDirState
from tests.conftest import login
from workflows.choices import WorkflowState
from workflows.models import Workflow

from .conftest import wait_planned
from .simcluster import Sim, sim_cluster, wait_plan_stable, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLUSTER = "browser"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Sim:
    with sim_cluster(tmp_path_factory.mktemp("sim-browser")) as s:
        s.controller.create_topic("orders", 2, 3)
        wait_until(
            lambda: all(len(p.created) == 3 for p in s.controller.topic("orders").partitions),
            15,
            "orders created",
        )
        s.produce("orders", [{"key": f"k{i}", "value": f"v{i}"} for i in range(50)])
        yield s


def test_operator_requests_approver_approves_operator_confirms_the_new_disk(
    browser, live_server, sim, workflow_worker, operator, approver
):
    workflow_worker()
    sim.register(CLUSTER)
    broker = 2
    name = sim.dir_of(broker, "orders", 1)
    sim.break_log_dir(broker, name)
    wait_plan_stable(
        "recover_log_dir",
        {"cluster": CLUSTER, "broker": broker, "log_dir": name, "mode": "replace"},
    )

    ctx = browser.new_context(base_url=live_server.url)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, operator.username)
    page.goto(
        f"/workflows/new?kind=recover_log_dir&cluster={CLUSTER}&broker={broker}"
        f"&log_dir={name}&mode=replace"
    )
    expect(page.get_by_test_id("target")).to_have_text(f"broker:{broker}")  # checked, no plan
    page.fill("#f-reason", "disk of broker 2 failed")
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    wf = wait_planned(Workflow.objects.get().pk)  # the worker plans it
    assert wf.state == WorkflowState.PENDING_APPROVAL, (wf.error_code, wf.error_message)
    plan_hash = wf.plan_hash
    # the page the operator was sent to shows the plan, without the operator reloading it
    expect(page.get_by_test_id("plan-hash")).to_have_text(plan_hash, timeout=30_000)
    expect(page.get_by_test_id("plan-actions")).to_contain_text(
        f"the worker restarts broker {broker}"
    )
    expect(page.get_by_test_id("plan-actions")).not_to_contain_text("LogDirReset")
    expect(page.get_by_test_id("plan-information")).to_contain_text("bytes_to_recreate")
    ctx.clear_cookies()

    login(page, approver.username)
    page.goto(f"/workflows/{wf.pk}/approve/")
    assert page.get_by_test_id("plan-hash").inner_text() == plan_hash
    page.get_by_test_id("approve").click()
    page.wait_for_url(f"**/workflows/{wf.pk}/")
    ctx.clear_cookies()

    login(page, operator.username)
    page.goto(f"/workflows/{wf.pk}/")
    confirm = page.get_by_test_id("confirm")
    confirm.wait_for(timeout=60_000)  # the live panel shows the gate once the cordon is done
    assert "Replace the disk" in page.locator("#wf-live").inner_text()
    sim.replace_disk(broker, name)
    with sim.agent(broker) as a:
        incarnation = a.incarnation()
    confirm.click()
    page.get_by_test_id("wf-state").filter(has_text="Succeeded").wait_for(timeout=120_000)
    # KIP-112: the dir came back because the runbook restarted the broker
    assert "succeeded" in page.locator('tr[data-step="restart_broker"]').inner_text()
    with sim.agent(broker) as a:
        assert a.incarnation() != incarnation

    row = page.locator('tr[data-step="recreate_replicas"]')
    assert "bytes" in row.inner_text() and "succeeded" in row.inner_text()
    assert page.locator("#wf-live[hx-trigger]").count() == 0  # polling stopped
    assert (
        "confirmed by otto-operator"
        in page.locator('tr[data-step="confirm_disk_replaced"]').inner_text()
    )
    assert sim.dir_state(broker, name) == LogDirState.ONLINE
    assert not errors
    ctx.close()
