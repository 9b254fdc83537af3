"""Fixtures that run the simulated cluster as real processes through the stable CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.producer import Consumer, Producer
from broker_agent.simulator import processes

from . import agent_hooks

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    data: Path, *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("STRATA_AGENT_SECRET", None)
    env.pop("STRATA_AGENT_SECRET_FILE", None)
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "broker_agent", "sim", args[0], "--data", str(data), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"sim {' '.join(args)} failed: {proc.stdout}\n{proc.stderr}")
    return proc


def _kill_all(data: Path) -> None:
    """Belt and braces after ``sim down``: no process of this cluster survives a test."""
    pids = data / "pids"
    if not pids.is_dir():
        return
    for f in pids.glob("*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.killpg(int(f.read_text().strip()), signal.SIGKILL)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (AgentError, OSError) as exc:  # transient while processes restart
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_exc})")


class Sim:
    def __init__(self, data: Path, urls: dict):
        self.data = data
        self.urls = urls
        self.secret = (data / "secret").read_bytes().strip()
        self.controller = ControllerClient(urls["controller"], self.secret)
        self._agents: dict[int, AgentClient] = {}

    def cli(self, *args, **kw):
        return run_cli(self.data, *args, **kw)

    def agent(self, broker_id: int) -> AgentClient:
        if broker_id not in self._agents:
            self._agents[broker_id] = AgentClient(
                self.urls["brokers"][str(broker_id)], self.secret, retries=2
            )
        return self._agents[broker_id]

    def producer(self) -> Producer:
        return Producer(self.controller, self.secret)

    def consumer(self) -> Consumer:
        return Consumer(self.controller, self.secret)

    def partition(self, topic: str, p: int = 0):
        t = self.controller.topic(topic)
        return next(x for x in t.partitions if x.partition == p)

    def replica(self, broker_id: int, topic: str, p: int = 0):
        snap = self.agent(broker_id).snapshot()
        return next((r for r in snap.replicas if r.topic == topic and r.partition == p), None)

    def close(self):
        for a in self._agents.values():
            a.close()
        self.controller.close()


@pytest.fixture
def agent_test_hooks(monkeypatch) -> None:
    """Clusters started after it serve the test-only endpoints (:mod:`.agent_hooks`)."""
    monkeypatch.setenv(processes.SIM_MODULE_ENV, agent_hooks.MODULE)


@pytest.fixture
def sim_factory(tmp_path):
    started: list[Sim] = []

    def start(brokers: int = 3, log_dirs: int = 2, *extra: str) -> Sim:
        data = tmp_path / f"sim{len(started)}"
        try:
            proc = run_cli(
                data, "up", "--brokers", str(brokers), "--log-dirs", str(log_dirs), *extra
            )
        except BaseException:
            _kill_all(data)
            raise
        sim = Sim(data, json.loads(proc.stdout.strip().splitlines()[-1]))
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.close()
        with contextlib.suppress(Exception):
            run_cli(sim.data, "down", check=False, timeout=60)
        _kill_all(sim.data)


class Load:
    """Continuous keyed produce (acks=all, idempotent) and consume in background threads."""

    def __init__(self, sim: Sim, topic: str):
        self.sim, self.topic = sim, topic
        self.acked: list[str] = []
        self.consumed: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=90)

    def wait_acked(self, n: int, timeout: float = 60):
        start = len(self.acked)
        wait_until(lambda: len(self.acked) >= start + n, timeout, what=f"{n} more acked records")

    def _produce(self):
        producer = self.sim.producer()
        producer.timeout = 120
        i = 0
        try:
            while not self._stop.is_set():
                batch = [{"key": f"k{(i + j) % 50}", "value": f"v{i + j}"} for j in range(20)]
                producer.send(self.topic, batch)
                self.acked.extend(r["value"] for r in batch)
                i += 20
                time.sleep(0.02)
        except BaseException as exc:
            self.errors.append(exc)

    def _consume(self):
        consumer = self.sim.consumer()
        offset = 0
        while not self._stop.is_set():
            try:
                resp = consumer.fetch_once(self.topic, 0, offset, timeout=5)
                self.consumed.extend(r.value for r in resp.records)
                offset = resp.next_offset
            except Exception:
                pass
            time.sleep(0.05)

    def verify_exactly_once(self):
        assert not self.errors, self.errors
        consumer = self.sim.consumer()
        values = [r.value for recs in consumer.read_topic(self.topic).values() for r in recs]
        counts: dict[str, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        lost = [a for a in self.acked if a not in counts]
        duplicated = {v: n for v, n in counts.items() if n > 1}
        assert lost == [], f"{len(lost)} acknowledged records lost"
        assert duplicated == {}, f"duplicates: {list(duplicated.items())[:5]}"
        # the continuous consumer never saw a record twice either
        assert len(self.consumed) == len(set(self.consumed))
        return len(values)
