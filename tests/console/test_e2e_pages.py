"""Acceptance 5, in Chromium: every console page loads without console errors, refreshes its
live panel with new data without a reload, works from the keyboard, and is screenshotted under
``tests/e2e/screenshots/``. The inventory is built by the real sync from snapshot objects."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, login
from tests.console.conftest import sync
from tests.console.factories import ClusterBuilder

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "tests" / "e2e" / "screenshots"


@pytest.fixture
def world(cluster):
    b = ClusterBuilder(brokers=4, log_dirs=2)
    b.add_topic("orders", partitions=6, rf=3, tiered=True, records=1000, remote_records=400)
    b.add_topic("payments", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    b.add_topic("clicks", partitions=4, rf=2, records=5000)
    for i in range(60):
        b.add_topic(f"app.events-{i:02d}", partitions=2, rf=2, records=10 * i)
    sync(cluster, b)
    b.alter_partition_count("payments", 5)
    b.alter_partition_count("clicks", 3)  # partition 3 marked for deletion (KIP-253 shrink)
    sync(cluster, b)
    return cluster, b


def _tab_to(page, element_id: str, limit: int = 80) -> None:
    """Press Tab until the element with ``element_id`` has the focus (keyboard only)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} cannot be reached with Tab")


def _live_refresh(page, panel: str, change, check) -> None:
    """Change the inventory, then see the live panel show it, without a page reload."""
    page.evaluate("window.__notReloaded = true")
    change()
    with page.expect_response(
        lambda r: r.request.headers.get("hx-target") == panel, timeout=15_000
    ) as info:
        pass
    assert info.value.status == 200
    try:
        page.wait_for_function(check, timeout=15_000)
    except Exception:
        print(page.url, page.inner_html(f"#{panel}")[:2000])
        raise
    assert page.evaluate("window.__notReloaded") is True


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_overview(page, viewer, world):
    cluster, b = world
    login(page, viewer.username)
    page.goto("/")
    assert page.get_by_role("heading", name="Cluster local").is_visible()

    def change():
        b.fail_log_dir(3, "logdir-1")
        sync(cluster, b)

    _live_refresh(
        page,
        "clusters-live",
        change,
        "document.querySelector('[data-metric=\"offline-log-dirs\"]').textContent.trim() === '1'",
    )
    page.wait_for_selector("#system-status dl")  # loaded lazily after the page
    _shot(page, "overview")
    page.keyboard.press("Tab")  # the skip link comes first
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    assert page.console_errors == []


def test_topics(page, viewer, world):
    cluster, b = world
    login(page, viewer.username)
    page.goto("/topics/")
    assert page.get_by_role("heading", name="Topics").first.is_visible()
    _tab_to(page, "sort-remote_bytes")
    page.keyboard.press("Enter")
    page.wait_for_url("**sort=remote_bytes**")
    _tab_to(page, "sort-remote_bytes")
    page.keyboard.press("Enter")  # again: descending
    page.wait_for_url("**sort=-remote_bytes**")
    assert page.locator("#topic-1").inner_text() == "orders"
    page.select_option("#id_tiered_state", "ENABLED")
    page.wait_for_url("**tiered_state=ENABLED**")
    page.wait_for_function("document.querySelectorAll('#topics-live tbody tr').length === 1")

    def change():
        b.disable_tiering("orders", policy="retain")
        sync(cluster, b)

    page.select_option("#id_tiered_state", "")
    page.wait_for_function("document.querySelectorAll('#topics-live tbody tr').length > 1")
    _live_refresh(
        page,
        "topics-live",
        change,
        "[...document.querySelectorAll('#topics-live .badge')].some(e => e.textContent === 'DISABLING')",
    )
    _shot(page, "topics")
    assert page.console_errors == []


