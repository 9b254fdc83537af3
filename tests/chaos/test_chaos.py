"""``make chaos``: every workflow kind by every fault, with real processes under a produce load.

Faults (issue #16): the worker SIGKILLed at every step boundary (before and after each step);
SIGKILLed mid-step (the step's effect reached the cluster, its success is not recorded yet; for
the Spark kinds also while the job's driver runs); Redis killed and restarted with nothing
persisted; one broker agent down for 30 s; PostgreSQL down for 10 s. The last three are brought
in at a pause the test app makes after the first step, so they land mid-run whatever the kind.

Every cell must end with the workflow succeeded exactly once: one completion per step, one
audit event per effect (per action and target), its kind's effect once on the cluster (one
tiered-epoch increment, one ack per broker, ...), an intact audit chain, no Spark process left
behind, and nothing the simulated cluster acknowledged lost or duplicated, neither on the
workflow's topic nor on a topic under a steady produce load. A Redis restart must not make
the worker exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from console.sync import do_sync_cluster
from spark_tasks.models import SparkJobRun, SparkRunState
from tests.workflows.simcluster import planned_from
from workflows.choices import AuditAction, WorkflowState
from workflows.kinds import FLAT_REQUEST_FIELDS, all_kinds
from workflows.models import Workflow

from .conftest import (
    CLUSTER,
    KAFKA_CLUSTER,
    Load,
    Worker,
    db_safe,
    processes_matching,
    server_control,
    wait_for,
)
from .scenarios import SCENARIOS, Cell, Scenario
from .scenarios_kafka import KAFKA_SCENARIOS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1800),
]

FAULTS = (
    "kill_boundaries",
    "kill_mid_step",
    "redis_restart",
    "agent_down_30s",
    "postgres_down_10s",
)
PAUSED_FAULTS = ("redis_restart", "agent_down_30s", "postgres_down_10s")
CELL_TIMEOUT = 1200.0


def test_every_product_kind_has_a_chaos_scenario():
    kinds = {k.name for k in all_kinds(include_hidden=True) if k.name != "noop_check"}
    assert kinds == set(SCENARIOS)
    assert all(not s.kafka and s.kind == name for name, s in SCENARIOS.items())


def test_every_kind_that_runs_on_kafka_has_a_kafka_scenario():
    """#36's kinds on a ``kafka`` cluster; ``shrink_partitions`` is refused there (Kafka
    cannot remove partitions) and the Spark kinds read the agents' remote-log metadata."""
    on_kafka = {
        "disable_tiering",
        "enable_tiering",
        "recover_log_dir",
        "expand_partitions",
        "elect_leaders",
    }
    assert {s.kind for s in KAFKA_SCENARIOS.values()} == on_kafka
    assert all(s.kafka and s.cluster == KAFKA_CLUSTER for s in KAFKA_SCENARIOS.values())
    # disable_tiering once per policy: Kafka spells retain and delete as different configs
    tiering = sorted(n for n, s in KAFKA_SCENARIOS.items() if s.kind == "disable_tiering")
    assert tiering == ["disable_tiering-delete", "disable_tiering-retain"]


