"""Workflow pages: list, detail with live progress (286 when done), approval page, request form
with a request check; role checks; never a 500 on bad input."""

from __future__ import annotations

import re

import pytest

from workflows import engine
from workflows.choices import WorkflowState
from workflows.models import Workflow

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def test_list_shows_open_and_past_workflows_with_filters(client, operator, approver):
    open_wf = request_noop(operator, "open-one")
    done = approve(request_noop(operator, "done-one"), approver)
    engine.run(done.pk)
    client.force_login(operator)
    html = client.get("/workflows/?state=open").content.decode()
    assert f"#{open_wf.pk}<" in html and f"#{done.pk}<" not in html
    html = client.get("/workflows/?state=past").content.decode()
    assert f"#{done.pk}<" in html and f"#{open_wf.pk}<" not in html
    assert "Page 1 of 1" in client.get("/workflows/?kind=noop_check").content.decode()
    # the list refreshes itself (htmx) while a workflow on it is open, and only then
    live = 'id="wf-list" hx-get="/workflows/?state=open" hx-trigger="every 5s" hx-target="this"'
    assert live in client.get("/workflows/?state=open").content.decode()
    assert 'hx-trigger="every' not in client.get("/workflows/?state=past").content.decode()


@pytest.mark.parametrize(
    "query", ["?state=bogus", "?page=999", "?page=x", "?cluster=" + "x" * 400, "?requester=%00"]
)
def test_bad_list_filters_never_500(client, viewer, query):
    client.force_login(viewer)
    assert client.get("/workflows/" + query).status_code in (200, 400)


def test_detail_shows_plan_hash_requester_reason_and_decisions(client, operator, approver):
    wf = approve(request_noop(operator, reason="testing the framework"), approver)
    client.force_login(operator)
    html = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert wf.plan_hash in html and "testing the framework" in html
    assert operator.username in html and approver.username in html
    assert 'hx-trigger="every 2s"' in html  # approved: the engine is about to run it


def test_live_partial_polls_while_active_and_answers_286_when_done(client, operator, approver):
    wf = approve(request_noop(operator), approver)
    client.force_login(operator)
    assert client.get(f"/workflows/{wf.pk}/live/").status_code == 200
    engine.run(wf.pk)
    response = client.get(f"/workflows/{wf.pk}/live/")
    assert response.status_code == 286
    html = response.content.decode()
    assert "hx-trigger" not in html and 'data-broker="1"' in html
    assert 'aria-valuenow="100"' in html


def test_a_pending_workflow_is_not_polled(client, operator):
    wf = request_noop(operator)
    client.force_login(operator)
    assert "hx-trigger" not in client.get(f"/workflows/{wf.pk}/").content.decode()


def test_approval_page_approves_with_the_shown_hash(client, operator, approver):
    wf = request_noop(operator)
    client.force_login(approver)
    page = client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    assert wf.plan_hash in page and 'data-testid="approve"' in page
    response = client.post(
        f"/workflows/{wf.pk}/approve/", {"decision": "approve", "plan_hash": wf.plan_hash}
    )
    assert response.status_code == 302
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.APPROVED


def test_after_approving_the_page_says_so_instead_of_offering_approve_again(
    client, operator, approver, settings
):
    settings.STRATA_APPROVAL_POLICY = {"noop_check": {"approvals": 2}}
    wf = request_noop(operator)
    client.force_login(approver)
    client.post(f"/workflows/{wf.pk}/approve/", {"decision": "approve", "plan_hash": wf.plan_hash})
    page = client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    assert 'data-testid="already-approved"' in page and "1 of 2 approvals" in page
    assert 'data-testid="approve"' not in page


def test_rejecting_on_the_page_without_a_comment_is_refused_with_a_message(
    client, operator, approver
):
    wf = request_noop(operator)
    client.force_login(approver)
    response = client.post(
        f"/workflows/{wf.pk}/approve/",
        {"decision": "reject", "plan_hash": wf.plan_hash, "comment": ""},
        follow=True,
    )
    assert "comment is required to reject" in response.content.decode()
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.PENDING_APPROVAL


