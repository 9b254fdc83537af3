"""Fixtures of the write side's tests: requests built by the product's own actions, an API
client per persona, and a real Celery worker (+ embedded beat) with test-only settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from audit.choices import AuditContext
from tests.conftest import ROOT, child_env
from workflows import engine
from workflows.actions import do_approve_workflow, do_request_workflow
from workflows.models import Workflow


def planned(wf: Workflow) -> Workflow:
    """Run the planning a worker would run (in-process; on_commit never fires in these tests)."""
    engine.run(wf.pk)
    wf.refresh_from_db()
    return wf


def request_noop(
    user, label: str = "t1", *, brokers: int = 2, mode: str = "plain", cluster: str = "lab", **kw
) -> Workflow:
    """A ``noop_check`` request, planned (as a worker would) unless ``plan=False``."""
    plan = kw.pop("plan", True)
    wf = do_request_workflow(
        actor=user,
        kind="noop_check",
        params={"cluster": cluster, "label": label, "brokers": brokers, "mode": mode},
        reason=kw.pop("reason", "self-test"),
        context=AuditContext.CLI,
        **kw,
    )
    return planned(wf) if plan else wf


def wait_planned(workflow_id: int, timeout: float = 90) -> Workflow:
    """Wait until a worker planned the workflow (it left ``planning``); returns the row."""
    wait_for(
        lambda: Workflow.objects.get(pk=workflow_id).state != "planning",
        timeout,
        f"workflow #{workflow_id} to be planned",
    )
    return Workflow.objects.get(pk=workflow_id)


def approve(wf: Workflow, user) -> Workflow:
    return do_approve_workflow(wf.pk, actor=user, plan_hash=wf.plan_hash, context=AuditContext.CLI)


@pytest.fixture
def api(client):
    """``api(user).post(path, json)``: the test client signed in as ``user``, JSON bodies."""

    class Api:
        def __init__(self, user) -> None:
            client.force_login(user)

        def get(self, path: str, **params):
            return client.get(f"/api/v1{path}", params)

        def post(self, path: str, body=None):
            return client.post(f"/api/v1{path}", body or {}, content_type="application/json")

    return Api


def wait_for(predicate: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def workflow_worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator:
    """Start a real worker with embedded beat and test settings: ``start(**env)`` returns it.

    Short leases and reconcile interval so a killed run is resumed within seconds; fault
    markers and the beat schedule in a temporary run dir. Stopped at the end of the module."""
    from config.celery import app

    procs: list[subprocess.Popen] = []

    def start(**extra: str) -> subprocess.Popen:
        run_dir = tmp_path_factory.mktemp("wfrun")
        with django_db_blocker.unblock():
            env = child_env(
                **{
                    "STRATA_RUN_DIR": str(run_dir),
                    "STRATA_FAULT_DIR": str(run_dir / "faults"),
                    "STRATA_WORKFLOW_LEASE_SECONDS": "3",
                    "STRATA_RECONCILE_SECONDS": "1",
                    "STRATA_STEP_RETRY_BASE_SECONDS": "0.2",
                    "STRATA_SYNC_INTERVAL_SECONDS": "3600",  # keep other beat entries quiet
                    **extra,
                }
            )
        app.control.purge()
        log: Path = run_dir / "worker.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "config",
                    "worker",
                    "-B",
                    "--pool",
                    "prefork",
                    "--concurrency",
                    "2",
                    "--loglevel",
                    "INFO",
                    "--hostname",
                    f"wf-{os.getpid()}-{len(procs)}@%h",
                    "--without-mingle",
                    "--without-gossip",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.log_path = log
        procs.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited early:\n{log.read_text()}")
            if any(
                proc_name.startswith(f"wf-{os.getpid()}-{len(procs) - 1}@")
                for r in (app.control.ping(timeout=0.5) or [])
                for proc_name in r
            ):
                return proc
        raise RuntimeError(f"celery worker did not answer a ping:\n{log.read_text()}")

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def spark_dry_run(job: str, cluster: str, timeout: float = 600, **arguments):
    """A finished Spark dry run the product's way: ``enqueue_run`` (sent to the worker when its
    row commits), executed by whichever process claims it first — a test's worker or this
    process. The loser of that claim returns at once; both then wait for the row to finish, so
    the outcome never depends on which one won."""
    from spark_tasks.models import SparkJobRun, SparkRunState
    from spark_tasks.tasks import enqueue_run, execute_run

    run = enqueue_run(job, arguments, dry_run=True, cluster=cluster)
    execute_run.apply(args=[run.pk])
    wait_for(
        lambda: SparkJobRun.objects.get(pk=run.pk).state in SparkRunState.TERMINAL,
        timeout,
        f"spark run {run.pk} to finish",
    )
    run.refresh_from_db()
    assert run.state == SparkRunState.SUCCEEDED, run.error
    return run
