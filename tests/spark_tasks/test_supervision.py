"""Spark runs are supervised (issue #16): the job's processes die with the process that started
them, even by SIGKILL; a run nobody works on any more is failed as *lost* within
``SPARK_RUN_LOST_AFTER_SECONDS``, audited; a live run keeps its heartbeat fresh whatever it does.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from spark_tasks import guard
from spark_tasks.audit import SparkAuditAction
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.tasks import execute_run, reap_stale_runs
from tests.workflows.conftest import wait_for

# A stand-in for spark-submit: a process tree (a shell, two sleeping children) that records its
# pids and never ends by itself.
TREE = "sleep 600 & sleep 600 & echo $$ > {pids}; jobs -p >> {pids}; wait"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"  # a zombie is dead, only not reaped
    except FileNotFoundError:
        return False


def _pids(path: Path) -> list[int]:
    wait_for(lambda: path.exists() and len(path.read_text().split()) == 3, 30, "the tree to start")
    return [int(p) for p in path.read_text().split()]


def test_the_job_tree_dies_with_a_sigkilled_parent(tmp_path):
    """The worker process is SIGKILLed (no cleanup runs): the guard still takes the tree down."""
    pids_file = tmp_path / "pids"
    parent_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        subprocess.Popen(
            [sys.executable, {str(guard.__file__)!r}, str(os.getpid()), "--",
             "sh", "-c", {TREE.format(pids=pids_file)!r}],
            start_new_session=True,
        )
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    tree = _pids(pids_file)
    assert all(_alive(p) for p in tree)
    parent.kill()
    parent.wait()
    wait_for(lambda: not any(_alive(p) for p in tree), 60, "the orphaned tree to be gone")


def test_a_stopped_guard_stops_its_group_and_says_so(tmp_path):
    pids_file = tmp_path / "pids"
    proc = subprocess.Popen(
        [sys.executable, guard.__file__, str(os.getpid()), "--", "sh", "-c",
         TREE.format(pids=pids_file)],
        start_new_session=True,
    )  # fmt: skip
    tree = _pids(pids_file)
    os.killpg(proc.pid, signal.SIGTERM)  # what a timeout or a Celery time limit does
    assert proc.wait(timeout=60) == guard.STOPPED_EXIT_CODE
    wait_for(lambda: not any(_alive(p) for p in tree), 30, "the group to be gone")


def test_the_guard_passes_the_jobs_exit_code_through(tmp_path):
    ok = subprocess.run([sys.executable, guard.__file__, str(os.getpid()), "--", "true"])
    failed = subprocess.run(
        [sys.executable, guard.__file__, str(os.getpid()), "--", "sh", "-c", "exit 3"]
    )
    assert (ok.returncode, failed.returncode) == (0, 3)


def test_a_guard_whose_parent_is_already_gone_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    not_my_parent = 1  # as if the worker died before the guard asked to die with it
    done = subprocess.run(
        [sys.executable, guard.__file__, str(not_my_parent), "--", "touch", str(marker)]
    )
    assert done.returncode == guard.STOPPED_EXIT_CODE and not marker.exists()


@pytest.mark.django_db
def test_a_run_without_heartbeat_is_failed_as_lost_and_audited(settings):
    settings.SPARK_RUN_LOST_AFTER_SECONDS = 120
    lost = SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        state=SparkRunState.RUNNING,
        heartbeat_at=timezone.now() - dt.timedelta(seconds=121),
    )
    alive = SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        state=SparkRunState.RUNNING,
        heartbeat_at=timezone.now() - dt.timedelta(seconds=60),
    )
    assert reap_stale_runs() == 1
    lost.refresh_from_db()
    alive.refresh_from_db()
    assert (lost.state, lost.lost) == (SparkRunState.FAILED, True)
    assert "no heartbeat for 120 s" in lost.error
    assert (alive.state, alive.lost) == (SparkRunState.RUNNING, False)
    event = AuditEvent.objects.get(action=SparkAuditAction.FAILED, target_id=str(lost.pk))
    assert event.after["lost"] is True and event.after["reaped"] is True
    assert reap_stale_runs() == 0  # once


@pytest.mark.django_db(transaction=True)
def test_a_working_run_keeps_its_heartbeat_fresh_between_progress_reports(settings, tmp_path):
    """Not only spark-submit's progress: any work on the run (here a slow inventory export that
    reports nothing) renews the heartbeat, so the reaper never takes a live run."""
    settings.SPARK_WORK_DIR = tmp_path
    settings.SPARK_HEARTBEAT_SECONDS = 0.2
    run = SparkJobRun.objects.create(job=SparkJob.INVENTORY_STATS, cluster="sim")
    beats: list[dt.datetime] = []

    def slow_execute(run, work, out):
        start = SparkJobRun.objects.get(pk=run.pk).heartbeat_at
        wait_for(lambda: SparkJobRun.objects.get(pk=run.pk).heartbeat_at > start, 30, "a heartbeat")
        beats.append(SparkJobRun.objects.get(pk=run.pk).heartbeat_at)
        return {}

    with mock.patch("spark_tasks.tasks._execute", side_effect=slow_execute):
        assert execute_run.apply(args=[run.pk]).get() == SparkRunState.SUCCEEDED
    run.refresh_from_db()
    assert beats and run.started_at < beats[0] and not run.lost
