"""Issue #15, in Chromium: every page, as every role, on a laptop (1,440 px) and on a phone
(390 px). On each page: nothing is wider than the window, no raw template syntax shows, no
request leaves the machine, the console stays free of errors, and every panel says how old its
data is. A page a role may not see answers 403 (and is not checked further). A full-page
screenshot of each (page, role, width) goes to ``tests/e2e/screenshots/every-page/``.

The world is one synced cluster (a tiered topic, an offline log dir), workflows in several
states, a Spark run and the audit events all of that wrote. Each (role, width) is one test with
one browser context that visits every page and reports every failure at once.

Panels are ``section.card``. A panel shows its age with the ``data_age`` tag (an element with
``data-age``): a ``<time>`` of one row says when that row was written, not how old the panel's
data is. A panel that shows no data that can go stale (a form, a choice of kinds, static help)
carries ``data-no-age``, with the reason in a template comment beside it.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlparse

import pytest
from django.utils import timezone

from audit.choices import AuditContext
from tests.conftest import ROOT
from tests.console.conftest import sync
from tests.console.factories import ClusterBuilder
from tests.workflows.conftest import approve, request_noop

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "tests" / "e2e" / "screenshots" / "every-page"
WIDTHS = (1440, 390)
ROLES = ("viewer", "operator", "approver", "admin")
#: Pages only some roles may open: (page name) -> the roles that may.
RESTRICTED = {"tokens": {"admin"}}
LOCAL_HOSTS = {"127.0.0.1", "localhost"}

#: Until htmx has nothing in flight (a panel loaded after the page, a poll under way); waiting
#: for this, not for the network to idle, keeps a page's visit under half a second.
SETTLED = "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"
#: Pages drawn by a script after they load: what shows they are drawn.
READY = {"api-docs": ".swagger-ui .opblock"}

#: Raw template syntax in what the page shows or in its markup (scripts and styles aside).
RAW_TEMPLATE = """() => {
  const doc = document.documentElement.cloneNode(true);
  doc.querySelectorAll("script, style, template").forEach(e => e.remove());
  const found = [];
  for (const [where, text] of [["text", document.body.innerText], ["markup", doc.outerHTML]]) {
    for (const mark of ["{{", "{%", "{#"]) {
      const i = text.indexOf(mark);
      if (i >= 0) found.push(`${where}: ${JSON.stringify(text.slice(Math.max(0, i - 40), i + 40))}`);
    }
  }
  return found;
}"""

#: Panels that show data but not its age (their heading, or their first words).
AGELESS = """() => [...document.querySelectorAll("main section.card")]
  .filter(s => !s.hasAttribute("data-no-age") && !s.querySelector("[data-age]"))
  .map(s => (s.querySelector("h1, h2, h3") || s).textContent.trim().replace(/\\s+/g, " ").slice(0, 60))"""


@pytest.fixture
def world(tmp_path, viewer, operator, approver, second_approver, admin):
    """One cluster, synced twice (an offline log dir on the second), and the rows the
    workflows, Spark and audit pages list. Returns the pages to visit: name -> path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from console.models import Cluster
    from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
    from workflows import engine
    from workflows.actions import do_cancel_workflow, do_reject_workflow

    cluster = Cluster.objects.create(
        name="local", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    b = ClusterBuilder(brokers=3, log_dirs=2)
    b.add_topic("orders", partitions=6, rf=3, tiered=True, records=1000, remote_records=400)
    b.add_topic("payments", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    b.add_topic("clicks", partitions=4, rf=2, records=5000)
    sync(cluster, b)
    b.fail_log_dir(2, "logdir-1")
    sync(cluster, b)

    request_noop(operator, "planning", plan=False)
    pending = request_noop(operator, "pending")
    done = approve(request_noop(operator, "done"), approver)
    engine.run(done.pk)
    rejected = request_noop(operator, "rejected")
    do_reject_workflow(
        rejected.pk,
        actor=second_approver,
        plan_hash=rejected.plan_hash,
        comment="not now",
        context=AuditContext.CLI,
    )
    cancelled = request_noop(operator, "cancelled")
    do_cancel_workflow(cancelled.pk, actor=operator, comment="", context=AuditContext.CLI)

    now = timezone.now()
    plan = tmp_path / "run" / "plan"  # a dry run's plan, as the retention job writes it
    plan.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {"cluster": ["local"] * 2, "topic": ["orders", "clicks"], "size_bytes": [4096, 512]}
        ),
        plan / "part-0.parquet",
    )
    run = SparkJobRun.objects.create(
        job=SparkJob.RETENTION,
        state=SparkRunState.SUCCEEDED,
        cluster=cluster.name,
        requested_by=operator,
        created_at=now - timedelta(minutes=5),
        started_at=now - timedelta(minutes=4),
        finished_at=now - timedelta(minutes=1),
        heartbeat_at=now - timedelta(minutes=1),
        exit_code=0,
        output_dir=str(tmp_path / "run"),
        plan_rows=2,
        log_tail="INFO retention: 3 topics, 12 segments past retention\n",
        output_summary={"topics": 3, "segments": 12, "bytes": 123456},
        stages_total=4,
        stages_done=4,
        tasks_total=16,
        tasks_done=16,
    )
    from audit.models import AuditEvent

    event = AuditEvent.objects.order_by("-seq").first()
    return {
        "overview": "/",
        "system-status": "/status/",
        "cluster": f"/clusters/{cluster.name}/",
        "topics": "/topics/",
        "topic": f"/topics/{cluster.name}/orders/",
        "brokers": "/brokers/?dir=2%3Alogdir-1",
        "topology": "/topology/",
        "workflows": "/workflows/",
        "workflow-done": f"/workflows/{done.pk}/",
        "workflow-pending": f"/workflows/{pending.pk}/",
        "request-kinds": "/workflows/new/",
        "request-form": f"/workflows/new/?kind=disable_tiering&cluster={cluster.name}&topic=orders",
        "approve": f"/workflows/{pending.pk}/approve/",
        "spark-runs": "/spark/",
        "spark-run": f"/spark/runs/{run.pk}/",
        "spark-plan": f"/spark/runs/{run.pk}/plan/",
        "audit": "/audit/",
        "audit-event": f"/audit/{event.seq}/",
        "tokens": "/tokens/",
        "api-docs": "/api/v1/docs",
    }


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """The personas sign in by session (below), so their passwords need no slow hash."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _sign_in(ctx, live_server, user) -> None:
    """A signed-in session cookie for ``user`` (the login form is tested in test_login.py;
    going through it here cost seconds per role and width)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    ctx.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )


