"""Shared fixtures: personas, a real Celery worker process, headless Chromium."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import Group

ROOT = Path(__file__).resolve().parent.parent
# The chaos suite stops PostgreSQL and kills Redis: only `make chaos` (bench/chaos.py) runs it,
# on servers of its own; `make test` does not collect it.
collect_ignore = [] if os.environ.get("STRATA_CHAOS") else ["chaos"]
PASSWORD = "correct-horse-battery-staple"


def make_user(username: str, role: str):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=role)[0])  # flushed by transactional tests
    if role == "admin":
        user.is_staff = user.is_superuser = True
        user.save()
    return user


def sign_in(client, username: str, password: str = PASSWORD) -> bool:
    """Sign in through the login form, as a browser does (``Client.login`` passes no request,
    which the lockout backend requires). True when the form accepted the credentials."""
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302


@pytest.fixture(autouse=True)
def _fresh_denial_windows() -> None:
    """Each test starts with no open denial windows (audit.denials counts in the shared test
    Redis, which outlives a test's database)."""
    import redis
    from django.conf import settings

    from audit.denials import DENIAL_KEY_PREFIX

    try:
        r = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        keys = list(r.scan_iter(match=DENIAL_KEY_PREFIX + "*", count=1000))
        if keys:
            r.delete(*keys)
    except redis.RedisError:
        pass  # tests that need Redis start it themselves


FLUSH_ATTEMPTS = 5


@pytest.fixture(scope="session", autouse=True)
def object_store(tmp_path_factory) -> Iterator:
    """The remote tier's S3 store for the whole session, as every process the tests start sees
    it (environment): the one ``STRATA_S3_ENDPOINT_URL`` names, or a SeaweedFS of the suite's own
    on a free port (never the 8333 a `make run` may be using). Each session writes under a prefix
    of its own in bucket ``strata-remote``. Yields the :class:`ObjectStoreConfig`."""
    import secrets as _secrets

    from config import seaweedfs

    home = tmp_path_factory.mktemp("seaweedfs")
    with seaweedfs.private_store(home, f"test-{_secrets.token_hex(4)}") as config:
        yield config


@pytest.fixture(scope="session", autouse=True)
def _flush_survives_deadlocks() -> Iterator[None]:
    """A transactional test's teardown TRUNCATEs every table while the module's live processes
    (Celery worker and beat syncing every 2 s, the simulated agents posting events to the live
    server) may still be in a transaction. TRUNCATE takes its exclusive locks table by table, so
    a sync that already read one table and waits for the next one is a lock cycle; PostgreSQL
    breaks it by aborting one side (CI saw the TRUNCATE lose, an ERROR at teardown). Aborting
    and retrying is how PostgreSQL asks clients to handle a deadlock, so the flush retries:
    the other transaction has finished (or was the one aborted) by then."""
    import psycopg.errors
    from django.db import OperationalError
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                return original(self, sql_list)
            except OperationalError as exc:
                deadlock = isinstance(exc.__cause__, psycopg.errors.DeadlockDetected)
                if not deadlock or attempt == FLUSH_ATTEMPTS:
                    raise

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DatabaseOperations, "execute_sql_flush", execute_sql_flush)
        yield


@pytest.fixture
def viewer(db):
    return make_user("vera-viewer", "viewer")


@pytest.fixture
def operator(db):
    return make_user("otto-operator", "operator")


@pytest.fixture
def approver(db):
    return make_user("anna-approver", "approver")


@pytest.fixture
def second_approver(db):
    return make_user("bert-approver", "approver")


@pytest.fixture
def admin(db):
    return make_user("ada-admin", "admin")


#: The role child processes (workers, beat, the web server) connect as, like ``make run``'s:
#: ``manage.py grant_app_role`` gives it everything but UPDATE / DELETE / TRUNCATE on the audit
#: table, so the whole suite shows those grants are enough. Empty: children connect as the owner.
TEST_APP_ROLE = os.environ.get("STRATA_TEST_DB_APP_ROLE", "strata_test_app")


@pytest.fixture(scope="session", autouse=True)
def _test_app_role(django_db_setup, django_db_blocker) -> None:
    """``grant_app_role`` on the test database once, at the start of the session and outside
    any test's transaction (a grant made inside one is rolled back with it, and every child
    process after it could not connect).

    Only on a database pytest-django set up (``test_...``): a run of tests that need no database
    (``pytest tests/broker_agent``) leaves the connection on the configured, unmigrated one."""
    from django.core.management import call_command
    from django.db import connection

    if TEST_APP_ROLE and connection.settings_dict["NAME"].startswith("test_"):
        with django_db_blocker.unblock():
            call_command("grant_app_role", TEST_APP_ROLE, stdout=io.StringIO())


def child_database_url() -> str:
    """DATABASE_URL of the test database that pytest-django set up (for child processes), as
    the application role."""
    from django.db import connection

    s = connection.settings_dict
    user = TEST_APP_ROLE or s["USER"]
    auth = user + (f":{s['PASSWORD']}" if s.get("PASSWORD") and user == s["USER"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": child_database_url(), "PYTHONUNBUFFERED": "1"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def celery_worker_process(
    django_db_setup, django_db_blocker, tmp_path_factory
) -> Iterator[subprocess.Popen]:
    """A real ``celery worker`` process on the test database and the test Redis DB.

    Module-scoped: it stops when its module ends, so other modules see no worker."""
    from config.celery import app

    with django_db_blocker.unblock():
        env = child_env()
    app.control.purge()
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "--loglevel",
                "INFO",
                "--hostname",
                f"test-{os.getpid()}@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{log.read_text()}")
        if app.control.ping(timeout=0.5):
            break
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"celery worker did not answer a ping:\n{log.read_text()}")
    proc.log_path = log
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def browser() -> Iterator:
    """Debian's Chromium, headless, driven by Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package.")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server):
    """A fresh browser context per test; console errors are collected on ``page.console_errors``."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 768})
    pg = context.new_page()
    pg.console_errors = []
    pg.on("console", lambda msg: msg.type == "error" and pg.console_errors.append(msg.text))
    pg.on("pageerror", lambda exc: pg.console_errors.append(str(exc)))
    yield pg
    context.close()


def login(page, username: str, password: str = PASSWORD) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