def _fault_env(scenario: Scenario, fault: str) -> dict[str, str]:
    kind = scenario.kind
    if fault == "kill_boundaries":
        return {"STRATA_FAULT_KILL_AT": f"{kind}:*:before,{kind}:*:after"}
    if fault == "kill_mid_step":
        return {"STRATA_FAULT_KILL_AT": f"{kind}:*:mid"}
    return {"STRATA_FAULT_PAUSE_AT": f"{kind}:{scenario.pause_at}"}


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Injector:
    """Brings the cell's fault in and out while the workflow runs; ``tick`` is called in the
    wait loop. Records what it did in ``notes``."""

    def __init__(self, fault: str, scenario: Scenario, cell: Cell, worker: Worker, wf_id: int):
        self.fault, self.scenario, self.cell, self.worker = fault, scenario, cell, worker
        self.wf_id = wf_id
        self.notes: dict[str, Any] = {}
        self.restore_at: float | None = None
        self.restore: list[str] | None = None
        self.done = fault not in PAUSED_FAULTS
        self.drivers: list[int] = []
        self.spark_kill_pending = fault == "kill_mid_step" and scenario.spark

    def tick(self) -> None:
        if not self.done and (self.worker.fault_dir / f"wf{self.wf_id}-paused").exists():
            self._bring_in()
        if self.restore_at is not None and time.monotonic() >= self.restore_at:
            self._restore()
        if self.spark_kill_pending:
            self._kill_during_driver()

    def _resume(self) -> None:
        (self.worker.fault_dir / f"wf{self.wf_id}-resume").touch()

    def _bring_in(self) -> None:
        self.done = True
        if self.fault == "redis_restart":
            # Kill Redis while the workflow waits on a message in it (a step's wake-up): stop
            # the cell's agent first so the next step that needs it waits. A kind whose steps
            # never wait on an agent (KIP-253's, driven by the controller) loses Redis while
            # its step runs, paused here.
            if not self.scenario.waits_on_agent:
                self._restart_redis()
                self.notes["redis_killed_while"] = "running"
                self._resume()
                return
            broker = self.scenario.agent(self.cell)
            self.cell.sim.cli("kill-broker", str(broker))
            self._resume()
            with contextlib.suppress(AssertionError):
                wait_for(
                    lambda: Workflow.objects.get(pk=self.wf_id).state != WorkflowState.RUNNING,
                    60,
                    "the workflow to wait for the stopped agent",
                )
            state = Workflow.objects.get(pk=self.wf_id).state
            self._restart_redis()
            self.notes["redis_killed_while"] = state
            self.cell.sim.cli("start-broker", str(broker))
        elif self.fault == "postgres_down_10s":
            control = server_control("postgres")
            _run(control["stop"])  # -m immediate: connections drop as in a crash
            self._resume()
            self.restore, self.restore_at = control["start"], time.monotonic() + 10
        elif self.fault == "agent_down_30s":
            broker = self.scenario.agent(self.cell)
            self.cell.sim.cli("kill-broker", str(broker))
            self.notes["agent_stopped"] = broker
            self._resume()
            self.restore = ["start-broker", str(broker)]
            self.restore_at = time.monotonic() + 30

    def _restart_redis(self) -> None:
        control = server_control("redis")
        pid = int(Path(control["pidfile"]).read_text().strip())
        os.kill(pid, signal.SIGKILL)  # nothing persisted: every queued message is gone
        with contextlib.suppress(OSError):
            while True:
                os.kill(pid, 0)
                time.sleep(0.05)
        time.sleep(1)
        _run(control["start"])
        self.notes["redis_restarted"] = True

    def _restore(self) -> None:
        assert self.restore is not None
        if self.fault == "agent_down_30s":
            self.cell.sim.cli(*self.restore)
        else:
            _run(self.restore)
        self.notes["restored_after_s"] = 30 if self.fault == "agent_down_30s" else 10
        self.restore_at = None

    def _kill_during_driver(self) -> None:
        """SIGKILL the worker while this workflow's deleting Spark job has its JVM up; a
        supervisor starts it again. The job's processes must follow the worker."""
        run = (
            SparkJobRun.objects.filter(dry_run=False, state=SparkRunState.RUNNING)
            .order_by("-pk")
            .first()
        )
        if run is None:
            return
        pids = processes_matching(f"/run-{run.pk}/".encode())
        jvm = [p for p in pids if b"SparkSubmit" in Path(f"/proc/{p}/cmdline").read_bytes()]
        if not jvm:
            return
        self.spark_kill_pending = False
        self.drivers = pids
        self.worker.crash()
        self.notes["killed_during_spark_run"] = run.pk
        self.worker.start()


def _approve(api, wf_id: int, approvers) -> None:
    for user in approvers:
        wf = Workflow.objects.get(pk=wf_id)
        if wf.state != WorkflowState.PENDING_APPROVAL:
            return
        response = api(user).post(f"/workflows/{wf_id}/approve", {"plan_hash": wf.plan_hash})
        assert response.status_code == 200, response.json()


def _effects_once(wf: Workflow) -> int:
    """One audit event per effect: every action outside the workflow's own life (its kind's
    actions, Spark runs) once per target."""
    effects = Counter(
        AuditEvent.objects.filter(workflow=wf)
        .exclude(action__startswith="workflow.")
        .values_list("action", "target_type", "target_id")
    )
    repeated = {key: n for key, n in effects.items() if n > 1}
    assert not repeated, f"effects audited more than once: {repeated}"
    return len(effects)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_cell(
    kind, fault, sim, worker_factory, api, operator, approver, second_approver, record_property
):
    cell = Cell(sim, topic=f"c.{kind}.{fault}")
    cluster = sim.register(CLUSTER)
    run_cell(
        SCENARIOS[kind], fault, cell, cluster, worker_factory, api,
        (operator, approver, second_approver), record_property,
    )  # fmt: skip


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kafka_kind", sorted(KAFKA_SCENARIOS))
def test_kafka_cell(
    kafka_kind, fault, sim, worker_factory, api, operator, approver, second_approver,
    record_property,
):  # fmt: skip
    """The same cell on the same simulated cluster registered as a ``kafka`` cluster (#36):
    its steps speak Kafka's protocol to the brokers' listeners; "agent down" stops one
    broker's process, its Kafka listener with it."""
    cell = Cell(sim, topic=f"k.{kafka_kind}.{fault}")
    cluster = sim.register_kafka(KAFKA_CLUSTER)
    run_cell(
        KAFKA_SCENARIOS[kafka_kind], fault, cell, cluster, worker_factory, api,
        (operator, approver, second_approver), record_property,
    )  # fmt: skip