def test_topic_detail(page, viewer, world):
    cluster, b = world
    login(page, viewer.username)
    page.goto("/topics/local/payments/")
    assert page.locator("#tiered-state").inner_text() == "NONE"
    assert page.get_by_role("tree", name="Split tree").is_visible()
    _tab_to(page, "key-input")
    page.keyboard.type("customer-42")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-partition-now]")
    assert page.locator("[data-partition-before]").count() == 1  # expanded 3 -> 5

    def change():
        b.produce("payments", 0, 250)
        sync(cluster, b)

    _live_refresh(
        page,
        "topic-live",
        change,
        "document.querySelector('tr[data-partition=\"0\"] svg').dataset.logEnd === '350'",
    )
    _shot(page, "topic-detail-payments")
    page.goto("/topics/local/orders/")
    page.wait_for_selector("svg.offsets")
    _shot(page, "topic-detail-orders")
    # a DISABLING topic asks the workflows app who drives it; the answer fills its own box and
    # leaves the rest of the page (and its live refresh) in place
    b.disable_tiering("orders", policy="retain")
    sync(cluster, b)
    page.goto("/topics/local/orders/")
    page.get_by_test_id("no-driver").wait_for(timeout=15_000)
    assert page.locator("#tiering-h").is_visible() and page.locator("#parts-h").is_visible()
    assert page.locator("#topic-live").count() == 1
    _shot(page, "topic-detail-orders-no-driver")
    assert page.console_errors == []


def test_brokers(page, viewer, world):
    cluster, b = world
    login(page, viewer.username)
    page.goto("/brokers/")
    page.wait_for_selector('[data-dir="1:logdir-0"][data-state="ONLINE"]')

    def change():
        b.fail_log_dir(2, "logdir-0")
        sync(cluster, b)

    _live_refresh(
        page,
        "brokers-live",
        change,
        "document.querySelector('[data-dir=\"2:logdir-0\"]').dataset.state === 'OFFLINE'",
    )
    _tab_to(page, "dir-2-logdir-0")
    page.keyboard.press("Enter")
    page.wait_for_url("**dir=2%3Alogdir-0**")
    assert page.get_by_role("heading", name="Incident: broker 2 logdir-0").is_visible()
    _shot(page, "brokers")
    assert page.console_errors == []


def test_topology(page, viewer, world):
    cluster, b = world
    login(page, viewer.username)
    page.goto("/topology/")
    page.wait_for_selector("table.matrix")
    _tab_to(page, "offline-only")
    page.keyboard.press("Space")
    page.wait_for_url("**offline_only=true**")
    page.wait_for_function("document.querySelector('#topology-live td.empty') !== null")

    def change():
        b.kill_broker(4)
        sync(cluster, b)

    _live_refresh(
        page,
        "topology-live",
        change,
        "document.querySelectorAll('#topology-live td.cell.offline').length > 0",
    )
    _tab_to(page, "offline-only")
    page.keyboard.press("Space")  # all partitions again: more than one page
    page.wait_for_function("document.querySelectorAll('#topology-live tbody tr').length === 50")
    _tab_to(page, "page-next", limit=200)
    page.keyboard.press("Enter")
    page.wait_for_url("**page=2**")
    _shot(page, "topology")
    assert page.console_errors == []


def test_api_docs_render_offline_behind_the_login(page, viewer, live_server):
    """Swagger UI comes from the project's static files: no request leaves the server."""
    outside: list[str] = []

    def only_local(route):
        if route.request.url.startswith(live_server.url):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    page.context.route("**/*", only_local)
    page.goto("/api/v1/docs")
    assert "/accounts/login/" in page.url  # the docs need a signed-in user with a role
    login(page, viewer.username)
    page.goto("/api/v1/docs")
    page.locator(".opblock").first.wait_for(timeout=15_000)
    assert page.locator(".opblock").count() >= 10
    assert page.get_by_text("/api/v1/workflows", exact=True).count() >= 1
    assert outside == [] and page.console_errors == []
