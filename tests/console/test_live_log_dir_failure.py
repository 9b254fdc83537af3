"""Acceptance 1, against the simulated cluster's real processes, a real Celery worker and beat,
and Chromium: a failed log dir shows OFFLINE on the brokers page (without reloading it), in the
API and in /metrics with the agent's offline replica counts; healing and recovery clear it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from console.models import Cluster
from console.sync import do_sync_cluster
from tests.conftest import ROOT, child_env, login
from tests.console.simcluster import SimCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "tests" / "e2e" / "screenshots"


@pytest.fixture(scope="module")
def sim(live_server, tmp_path_factory):
    cluster = SimCluster(
        tmp_path_factory.mktemp("sim"), webhook=f"{live_server.url}/agent-events/local/"
    )
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def beat_process(celery_worker_process, django_db_blocker, tmp_path_factory):
    """``celery beat`` with a 2 s sync interval, next to the worker (the production wiring)."""
    run_dir = tmp_path_factory.mktemp("beat")
    with django_db_blocker.unblock():
        env = child_env(STRATA_SYNC_INTERVAL_SECONDS="2", STRATA_RUN_DIR=str(run_dir))
    log = run_dir / "beat.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel",
                "INFO",
                "-s",
                str(run_dir / "schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _cell(page, broker: int, name: str):
    return page.locator(f'[data-dir="{broker}:{name}"]')


def _broker_counts(page, broker: int) -> tuple[str, str]:
    row = page.locator(f'tr[data-broker="{broker}"]')
    return (
        row.locator("[data-offline-dirs]").inner_text().strip(),
        row.locator("[data-offline-replicas]").inner_text().strip(),
    )


def test_failed_log_dir_goes_offline_live_and_recovers(sim, beat_process, page, viewer):
    cluster = Cluster.objects.create(
        name="local", controller_url=sim.urls["controller"], secret_ref=str(sim.secret_file)
    )
    sim.controller.create_topic("orders", 6, 3)
    wait_until(
        lambda: all(len(p.created) == 3 for p in sim.controller.topic("orders").partitions),
        30,
        what="replicas created",
    )
    do_sync_cluster(cluster)

    login(page, viewer.username)
    page.goto("/brokers/")
    assert _cell(page, 2, "logdir-0").get_attribute("data-state") == "ONLINE"
    page.evaluate("window.__notReloaded = true")

    sim.break_log_dir(2, "logdir-0")
    # KIP-112: the dir goes OFFLINE; the live panel shows it without a reload (acceptance: 15 s).
    page.wait_for_selector('[data-dir="2:logdir-0"][data-state="OFFLINE"]', timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True

    with sim.agent(2) as agent:
        snap = agent.snapshot()
    assert snap.offline_log_directory_count == 1
    expected = str(snap.offline_replica_count)
    # The page's OfflineReplicaCount catches up with the agent's within the next syncs.
    wait_until(lambda: _broker_counts(page, 2) == ("1", expected), 15, what="page counts")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "brokers-offline-dir.png"), full_page=True)
    assert page.get_by_role("heading", name="Incident: broker 2 logdir-0").is_visible()

    body = page.request.get("/api/v1/clusters/local/brokers").json()
    b2 = next(b for b in body["brokers"] if b["id"] == 2)
    d = next(d for d in b2["log_dirs"] if d["name"] == "logdir-0")
    assert d["state"] == "OFFLINE" and b2["offline_log_directory_count"] == 1
    assert b2["offline_replica_count"] == snap.offline_replica_count
    metrics = page.request.get("/metrics").text()
    assert (
        'strata_log_dir_state{broker="2",cluster="local",log_dir="logdir-0",state="OFFLINE"} 1.0'
        in metrics
    )
    assert (
        'strata_broker_offline_replica_count{broker="2",cluster="local"} '
        f"{float(snap.offline_replica_count)}" in metrics
    )

    sim.heal_log_dir(2, "logdir-0")
    page.wait_for_selector('[data-dir="2:logdir-0"][data-state="ONLINE"]', timeout=30_000)
    wait_until(lambda: _broker_counts(page, 2) == ("0", "0"), 60, what="recovery")
    assert page.evaluate("window.__notReloaded") is True
    metrics = page.request.get("/metrics").text()
    assert 'strata_broker_offline_replica_count{broker="2",cluster="local"} 0.0' in metrics
    assert page.console_errors == []