def run_cell(
    scenario: Scenario,
    fault: str,
    cell: Cell,
    cluster: Any,
    worker_factory: Any,
    api: Any,
    users: tuple[Any, Any, Any],
    record_property: Any,
) -> None:
    """One cell: set up, request, approve, bring the fault in, then check exactly once."""
    kind, sim = scenario.kind, cell.sim
    operator, approver, second_approver = users
    scenario.setup(cell)
    do_sync_cluster(cluster)
    worker = worker_factory(**dict(scenario.worker_env), **_fault_env(scenario, fault))
    load = Load(sim)
    started = time.monotonic()
    try:
        # the API's flat aliases, the rest (e.g. recover_log_dir's move_replicas) in params
        flat = {k: v for k, v in cell.params.items() if k in FLAT_REQUEST_FIELDS}
        rest = {k: v for k, v in cell.params.items() if k not in FLAT_REQUEST_FIELDS}
        response = api(operator).post(
            "/workflows",
            {"kind": kind, "cluster": cluster.name, **flat, **({"params": rest} if rest else {})},
        )
        assert response.status_code == 201, response.json()
        created = planned_from(api, operator, response.json(), timeout=300)
        assert created["state"] == WorkflowState.PENDING_APPROVAL, created
        wf_id = created["id"]
        record_property("workflow", wf_id)
        _approve(api, wf_id, (approver, second_approver))
        injector = Injector(fault, scenario, cell, worker, wf_id)
        gate = db_safe(lambda: scenario.during(cell, wf_id, api(operator)) or True)

        def ended() -> bool:
            injector.tick()
            gate()
            worker.supervise()
            return Workflow.objects.get(pk=wf_id).is_terminal

        wait_for(ended, CELL_TIMEOUT, f"{kind} under {fault} to end")
        while injector.restore_at is not None:  # the fault outlived the workflow: end it
            injector.tick()
            time.sleep(0.25)
        record_property("workflow_seconds", round(time.monotonic() - started, 1))
    finally:
        load.stop()
    worker.stop()
    record_property("worker_exits", len(worker.exits))
    record_property("notes", injector.notes)

    wf = Workflow.objects.get(pk=wf_id)
    assert wf.state == WorkflowState.SUCCEEDED, (wf.error_code, wf.error_message, worker.tail())
    steps = list(wf.steps.order_by("position"))
    for step in steps:  # one completion per step
        n = AuditEvent.objects.filter(
            workflow=wf, action=AuditAction.STEP_SUCCEEDED, extra__position=step.position
        ).count()
        assert n == 1, f"step {step.position} {step.name} completed {n} times"
    assert (
        AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_SUCCEEDED).count() == 1
    )
    record_property("effects", _effects_once(wf))
    scenario.check(cell, wf)

    markers = {p.name for p in worker.fault_dir.iterdir()} if worker.fault_dir.exists() else set()
    kills = [m for m in markers if m.endswith(("-before", "-mid", "-after"))]
    record_property("kills", len(kills) + (1 if injector.drivers else 0))
    if fault == "kill_boundaries":
        assert len(kills) == 2 * len(steps), sorted(kills)  # every boundary was hit
    elif fault == "kill_mid_step":
        assert len(kills) == len(steps), sorted(kills)
    elif fault == "redis_restart":
        assert injector.notes.get("redis_restarted")
        expected = "waiting" if scenario.waits_on_agent else "running"
        assert injector.notes["redis_killed_while"] == expected, injector.notes
        assert worker.exits == [], f"the worker exited on the Redis restart: {worker.exits}"
    else:
        assert injector.notes.get("restored_after_s"), injector.notes
    if fault != "kill_mid_step":
        assert worker.exits == [], worker.exits
    if injector.drivers:  # the killed worker's Spark processes did not go on unsupervised
        wait_for(
            lambda: not [p for p in injector.drivers if Path(f"/proc/{p}").exists()],
            60,
            "the killed worker's Spark processes to be gone",
        )
    found = load.verify(sim)
    record_property("load", found)
    assert (found["lost"], found["duplicated"]) == (0, 0), found
    assert found["acked"] > 0, found
    result = verify_chain()
    assert result.ok, result.first_broken
