"""In Chromium: long unbroken values (a 2,000-character reason, a 249-character topic, a
150-character user name) wrap inside their boxes. No page grows wider than the window, and no
tile, card or table cell runs into its neighbour or scrolls sideways (issue #15: the workflow
page was 20,903 px wide, and on an audit event the target ran into the workflow tile)."""

from __future__ import annotations

import pytest
from django.db import transaction

from tests.conftest import login
from tests.workflows.conftest import request_noop

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTH = 1440
LONG_TOPIC = "t" * 249  # Kafka's longest topic name
LONG_REASON = "x" * 2000  # the longest reason the request form takes

#: Elements in main whose content is wider than their box (form fields scroll by nature).
OVERFLOWING = """() => [...document.querySelectorAll("main *")]
  .filter(e => !["INPUT", "TEXTAREA", "SELECT"].includes(e.tagName))
  .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth} > ${e.clientWidth} px`)"""


@pytest.fixture
def long_values(operator):
    from audit import trail

    wf = request_noop(operator, LONG_TOPIC, reason=LONG_REASON)
    with transaction.atomic():
        event = trail.record(
            "topic.tiering_disabled",
            actor=None,
            actor_name="a" * 150,  # Django's longest user name
            context="cli",
            target_type="topic",
            target_id=f"local/{LONG_TOPIC}",
            workflow=wf,
            after={"reason": LONG_REASON},
        )
    return wf, event


def test_long_values_wrap_inside_their_boxes(browser, live_server, operator, long_values):
    wf, event = long_values
    ctx = browser.new_context(base_url=live_server.url, viewport={"width": WIDTH, "height": 900})
    page = ctx.new_page()
    login(page, operator.username)
    for path in (
        f"/workflows/{wf.pk}/",
        "/workflows/",
        f"/audit/{event.seq}/",
        "/audit/",
        f"/audit/?workflow={wf.pk}",
    ):
        page.goto(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= WIDTH, f"{path} is {width} px wide"
        assert page.evaluate(OVERFLOWING) == [], path
    ctx.close()
