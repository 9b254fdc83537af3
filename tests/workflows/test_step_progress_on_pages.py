"""A running workflow as the pages show it (issue #15): "Last error" holds errors only, a
step's failures read against their limit the same way on the list and the workflow page (not
runs over the limit: "19 / 5"), and the list follows open workflows by polling its partial,
which answers 286 once nothing on it can move."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from workflows import engine
from workflows.models import WorkflowStep

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


def _step_row(html: str, name: str) -> str:
    return html[html.index(f'data-step="{name}"') :].split("</tr>")[0]


def test_last_error_shows_errors_not_what_a_step_waits_for(client, operator, approver):
    """A gate's prompt ("Waiting for a confirmation.") sat in the Last error column."""
    gated = approve(request_noop(operator, "gated", mode="gate"), approver)
    engine.run(gated.pk)  # waits at its human gate
    gated.refresh_from_db()
    assert gated.state == "waiting" and gated.waiting_reason
    client.force_login(operator)
    live = client.get(f"/workflows/{gated.pk}/live/").content.decode()
    assert f"<strong>Waiting:</strong> {gated.waiting_reason}" in live
    last_error = re.findall(r"<td>([^<]*)</td>", _step_row(live, "confirm"))[-1]
    assert last_error == ""

    flaky = approve(request_noop(operator, "flaky", mode="flaky", brokers=1), approver)
    engine.run(flaky.pk)  # the first apply raises: retried later
    live = client.get(f"/workflows/{flaky.pk}/live/").content.decode()
    assert "simulated transient failure" in _step_row(live, "apply")


def _list_row(html: str, pk: int) -> str:
    return html[html.index(f">#{pk}<") :].split("</tr>")[0]


def test_failures_read_against_their_limit_the_same_on_list_and_page(client, operator, approver):
    """The page read "19 / 5": every run of a step (each re-check of a wait counts) over the
    limit of failures. Both pages now say how many runs failed and where the workflow fails."""
    wf = approve(request_noop(operator, "flaky", mode="flaky", brokers=1), approver)
    engine.run(wf.pk)  # the first apply raises: one failure, retried with backoff
    WorkflowStep.objects.filter(workflow=wf, name="apply").update(attempts=19)  # many re-checks
    client.force_login(operator)
    said = "1 failure, fails at 5</small>"
    row = _list_row(client.get("/workflows/").content.decode(), wf.pk)
    assert said in row and "19 / 5" not in row and ">19<" not in row
    live = client.get(f"/workflows/{wf.pk}/live/").content.decode()
    now_line = live[live.index("· now:") :].split("</p>")[0]
    assert said in now_line
    cells = re.findall(r'<td class="num">([^<]*)</td>', _step_row(live, "apply"))
    assert cells[1:] == ["19", "1 / 5"]  # runs; failures / their limit


def test_a_step_that_never_failed_shows_no_failures(client, operator, approver):
    gated = approve(request_noop(operator, "gated", mode="gate"), approver)
    engine.run(gated.pk)
    client.force_login(operator)
    assert 'data-testid="step-failures"' not in client.get("/workflows/").content.decode()
    assert 'data-testid="step-failures"' not in (
        client.get(f"/workflows/{gated.pk}/live/").content.decode()
    )


def test_the_list_polls_its_partial_while_a_workflow_is_open_and_gets_286_after(
    client, operator, approver
):
    wf = approve(request_noop(operator), approver)
    client.force_login(operator)
    page = client.get("/workflows/?state=open").content.decode()
    assert (
        '<section class="card" aria-label="Workflows" id="wf-list" hx-get="/workflows/?state=open"'
        ' hx-trigger="every 5s" hx-target="this" hx-swap="outerHTML">'
    ) in page
    poll = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "wf-list"}
    partial = client.get("/workflows/?state=open", **poll)
    html = partial.content.decode()
    assert partial.status_code == 200 and html.lstrip().startswith('<section class="card"')
    assert "<html" not in html and 'hx-trigger="every 5s"' in html and f">#{wf.pk}<" in html
    engine.run(wf.pk)  # it succeeds: nothing on the page can move any more
    final = client.get("/workflows/", **poll)
    html = final.content.decode()
    assert final.status_code == 286  # htmx stops polling, and swaps in the final rows
    assert "hx-trigger" not in html and '<span class="badge succeeded">' in _list_row(html, wf.pk)
    assert "hx-trigger" not in client.get("/workflows/").content.decode()


def test_the_list_partial_needs_a_role_like_the_page(client, operator):
    request_noop(operator)
    poll = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "wf-list"}
    assert client.get("/workflows/", **poll).status_code == 302  # signed out: to the login
    client.force_login(get_user_model().objects.create_user(username="no-role"))
    assert client.get("/workflows/", **poll).status_code == 403
