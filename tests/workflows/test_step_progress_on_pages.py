"""A running workflow as the pages show it (issue #15): "Last error" holds errors only."""

from __future__ import annotations

import re

import pytest

from workflows import engine

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

    flaky = approve(request_noop(operator, "flaky", mode="flaky", partitions=1), approver)
    engine.run(flaky.pk)  # the first apply raises: retried later
    live = client.get(f"/workflows/{flaky.pk}/live/").content.decode()
    assert "simulated transient failure" in _step_row(live, "apply")
