"""In Chromium: an htmx request that fails says so where its answer would have gone
(static/strata.js). A key lookup refused by the web server (gunicorn's 414 for a request line
over 4,094 bytes) or never answered no longer leaves the previous key's partition on screen as
if it were the answer; a live panel whose poll fails keeps its last data under the message."""

from __future__ import annotations

import pytest

from tests.conftest import login
from tests.console.conftest import sync

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: What gunicorn answers for a request line over its limit (before Django sees the request).
GUNICORN_414 = (
    "<html><head><title>Bad Request</title></head><body><h1><p>Bad Request</p></h1>"
    "Request Line is too large (20045 &gt; 4094)</body></html>"
)


def _look_up(page, key: str) -> None:
    page.fill("#key-input", key)
    page.get_by_role("button", name="Look up").click()


def test_a_failed_key_lookup_replaces_the_previous_result(page, viewer, cluster, builder):
    sync(cluster, builder)
    script_errors: list[str] = []  # the browser logs each failed request; the script throws none
    page.on("pageerror", lambda exc: script_errors.append(str(exc)))
    login(page, viewer.username)
    page.goto("/topics/local/orders/")
    _look_up(page, "customer-7")
    page.get_by_test_id("looked-up-key").filter(has_text="customer-7").wait_for()

    page.route(
        "**/topics/local/orders/?key=*",
        lambda route: route.fulfill(status=414, body=GUNICORN_414, content_type="text/html"),
    )
    _look_up(page, "customer-8")
    alert = page.locator("#key-lookup [role=alert]")
    alert.filter(has_text="too long for the server (HTTP 414)").wait_for()
    assert page.locator("#key-lookup [data-partition-now]").count() == 0

    page.unroute("**/topics/local/orders/?key=*")
    page.route("**/topics/local/orders/?key=*", lambda route: route.abort())
    _look_up(page, "customer-9")
    alert.filter(has_text="Strata did not answer").wait_for()
    assert page.locator("#key-lookup [data-partition-now]").count() == 0

    page.unroute("**/topics/local/orders/?key=*")
    _look_up(page, "customer-10")  # the next answer replaces the message
    page.get_by_test_id("looked-up-key").filter(has_text="customer-10").wait_for()
    assert alert.count() == 0
    assert script_errors == []


def test_a_failed_poll_keeps_the_panel_under_a_message(page, viewer, cluster, builder):
    sync(cluster, builder)
    login(page, viewer.username)
    page.goto("/topics/local/orders/")
    rows = page.locator("#topic-live tbody tr").count()
    assert rows > 0

    def server_error(route):
        if route.request.headers.get("hx-target") != "topic-live":
            return route.continue_()
        return route.fulfill(status=500, body="<h1>Server Error (500)</h1>")

    page.route("**/topics/local/orders/*", server_error)
    note = page.locator("#topic-live > .request-failed[role=alert]")
    note.filter(has_text="Strata failed to answer (HTTP 500)").wait_for(timeout=15_000)
    assert page.locator("#topic-live tbody tr").count() == rows  # the last data stays
    page.unroute("**/topics/local/orders/*")
    note.wait_for(state="detached", timeout=15_000)  # the next poll's answer replaces it
