"""The simulated cluster's real processes for the workflow kinds' integration tests.

``sim_cluster(data, ...)`` runs ``python -m broker_agent sim up`` in a temporary data dir and
always runs ``sim down`` (and kills what is left of its process groups) when the block ends.
Disks fail as in KIP-112's system tests: the folder is replaced by a file.

``request_planned`` / ``request_outcome``: a request through the API, then the real worker's
planning (a request only validates and creates the workflow in ``planning``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker_agent.contract.client import AgentClient, ControllerClient
from broker_agent.contract.producer import Consumer, Producer
from tests.broker_agent import agent_hooks

ROOT = Path(__file__).resolve().parents[2]


class Sim:
    def __init__(self, data: Path, urls: dict[str, Any]) -> None:
        self.data = data
        self.urls = urls
        self.secret_file = Path(urls.get("secret_file") or data / "secret")
        self.secret = self.secret_file.read_text().strip()
        self.controller = ControllerClient(urls["controller"], self.secret, timeout=15)

    def cli(self, *args: str, timeout: float = 60) -> str:
        return _cli(self.data, *args, timeout=timeout)

    def agent(self, broker_id: int) -> AgentClient:
        return AgentClient(self.urls["brokers"][str(broker_id)], self.secret, timeout=15)

    def register(self, name: str):
        """The console's registration of this cluster (rows are flushed between tests)."""
        from console.models import Cluster

        return Cluster.objects.create(
            name=name, controller_url=self.urls["controller"], secret_ref=str(self.secret_file)
        )

    def register_kafka(self, name: str = "local-kafka"):
        """The same cluster registered through its brokers' Kafka listeners (SASL/PLAIN, as
        ``make run``'s ``local-kafka``): the ``kafka`` backend's reads and writes."""
        from console.choices import ClusterBackend
        from console.models import Cluster

        return Cluster.objects.create(
            name=name,
            backend=ClusterBackend.KAFKA,
            kafka_bootstrap=self.urls["kafka_bootstrap"],
            kafka_client_config={
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "strata",
                "sasl_password_ref": str(self.secret_file),
            },
        )

    def producer(self) -> Producer:
        """What :class:`tests.broker_agent.conftest.Load` drives (with :meth:`consumer`)."""
        return Producer(self.controller, self.secret)

    def consumer(self) -> Consumer:
        return Consumer(self.controller, self.secret)

    def produce(self, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
        producer = Producer(self.controller, self.secret)
        try:
            return producer.send(topic, records)
        finally:
            producer.close()

    def read_values(self, topic: str) -> list[str]:
        return [r.value for recs in self.read_records(topic).values() for r in recs]

    def read_records(self, topic: str) -> dict:
        """Every record of ``topic`` by partition (key, value, offset), from the leaders."""
        from broker_agent.contract.producer import Consumer

        consumer = Consumer(self.controller, self.secret)
        try:
            return consumer.read_topic(topic)
        finally:
            consumer.close()

    def dir_of(self, broker_id: int, topic: str, partition: int) -> str | None:
        with self.agent(broker_id) as a:
            snap = a.snapshot()
        return next(
            (r.log_dir for r in snap.replicas if (r.topic, r.partition) == (topic, partition)),
            None,
        )

    def dir_state(self, broker_id: int, name: str) -> str:
        with self.agent(broker_id) as a:
            return next((d.state for d in a.log_dirs() if d.name == name), "REMOVED")

    def log_dir_path(self, broker_id: int, name: str) -> Path:
        return self.data / f"broker-{broker_id}" / name

    def break_log_dir(self, broker_id: int, name: str) -> None:
        """KIP-112's system tests: remove the log dir and create a file with the same path."""
        path = self.log_dir_path(broker_id, name)
        os.rename(path, f"{path}.failed")
        path.write_text("not a directory")
        wait_until(lambda: self.dir_state(broker_id, name) == "OFFLINE", 20, "the dir to fail")

    def replace_disk(self, broker_id: int, name: str) -> None:
        """A new, empty disk mounted at the dir's path (the old data is gone)."""
        path = self.log_dir_path(broker_id, name)
        path.unlink()
        path.mkdir()

    def set_probe_delay(self, broker_id: int, name: str, delay_ms: float) -> None:
        """Test hook (:mod:`tests.broker_agent.agent_hooks`): slow every probe down → DEGRADED."""
        with self.agent(broker_id) as a:
            a.request("PUT", f"/v1/test/log-dirs/{name}/probe-delay", body={"delay_ms": delay_ms})

    def close(self) -> None:
        self.controller.close()


def _cli(data: Path, *args: str, timeout: float = 60) -> str:
    """``sim ARGS``; every process it starts or restarts serves the test hooks (agent_hooks)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_AGENT_SECRET")}
    proc = subprocess.run(
        [sys.executable, "-m", "broker_agent", "sim", *args, "--data", str(data)],
        cwd=ROOT,
        env={**base, **agent_hooks.ENV},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sim {args[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _kill_all(data: Path) -> None:
    for f in (data / "pids").glob("*.pid") if (data / "pids").is_dir() else []:
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.killpg(int(f.read_text().strip()), signal.SIGKILL)


@contextlib.contextmanager
def sim_cluster(
    data: Path, *, brokers: int = 3, log_dirs: int = 2, extra: tuple[str, ...] = ()
) -> Iterator[Sim]:
    """A running simulated cluster (test hooks on, fast probes and session timeout)."""
    args = ["up", "--brokers", str(brokers), "--log-dirs", str(log_dirs)]
    args += ["--probe-interval", "0.5", "--session-timeout-ms", "3000", *extra]
    sim = None
    try:
        out = _cli(data, *args, timeout=120)
        sim = Sim(data, json.loads(out.strip().splitlines()[-1]))
        yield sim
    finally:
        if sim is not None:
            sim.close()
        with contextlib.suppress(Exception):
            _cli(data, "down", timeout=60)
        _kill_all(data)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # transient while processes change state
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


def wait_plan_stable(kind_name: str, params: dict[str, Any], timeout: float = 30.0) -> dict:
    """Wait until two plans a second apart have the same actions (the ISR shrink and the
    leader election after a failure have settled), so the approved plan is the executed one.
    Returns the actions."""
    from workflows.kinds import get_kind, plan_hash

    kind = get_kind(kind_name)
    last: list[str] = []

    def stable() -> dict | None:
        plan = kind.plan(kind.read_params(params)).actions.dump()
        h = plan_hash(kind_name, params, plan)
        same = bool(last) and last[-1] == h
        last.append(h)
        time.sleep(0.8)
        return plan if same else None

    return wait_until(stable, timeout, "a stable plan")


def planned_from(api, user, created: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
    """The answer of ``POST /api/v1/workflows`` (201: ``planning``, no plan yet) → wait until
    the worker planned it; returns ``GET /api/v1/workflows/{id}``: planned or refused."""
    from .conftest import wait_planned

    answered = (created["state"], created["plan"], created["plan_hash"])
    assert answered == ("planning", {}, ""), created  # a request never plans
    wait_planned(created["id"], timeout)
    return api(user).get(f"/workflows/{created['id']}").json()


def request_planned(api, user, body: dict[str, Any], timeout: float = 90) -> dict[str, Any]:
    """Request through the API, then wait for the worker's plan (see :func:`planned_from`)."""
    response = api(user).post("/workflows", body)
    assert response.status_code == 201, response.json()
    return planned_from(api, user, response.json(), timeout)


def request_outcome(api, user, body: dict[str, Any], timeout: float = 90) -> tuple[Any, str]:
    """How a request that should be refused ends: ``(status, code)`` when the request itself is
    refused (its fields), ``("refused", code)`` when the worker's planning refuses it (a KIP
    error, a rule). Asserts that a refused workflow changed nothing: no plan, no approval, no
    step, and the refusal audited as denied."""
    from audit.choices import AuditOutcome
    from audit.models import AuditEvent
    from workflows.choices import AuditAction
    from workflows.models import Workflow

    response = api(user).post("/workflows", body)
    if response.status_code != 201:
        return response.status_code, response.json()["error"]
    out = planned_from(api, user, response.json(), timeout)
    if out["state"] != "refused":
        return out["state"], ""
    wf = Workflow.objects.get(pk=out["id"])
    assert (wf.plan, wf.plan_hash) == ({}, ""), out
    assert not wf.steps.exists() and not wf.approvals.exists(), out
    assert out["error"]["code"] == wf.error_code
    refused = AuditEvent.objects.get(workflow=wf, action=AuditAction.WORKFLOW_REFUSED)
    assert refused.outcome == AuditOutcome.DENIED and refused.extra["error"] == wf.error_code
    return "refused", wf.error_code


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session (a worker) and its children: SIGTERM, then
    SIGKILL after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