def test_approval_page_refuses_self_approval_with_a_message(client, admin):
    wf = request_noop(admin)
    client.force_login(admin)
    assert (
        'data-testid="approve"' not in client.get(f"/workflows/{wf.pk}/approve/").content.decode()
    )
    response = client.post(
        f"/workflows/{wf.pk}/approve/",
        {"decision": "approve", "plan_hash": wf.plan_hash},
        follow=True,
    )
    assert "SELF_APPROVAL_FORBIDDEN" in response.content.decode()
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.PENDING_APPROVAL


def test_stale_hash_on_the_approval_page_is_refused(client, operator, approver):
    wf = request_noop(operator)
    client.force_login(approver)
    response = client.post(
        f"/workflows/{wf.pk}/approve/", {"decision": "approve", "plan_hash": "0" * 64}, follow=True
    )
    assert "PLAN_CHANGED" in response.content.decode()


def test_cancel_and_confirm_forms(client, operator, approver):
    wf = request_noop(operator)
    client.force_login(operator)
    html = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert "Cancel workflow" in html
    client.post(f"/workflows/{wf.pk}/cancel/", {"comment": "oops"})
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.CANCELLED
    gated = approve(request_noop(operator, "gated", mode="gate"), approver)
    engine.run(gated.pk)
    html = client.get(f"/workflows/{gated.pk}/").content.decode()
    assert 'data-testid="confirm"' in html
    client.post(f"/workflows/{gated.pk}/confirm/")
    assert Workflow.objects.get(pk=gated.pk).state == WorkflowState.RUNNING


def test_a_waiting_workflow_shows_the_stop_form_to_admins_only(client, operator, approver, admin):
    gated = approve(request_noop(operator, "gated", mode="gate"), approver)
    engine.run(gated.pk)  # waits at its human gate: started, not cancellable by its requester
    client.force_login(operator)
    html = client.get(f"/workflows/{gated.pk}/").content.decode()
    assert "Cancel workflow" not in html and "data-stop" not in html
    client.force_login(admin)
    html = client.get(f"/workflows/{gated.pk}/").content.decode()
    assert "data-stop" in html and "Why (required)" in html
    response = client.post(f"/workflows/{gated.pk}/cancel/", {"comment": "not needed"}, follow=True)
    assert f"Workflow #{gated.pk} cancelled." in response.content.decode()
    gated.refresh_from_db()
    assert gated.state == WorkflowState.CANCELLED
    assert set(gated.steps.values_list("state", flat=True)) <= {"succeeded", "cancelled"}


def test_viewer_sees_no_action_buttons_and_is_refused(client, operator, viewer):
    wf = request_noop(operator)
    client.force_login(viewer)
    html = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert "Cancel workflow" not in html and "Review and approve" not in html
    response = client.post(f"/workflows/{wf.pk}/cancel/", follow=True)
    assert "FORBIDDEN" in response.content.decode()
    assert Workflow.objects.get(pk=wf.pk).state == WorkflowState.PENDING_APPROVAL


def test_request_form_checks_the_request_then_a_worker_plans_it(client, operator):
    client.force_login(operator)
    page = client.get("/workflows/new/?kind=noop_check&cluster=lab&label=orders&brokers=3")
    html = page.content.decode()
    assert page.status_code == 200 and 'data-testid="target">noop:orders<' in html
    assert "a worker computes the plan" in html
    # the reason field stops where the server does and counts down to it (static/strata.js)
    assert 'name="reason" rows="2" cols="60" required maxlength="2000" data-counter>' in html
    assert "/static/strata.js" in html
    response = client.post(
        "/workflows/new/",
        {
            "kind": "noop_check",
            "cluster": "lab",
            "label": "orders",
            "brokers": "3",
            "mode": "plain",
            "reason": "check",
        },
    )
    assert response.status_code == 302
    wf = Workflow.objects.get()
    assert wf.state == WorkflowState.PLANNING and wf.reason == "check"
    detail = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert 'data-testid="planning"' in detail and "?was=planning" in detail
    engine.run(wf.pk)  # the worker's planning
    live = client.get(f"/workflows/{wf.pk}/live/?was=planning", HTTP_HX_REQUEST="true")
    assert live.headers.get("HX-Refresh") == "true"  # the page reloads to show the plan
    detail = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert "apply@2" in detail and 'data-testid="information-age"' in detail


