"""The chaos suite's stack (``make chaos`` → ``python -m bench.chaos``): its own PostgreSQL and
Redis (started by the runner, so a cell may stop them), one simulated cluster for the session,
a Celery worker (+ beat) per cell that the harness may kill and start again, like a supervisor,
and a produce load whose acknowledgements are checked after every cell.

Each cell's outcome is appended to ``STRATA_CHAOS_RESULTS`` (JSON lines) for the table the
runner writes into ``bench/RESULTS.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.utils import Error as DatabaseError

from tests.conftest import ROOT, child_env
from tests.workflows.conftest import api  # noqa: F401  (the API client fixture)
from tests.workflows.simcluster import Sim, sim_cluster, wait_until

CLUSTER = "chaos"
#: the same simulated cluster registered through its brokers' Kafka listeners (#36)
KAFKA_CLUSTER = "chaos-kafka"
LOAD_TOPIC = "chaos.load"

#: Short leases and reconcile interval so a killed run resumes within seconds; the Spark
#: supervision of issue #16 at test speed (a lost driver is noticed in 15 s, not minutes).
WORKER_ENV = {
    "STRATA_WORKFLOW_LEASE_SECONDS": "3",
    "STRATA_RECONCILE_SECONDS": "1",
    "STRATA_STEP_RETRY_BASE_SECONDS": "0.2",
    "STRATA_STEP_RETRY_MAX_SECONDS": "5",
    "STRATA_SYNC_INTERVAL_SECONDS": "3600",
    "SPARK_RUN_LOST_AFTER_SECONDS": "15",
    "SPARK_REAP_INTERVAL_SECONDS": "3",
    "SPARK_HEARTBEAT_SECONDS": "1",
}


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """One JSON line per cell: its parameters, outcome, duration and what the test noted."""
    path = os.environ.get("STRATA_CHAOS_RESULTS")
    if not path or not hasattr(item, "callspec"):
        return
    if call.when == "setup" and call.excinfo is None:
        return
    if call.when == "teardown" and call.excinfo is None:
        return
    notes = dict(item.user_properties)
    row = {
        **item.callspec.params,
        "phase": call.when,
        "passed": call.excinfo is None,
        "seconds": round(call.duration, 1),
        "error": "" if call.excinfo is None else call.excinfo.exconly().splitlines()[0][:300],
        **notes,
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(row, default=str) + "\n")


def db_safe(predicate: Callable[[], Any]) -> Callable[[], Any]:
    """``predicate`` that answers False while PostgreSQL is down (and drops the broken
    connection so the next call reconnects)."""

    def check() -> Any:
        try:
            return predicate()
        except DatabaseError:
            connection.close()
            return False

    return check


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    check = db_safe(predicate)
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="session")
def sim(tmp_path_factory) -> Iterator[Sim]:
    with sim_cluster(
        tmp_path_factory.mktemp("chaos-sim") / "data", extra=("--expiration", "external")
    ) as s:
        s.controller.create_topic(LOAD_TOPIC, 3, 3)
        wait_until(
            lambda: all(len(p.created) == 3 for p in s.controller.topic(LOAD_TOPIC).partitions),
            30,
            "the load topic",
        )
        yield s


class Load:
    """A steady keyed produce load (acks=all, idempotent) in a thread: every acknowledged
    record's id is kept, so the cell can check none was lost or duplicated."""

    def __init__(self, sim: Sim) -> None:
        from broker_agent.contract.producer import Producer

        self.producer = Producer(sim.controller, sim.secret)
        self.acked: list[str] = []
        self.errors = 0
        self.run = uuid.uuid4().hex[:8]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        n = 0
        while not self._stop.wait(0.2):
            batch = [{"key": f"k{(n + i) % 50}", "value": f"{self.run}-{n + i}"} for i in range(5)]
            n += 5
            try:
                self.producer.send(LOAD_TOPIC, batch)
            except Exception:  # not acknowledged: not counted (a broker was down)
                self.errors += 1
                continue
            self.acked.extend(r["value"] for r in batch)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.producer.close()

    def verify(self, sim: Sim) -> dict[str, int]:
        seen: dict[str, int] = {}
        for value in sim.read_values(LOAD_TOPIC):
            if value.startswith(self.run + "-"):
                seen[value] = seen.get(value, 0) + 1
        return {
            "acked": len(self.acked),
            "lost": sum(1 for v in self.acked if v not in seen),
            "duplicated": sum(c - 1 for c in seen.values() if c > 1),
            "unacknowledged_sends": self.errors,
        }


class Worker:
    """A Celery worker with embedded beat, as ``make run`` starts it, in its own session so the
    harness can kill it like a crash and start it again like a supervisor."""

    def __init__(self, run_dir: Path, env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.exits: list[int] = []

    @property
    def fault_dir(self) -> Path:
        return self.run_dir / "faults"

    def start(self) -> None:
        log = self.run_dir / f"worker{self.starts}.log"
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-B",
                 "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
                 "--hostname", f"chaos-{os.getpid()}-{self.starts}@%h",
                 "--without-mingle", "--without-gossip"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.starts += 1
        deadline = time.monotonic() + 90
        while "ready." not in log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def supervise(self) -> None:
        """Start it again if it exited (systemd's Restart=always), noting the exit."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.start()

    def crash(self) -> None:
        """SIGKILL the main process and its pool children, not their descendants: a crash, as
        the OOM killer or ``kill -9`` does it. Spark drivers must follow on their own."""
        assert self.proc is not None
        pids = [self.proc.pid, *children_of(self.proc.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.exits.append(self.proc.returncode)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # warm shutdown: the main process alone
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def tail(self) -> str:
        logs = sorted(self.run_dir.glob("worker*.log"))
        return logs[-1].read_text()[-4000:] if logs else ""


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def processes_matching(mark: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if mark in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
def worker_factory(django_db_blocker, tmp_path) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(**extra: str) -> Worker:
        run_dir = tmp_path / f"run{len(made)}"
        run_dir.mkdir()
        with django_db_blocker.unblock():
            env = child_env(
                STRATA_RUN_DIR=str(run_dir),
                STRATA_FAULT_DIR=str(run_dir / "faults"),
                **WORKER_ENV,
                **extra,
            )
        worker = Worker(run_dir, env)
        worker.start()
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop()


def server_control(name: str) -> dict[str, Any]:
    """How the runner said to stop and start its private server (``STRATA_CHAOS_<NAME>``)."""
    raw = os.environ.get(f"STRATA_CHAOS_{name.upper()}")
    if not raw:
        pytest.fail(f"STRATA_CHAOS_{name.upper()} is not set: run the suite with `make chaos`")
    return json.loads(raw)
