"""In Chromium, against the simulated cluster's real processes and a real worker: for each of
``enable_tiering``, ``expand_partitions``, ``shrink_partitions``, ``remote_purge`` and
``orphan_sweep``, an operator opens the request form as a user would (the topic page's button,
or the request form's kind list for the Spark-backed kinds), checks the request and submits it;
the workflow page shows the plan once the worker computed it (it reloads by itself); a second
user approves on the approval page; the workflow page follows it live to Succeeded.

One simulated cluster (remote expiration external, as the purge needs) and one worker serve the
whole module; every test sets up only what its kind needs (the Spark kinds: one dry run each,
the cheapest way the API tests do)."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from broker_agent.contract.choices import RemoteSegmentState, ReplicaState, TieredState
from spark_tasks.models import SparkJob
from tests import s3util
from tests.conftest import login
from workflows.choices import WorkflowState
from workflows.models import Workflow

from .conftest import spark_dry_run, wait_planned
from .tiering_sim import CLUSTER, register, sim_cluster, sync, tiered_topic, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOUR_MS = 3_600_000
RUN_TIMEOUT_MS = 180_000  # generous: a Spark-backed step spark-submits a job


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data", "--expiration", "external") as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def lab(sim, worker, settings, tmp_path):
    """The cluster registered in console (rows are flushed between tests) and a worker."""
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    register(sim)
    return sim


# --- browser steps ---------------------------------------------------------------------------


def _from_topic_page(page, topic: str, button: str) -> None:
    page.goto(f"/topics/{CLUSTER}/{topic}/")
    page.get_by_role("link", name=button).click()
    page.wait_for_url(re.compile(r"/workflows/new/\?"))


def _from_kind_list(page, label: str, **fields: object) -> None:
    page.goto("/workflows/new/")
    page.get_by_role("link", name=label).click()
    page.fill("#f-cluster", CLUSTER)
    for name, value in fields.items():
        page.fill(f"#f-{name}", str(value))
    page.get_by_role("button", name="Check request").click()
    page.get_by_test_id("target").wait_for()


def _submit(page, kind: str, reason: str, shows: str) -> Workflow:
    """On the request form: the request is checked (target, approvals; no plan), then
    submitted; the worker plans it and the workflow page, left alone, shows the plan."""
    expect(page.locator("section[aria-labelledby=pv-h]")).to_contain_text("approval")
    assert page.get_by_test_id("plan-hash").count() == 0
    page.fill("#f-reason", reason)
    page.get_by_test_id("submit-request").click()
    page.wait_for_url(re.compile(r"/workflows/\d+/$"))
    wf = wait_planned(Workflow.objects.get().pk)
    assert (wf.kind, wf.state) == (kind, WorkflowState.PENDING_APPROVAL), (
        wf.error_code,
        wf.error_message,
    )
    expect(page.get_by_test_id("plan-hash")).to_have_text(wf.plan_hash, timeout=30_000)
    expect(page.get_by_test_id("plan-actions")).to_contain_text(shows)
    return wf


def _approve(page, wf: Workflow, approver) -> None:
    """The second user opens the workflow, follows its review link and approves the plan."""
    page.context.clear_cookies()
    login(page, approver.username)
    page.goto(f"/workflows/{wf.pk}/")
    page.get_by_role("link", name="Review and approve…").click()
    page.wait_for_url(f"**/workflows/{wf.pk}/approve/")
    assert page.get_by_test_id("plan-hash").inner_text() == wf.plan_hash
    page.get_by_test_id("approve").click()
    page.wait_for_url(f"**/workflows/{wf.pk}/")


def _succeeded(page, timeout: float = RUN_TIMEOUT_MS) -> None:
    """The live region follows the run to Succeeded; then every step is done, polling stops."""
    live = page.locator("#wf-live")
    expect(live.get_by_test_id("wf-state")).to_have_text("Succeeded", timeout=timeout)
    steps = live.locator("tr[data-step]")
    n = steps.count()
    assert n >= 1
    expect(live).to_contain_text(f"{n} of {n} step")
    expect(steps.locator("td span.badge", has_text="succeeded")).to_have_count(n)
    expect(page.locator("#wf-live[hx-trigger]")).to_have_count(0)


def _request_and_approve(page, operator, approvers, open_form, kind: str, reason: str, shows: str):
    login(page, operator.username)
    open_form()
    wf = _submit(page, kind, reason, shows)
    for approver in approvers if isinstance(approvers, tuple) else (approvers,):
        _approve(page, wf, approver)
    return wf


# --- cluster set-up --------------------------------------------------------------------------


def _create(sim, topic: str, partitions: int) -> None:
    sim.controller.create_topic(topic, partitions, 3)
    wait_until(
        lambda: all(
            p.leader >= 0 and len(p.isr) == 3 for p in sim.controller.topic(topic).partitions
        ),
        30,
        what=f"{topic} online",
    )


def _dry_run(job: str, **arguments):
    return spark_dry_run(job, CLUSTER, **arguments)


def _exists(object_path: str) -> bool:
    return s3util.exists(object_path)


# --- one test per kind -----------------------------------------------------------------------


def test_enable_tiering_from_the_topic_page(page, lab, operator, approver):
    sim = lab
    tiered_topic(sim, "web.clicks", partitions=1, records=40)
    sim.cli("disable-tiering", "web.clicks", "--policy", "retain")
    sync()
    _request_and_approve(
        page,
        operator,
        approver,
        lambda: _from_topic_page(page, "web.clicks", "Re-enable tiering…"),
        "enable_tiering",
        "tier web.clicks again",
        shows="tiered_epoch",
    )
    _succeeded(page)
    assert page.locator("tr[data-broker]").count() == 3  # EnableRemoteTopic on every broker
    assert sim.controller.topic("web.clicks").tiered_state == TieredState.ENABLED
    assert page.console_errors == []


def test_expand_partitions_from_the_topic_page(page, lab, operator, approver):
    sim = lab
    _create(sim, "grow", 1)
    sync()
    _request_and_approve(
        page,
        operator,
        approver,
        lambda: _from_topic_page(page, "grow", "Expand partitions…"),
        "expand_partitions",
        "more consumers",
        shows='"new_partitions"',
    )
    _succeeded(page)
    expect(page.locator('tr[data-step="await_new_partitions"]')).to_contain_text("1 / 1 partitions")
    t = sim.controller.topic("grow")
    assert t.undeleted_partition_count == 2 and len(t.partitions) == 2
    assert page.console_errors == []


def test_shrink_partitions_from_the_topic_page_follows_the_drain(page, lab, operator, approver):
    sim = lab
    _create(sim, "fade", 1)
    sim.controller.alter_partition_count("fade", 2)
    wait_until(lambda: sim.partition("fade", 1).leader >= 0, 30, what="fade-1 online")
    leader = sim.partition("fade", 1).leader
    # the controller names the leader before that broker has applied the metadata: produce once
    # the leader itself reports the replica it leads, online
    wait_until(
        lambda: any(
            r.topic == "fade"
            and r.partition == 1
            and r.is_leader
            and r.state == ReplicaState.ONLINE
            for r in sim.agent(leader).snapshot().replicas
        ),
        30,
        what="fade-1 led by its leader",
    )
    t = sim.controller.topic("fade")
    end = (
        sim.agent(leader)
        .produce(
            "fade",
            1,
            [{"key": None, "value": f"v{i}"} for i in range(10)],
            undeleted_partition_count=t.undeleted_partition_count,
        )
        .log_end_offset
    )
    sync()
    _request_and_approve(
        page,
        operator,
        approver,
        lambda: _from_topic_page(page, "fade", "Shrink partitions…"),
        "shrink_partitions",
        "traffic went down",
        shows='"partitions_to_mark"',
    )
    # the live region shows the drain waiting on the marked partition's records
    live = page.locator("#wf-live")
    expect(live.get_by_test_id("wf-state")).to_have_text("Waiting", timeout=60_000)
    expect(live).to_contain_text("10 records left", timeout=60_000)
    expect(live.locator('tr[data-step="drain"]')).to_contain_text("0 / 10 records")
    sim.agent(leader).publish_log_start_offset("fade", 1, end)  # DeleteRecords
    _succeeded(page)
    assert [p.partition for p in sim.controller.topic("fade").partitions] == [0]
    assert page.console_errors == []


def test_remote_purge_of_a_reviewed_dry_run(page, lab, operator, approver, second_approver):
    sim = lab
    tiered_topic(sim, "fenced", partitions=1, records=60)
    sim.cli("disable-tiering", "fenced", "--policy", "delete")
    leader = sim.partition("fenced", 0).leader
    assert list(sim.agent(leader).inventory("fenced"))
    run = _dry_run(SparkJob.PURGE)
    _request_and_approve(
        page,
        operator,
        (approver, second_approver),  # as the delete policy that fenced the data
        lambda: _from_kind_list(
            page, "Purge remote segments (reviewed Spark plan)", spark_run=run.pk
        ),
        "remote_purge",
        "reclaim fenced segments",
        shows='"plan_sha256"',
    )
    _succeeded(page)
    after = list(sim.agent(leader).inventory("fenced"))
    assert all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in after)
    assert not any(_exists(s.object_path) for s in after)
    assert page.console_errors == []


def test_orphan_sweep_of_a_reviewed_dry_run(page, lab, operator, approver):
    sim = lab
    tiered_topic(sim, "kept", partitions=1, records=40)
    leader = sim.partition("kept", 0).leader
    referenced = list(sim.agent(leader).inventory("kept"))
    orphan = s3util.sibling(referenced[0].object_path, "orphan-0001.log")
    s3util.put(orphan, b"x" * 1000)
    now_ms = int(time.time() * 1000) + 2 * HOUR_MS  # the orphan is "older than 1 h" then
    run = _dry_run(SparkJob.ORPHANS, older_than="1h", now_ms=now_ms)
    _request_and_approve(
        page,
        operator,
        approver,
        lambda: _from_kind_list(
            page, "Sweep orphaned remote objects (reviewed Spark plan)", spark_run=run.pk
        ),
        "orphan_sweep",
        "sweep orphans",
        shows='"plan_sha256"',
    )
    _succeeded(page)
    assert not s3util.exists(orphan)
    assert all(_exists(s.object_path) for s in referenced)
    assert page.console_errors == []