def test_request_form_without_slash_from_console_links_works(client, operator):
    client.force_login(operator)
    response = client.get("/workflows/new?kind=noop_check&cluster=lab&label=x", follow=True)
    assert response.status_code == 200 and 'data-testid="target"' in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "?kind=nope",
        "?kind=noop_check&cluster=lab",
        "?kind=noop_check&cluster=lab&label=x&brokers=-1",
        "?kind=noop_check&cluster=%00&label=x",
        "?kind=" + "k" * 500,
    ],
)
def test_request_form_shows_refusals_without_500(client, operator, query):
    client.force_login(operator)
    response = client.get("/workflows/new/" + query)
    assert response.status_code == 400
    assert not Workflow.objects.exists()


def test_request_form_post_conflict_is_shown_with_a_link_to_the_open_workflow(client, operator):
    open_wf = request_noop(operator, "orders")
    client.force_login(operator)
    response = client.post(
        "/workflows/new/",
        {"kind": "noop_check", "cluster": "lab", "label": "orders", "reason": "x"},
    )
    html = response.content.decode()
    assert response.status_code == 409 and "WORKFLOW_CONFLICT" in html
    assert f'href="/workflows/{open_wf.pk}/" data-testid="conflict-link"' in html


def test_request_check_names_the_open_workflow_with_a_link_to_it(client, operator):
    """Conflicts named "Workflow #7" as plain text: the check links it, before any POST."""
    open_wf = request_noop(operator, "orders")
    client.force_login(operator)
    html = client.get("/workflows/new/?kind=noop_check&cluster=lab&label=orders").content.decode()
    assert f'Workflow <a href="/workflows/{open_wf.pk}/">#{open_wf.pk}</a>' in html
    assert "is already open on this target" in html


@pytest.mark.parametrize(
    "url",
    [
        "/workflows/0/",
        "/workflows/99999999999999999999/",
        "/workflows/5/live/",
        "/audit/99999999999999999999/",
    ],
)
def test_unknown_ids_are_404_not_500(client, viewer, url):
    client.force_login(viewer)
    assert client.get(url).status_code == 404


def test_actions_on_pages_need_post(client, operator):
    wf = request_noop(operator)
    client.force_login(operator)
    assert client.get(f"/workflows/{wf.pk}/cancel/").status_code == 405


def test_the_live_poll_also_refreshes_the_request_state_and_the_timeline(
    client, operator, approver
):
    """The page's top card and timeline followed a run only on reload ("Approved" beside a
    succeeded progress panel): the live partial now re-sends both out of band."""
    wf = approve(request_noop(operator), approver)
    client.force_login(operator)
    page = client.get(f"/workflows/{wf.pk}/").content.decode()
    assert 'id="wf-request-state"' in page and 'id="wf-timeline"' in page
    assert "hx-swap-oob" not in page  # only poll answers swap out of band
    engine.run(wf.pk)
    live = client.get(f"/workflows/{wf.pk}/live/", HTTP_HX_REQUEST="true")
    assert live.status_code == 286
    html = live.content.decode()
    state = html[html.index('id="wf-request-state"') :]
    assert state.startswith('id="wf-request-state" class="badge succeeded" hx-swap-oob="true">')
    timeline = html[html.index('<ol class="timeline" id="wf-timeline" hx-swap-oob="true">') :]
    assert "workflow.succeeded" in timeline
    # and with them the ages of those two panels, so neither says it is older than it is
    for age in ("wf-request-age", "wf-timeline-age"):
        assert f'<span id="{age}" hx-swap-oob="true"><small class="age" data-age="' in html