def _is_local(url: str) -> bool:
    parts = urlparse(url)
    return parts.scheme not in {"http", "https", "ws", "wss"} or parts.hostname in LOCAL_HOSTS


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("role", ROLES)
def test_every_page_fits_is_local_clean_and_dated(
    browser, live_server, request, world, role, width
):
    user = request.getfixturevalue(role)
    ctx = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    outside: list[str] = []
    errors: list[str] = []

    def only_local(route):
        if _is_local(route.request.url):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    ctx.route("**/*", only_local)
    page = ctx.new_page()
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _sign_in(ctx, live_server, user)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for name, path in world.items():
        outside.clear()
        errors.clear()
        response = page.goto(path)
        page.wait_for_function(SETTLED)
        status = response.status if response else None
        may = role in RESTRICTED.get(name, ROLES)
        if status != (200 if may else 403):
            failures.append(f"{name} ({path}): HTTP {status}, expected {200 if may else 403}")
            continue
        if not may:
            continue
        if name in READY:
            page.wait_for_selector(READY[name])
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{role}-{width}.png"), full_page=True)
        wide = page.evaluate("document.documentElement.scrollWidth")
        if wide > width:
            failures.append(f"{name}: {wide} px wide in a {width} px window")
        failures += [f"{name}: raw template syntax in {raw}" for raw in page.evaluate(RAW_TEMPLATE)]
        failures += [f"{name}: request to {url}" for url in outside]
        failures += [f"{name}: console error {text}" for text in errors]
        failures += [f"{name}: panel without an age: {p!r}" for p in page.evaluate(AGELESS)]
    ctx.close()
    assert not failures, f"as {role} at {width} px:\n" + "\n".join(failures)