def test_the_list_counts_approvals_as_the_workflow_page_does(client, operator, approver, admin):
    """The list showed every decision ("2 / 2" on a rejected workflow whose page said 0 / 1):
    it now counts what the page counts, the approvals valid for the current plan."""
    from audit.choices import AuditContext
    from workflows.actions import do_reject_workflow

    pending = request_noop(operator, "pending")
    approved = approve(request_noop(operator, "approved"), approver)
    rejected = approve(request_noop(operator, "rejected", brokers=3), approver)
    Workflow.objects.filter(pk=rejected.pk).update(state=WorkflowState.PENDING_APPROVAL)
    do_reject_workflow(rejected.pk, actor=admin, comment="not now", context=AuditContext.CLI)
    client.force_login(operator)
    listing = client.get("/workflows/").content.decode()
    for wf in (pending, approved, rejected):
        wf.refresh_from_db()
        page = client.get(f"/workflows/{wf.pk}/").content.decode()
        shown = re.search(r"<dt>Approvals</dt><dd>(\d+ / \d+)</dd>", page).group(1)
        row = listing[listing.index(f">#{wf.pk}<") :].split("</tr>")[0]
        assert f'<td class="num">{shown}</td>' in row, (wf.state, shown, row)


def test_request_form_suggests_the_synced_inventory(client, operator):
    from console.models import Broker, Cluster, LogDir, Topic

    lab = Cluster.objects.create(name="lab", controller_url="http://127.0.0.1:1", secret_ref="x")
    Cluster.objects.create(name="prod", controller_url="http://127.0.0.1:2", secret_ref="x")
    b1 = Broker.objects.create(cluster=lab, broker_id=1)
    b2 = Broker.objects.create(cluster=lab, broker_id=2)
    LogDir.objects.create(cluster=lab, broker=b1, name="logdir-0")
    LogDir.objects.create(cluster=lab, broker=b2, name="logdir-9")
    Topic.objects.create(
        cluster=lab, name="orders", initial_partition_count=1, undeleted_partition_count=1
    )
    client.force_login(operator)
    html = client.get("/workflows/new/?kind=recover_log_dir&cluster=lab&broker=1").content.decode()

    def options(name: str) -> list[str]:
        block = html[html.index(f'data-testid="suggest-{name}"') :].split("</datalist>")[0]
        return re.findall(r'<option value="([^"]*)">', block)

    assert options("cluster") == ["lab", "prod"]
    assert options("broker") == ["1", "2"]
    assert options("log_dir") == ["logdir-0"]  # of the chosen broker
    assert 'list="dl-log_dir"' in html
    # a yes / no field (move_replicas, #36) is a choice of false / true, its default chosen
    assert (
        '<select id="f-move_replicas" name="move_replicas"><option value="false" selected>'
        'false</option><option value="true">true</option></select>'
    ) in html
    chosen = client.get("/workflows/new/?kind=recover_log_dir&move_replicas=true").content
    assert b'<option value="true" selected>true</option>' in chosen
    html = client.get("/workflows/new/?kind=disable_tiering&cluster=lab").content.decode()
    assert options("topic") == ["orders"]


def test_a_reason_over_the_limit_is_refused_by_the_server_too(client, operator):
    client.force_login(operator)
    body = {"kind": "noop_check", "cluster": "lab", "label": "o", "brokers": "3"}
    response = client.post("/workflows/new/", {**body, "reason": "x" * 2001})
    assert response.status_code in (200, 400)
    assert not Workflow.objects.exists()
    assert client.post("/workflows/new/", {**body, "reason": "x" * 2000}).status_code == 302


def test_the_list_links_each_target_to_its_page(client, viewer, operator):
    """The target column was plain text: a topic links to its page, a broker to the brokers
    page of its cluster, a target with no page (a self-test label) stays text."""
    topic, broker, _label = (request_noop(operator, name) for name in ("a", "b", "c"))
    Workflow.objects.filter(pk=topic.pk).update(target="topic:orders")
    Workflow.objects.filter(pk=broker.pk).update(target="broker:2")
    client.force_login(viewer)
    html = client.get("/workflows/").content.decode()
    assert '<a href="/topics/lab/orders/">topic:orders</a>' in html
    assert '<a href="/brokers/?cluster=lab">broker:2</a>' in html
    assert "<td>noop:c</td>" in html
