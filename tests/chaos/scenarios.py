"""Per workflow kind: how a chaos cell prepares the cluster, what it requests, what it does
while the workflow runs (a human gate), and what "succeeded exactly once" means for its effects
on the simulated cluster. The fault-independent checks live in ``test_chaos.py``."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from typing import Any

from audit.models import AuditEvent
from broker_agent.contract.choices import LogDirState, RemoteSegmentState, TieredState
from broker_agent.simulator.demo import verify_topic
from tests import s3util
from tests.workflows.simcluster import Sim, wait_plan_stable, wait_until
from workflows.choices import StepState, WorkflowState
from workflows.kinds.disks import DiskAction
from workflows.kinds.leaders import LeaderAction
from workflows.kinds.tiering import TieringAction
from workflows.kinds.topology import TopologyAction
from workflows.models import Workflow

from .conftest import CLUSTER, KAFKA_CLUSTER

HOUR_MS = 3_600_000


@dataclasses.dataclass
class Cell:
    """What one cell carries from its setup to its checks."""

    sim: Sim
    topic: str
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Scenario:
    kind: str
    setup: Callable[[Cell], None]
    check: Callable[[Cell, Workflow], None]
    #: the broker whose agent the "agent down" fault stops
    agent: Callable[[Cell], int] = lambda cell: 2
    #: called while the workflow runs (e.g. pass a human gate); must be cheap and idempotent
    during: Callable[[Cell, int, Any], None] = lambda cell, wf_id, api: None
    spark: bool = False
    #: whether a stopped agent makes its remaining steps wait (the Redis cell kills Redis
    #: while the workflow waits on a wake-up message; otherwise while a step runs)
    waits_on_agent: bool = True
    #: where the Redis, agent and PostgreSQL faults come in (``step:when``): after the first
    #: step, or before the only one
    pause_at: str = "*:after"
    #: the cell's cluster: the controller's API (``agents``) or the brokers' Kafka listeners
    #: (``kafka``, #36), and the worker's extra settings
    kafka: bool = False
    worker_env: tuple[tuple[str, str], ...] = ()

    @property
    def cluster(self) -> str:
        return KAFKA_CLUSTER if self.kafka else CLUSTER


# --- shared set-ups ----------------------------------------------------------------------------


def _leader(sim: Sim, topic: str, partition: int) -> int:
    return next(
        p.leader for p in sim.controller.topic(topic).partitions if p.partition == partition
    )


def _tiered_topic(sim: Sim, topic: str, *, partitions: int, records: int) -> None:
    """A tiered topic, RF 3, whose closed segments are all in the remote store; its records
    go through ``sim produce`` so they are in the acknowledgement ledger."""
    sim.cli("create-topic", topic, "--partitions", str(partitions), "--replication-factor", "3",
            "--tiered", "--segment-bytes", "2048", "--config", "local.retention.bytes=1")  # fmt: skip
    sim.cli("produce", "--topic", topic, "--records", str(records), "--keyed", "--batch-size", "20")
    for p in range(partitions):
        leader = _leader(sim, topic, p)
        with sim.agent(leader) as a:
            a.roll(topic, p)

        def tiered(p: int = p, leader: int = leader) -> bool:
            with sim.agent(leader) as a:
                snap = a.snapshot()
            r = next((r for r in snap.replicas if (r.topic, r.partition) == (topic, p)), None)
            return r is not None and r.remote_log_end_offset == r.log_end_offset - 1

        wait_until(tiered, 60, f"{topic}-{p} tiered")


def _plain_topic(sim: Sim, topic: str, partitions: int, rf: int = 3) -> None:
    sim.controller.create_topic(topic, partitions, rf)
    wait_until(
        lambda: all(
            p.leader >= 0 and len(p.created) == rf for p in sim.controller.topic(topic).partitions
        ),
        30,
        f"{topic} online",
    )


def _nothing_lost(cell: Cell) -> None:
    """Every record ``sim produce`` acknowledged to the topic is read back once."""
    found = verify_topic(str(cell.sim.data), cell.topic)
    assert (found["lost"], found["duplicated"]) == (0, 0), found
    cell.facts["topic_records_verified"] = found["acked"]


def _acks(wf: Workflow, action: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for target in AuditEvent.objects.filter(workflow=wf, action=action).values_list(
        "target_id", flat=True
    ):
        broker = int(target.rpartition("/")[2])  # "<cluster>/<broker id>" (audit.targets)
        counts[broker] = counts.get(broker, 0) + 1
    return counts


def _once(wf: Workflow, *actions: str) -> None:
    for action in actions:
        n = AuditEvent.objects.filter(workflow=wf, action=action).count()
        assert n == 1, f"{action} audited {n} times"


# --- KIP-950 -----------------------------------------------------------------------------------


def _setup_disable(cell: Cell) -> None:
    _tiered_topic(cell.sim, cell.topic, partitions=2, records=120)
    cell.params = {"topic": cell.topic, "policy": "retain"}


def _check_disable(cell: Cell, wf: Workflow) -> None:
    t = cell.sim.controller.topic(cell.topic)
    assert (t.tiered_state, t.tiered_epoch) == (TieredState.DISABLED, 1)  # one increment
    assert _acks(wf, TieringAction.DISABLE_REMOTE_TOPIC) == {1: 1, 2: 1, 3: 1}
    _once(wf, TieringAction.START_DISABLEMENT, TieringAction.COMPLETE_DISABLEMENT)
    _nothing_lost(cell)  # policy retain: remote data stays readable


def _setup_enable(cell: Cell) -> None:
    _tiered_topic(cell.sim, cell.topic, partitions=2, records=120)
    cell.sim.cli("disable-tiering", cell.topic, "--policy", "retain")
    cell.params = {"topic": cell.topic}


def _check_enable(cell: Cell, wf: Workflow) -> None:
    t = cell.sim.controller.topic(cell.topic)
    assert (t.tiered_state, t.tiered_epoch) == (TieredState.ENABLED, 1)  # the epoch is kept
    assert _acks(wf, TieringAction.ENABLE_REMOTE_TOPIC) == {1: 1, 2: 1, 3: 1}
    _once(wf, TieringAction.ENABLE)
    _nothing_lost(cell)


# --- KIP-112 -----------------------------------------------------------------------------------


def _setup_recover(cell: Cell) -> None:
    break_leader_dir(cell, CLUSTER)


def break_leader_dir(cell: Cell, cluster: str, rf: int = 3, **params: Any) -> None:
    """A topic (``rf`` replicas) under records whose partition 0 leader's dir fails; the plan
    on ``cluster`` (with ``params``) settled (the ISR shrink and the election after the
    failure)."""
    sim = cell.sim
    _plain_topic(sim, cell.topic, 2, rf)
    sim.cli("produce", "--topic", cell.topic, "--records", "100", "--keyed", "--batch-size", "20")
    broker = _leader(sim, cell.topic, 0)  # a leader's dir fails
    name = sim.dir_of(broker, cell.topic, 0)
    assert name is not None
    # an earlier cell broke this dir too: its old disk's contents are gone with the new disk
    shutil.rmtree(f"{sim.log_dir_path(broker, name)}.failed", ignore_errors=True)
    sim.break_log_dir(broker, name)
    cell.params = {"broker": broker, "log_dir": name, "mode": "replace", **params}
    wait_plan_stable("recover_log_dir", {"cluster": cluster, **cell.params}, timeout=60)


def _recover_gate(cell: Cell, wf_id: int, api: Any) -> None:
    at_gate = Workflow.objects.filter(
        pk=wf_id,
        state=WorkflowState.WAITING,
        steps__name="confirm_disk_replaced",
        steps__state=StepState.WAITING,
    ).exists()
    if not at_gate or cell.facts.get("confirmed"):
        return
    broker, name = cell.params["broker"], cell.params["log_dir"]
    if cell.sim.log_dir_path(broker, name).is_file():
        cell.sim.replace_disk(broker, name)
    response = api.post(f"/workflows/{wf_id}/confirm")
    if response.status_code == 200:
        cell.facts["confirmed"] = True


def _check_recover(cell: Cell, wf: Workflow) -> None:
    broker, name = cell.params["broker"], cell.params["log_dir"]
    # KIP-112: the dir comes back at the broker's restart, done once whatever the chaos
    _once(wf, DiskAction.CORDON, DiskAction.UNCORDON, DiskAction.RESTART_SEEN, DiskAction.RESTART)
    _once(wf, DiskAction.VERIFY_PRODUCE)
    verify = wf.steps.get(name="verify").output
    assert verify["lost"] == [] and verify["missing_on_recovered_replica"] == []
    wait_until(lambda: cell.sim.dir_state(broker, name) == LogDirState.ONLINE, 30, "dir online")
    _nothing_lost(cell)


# --- KIP-253 -----------------------------------------------------------------------------------


def _setup_expand(cell: Cell) -> None:
    _plain_topic(cell.sim, cell.topic, 2)
    cell.sim.cli(
        "produce", "--topic", cell.topic, "--records", "60", "--keyed", "--batch-size", "20"
    )
    cell.params = {"topic": cell.topic, "partitions": 4}


def _check_expand(cell: Cell, wf: Workflow) -> None:
    t = cell.sim.controller.topic(cell.topic)
    assert t.undeleted_partition_count == 4 and len(t.partitions) == 4
    assert all(p.leader >= 0 for p in t.partitions)
    _once(wf, TopologyAction.ALTER_PARTITION_COUNT)
    _nothing_lost(cell)


def _setup_shrink(cell: Cell) -> None:
    sim = cell.sim
    _plain_topic(sim, cell.topic, 2)
    sim.controller.alter_partition_count(cell.topic, 4)
    wait_until(
        lambda: all(p.leader >= 0 for p in sim.controller.topic(cell.topic).partitions),
        30,
        "the four partitions online",
    )
    # records only where they stay: the partitions to remove are empty, nothing to drain
    t = sim.controller.topic(cell.topic)
    values = []
    for p in (0, 1):
        batch = [{"key": None, "value": f"{cell.topic}-{p}-{i}"} for i in range(10)]
        with sim.agent(_leader(sim, cell.topic, p)) as a:
            a.produce(cell.topic, p, batch, undeleted_partition_count=t.undeleted_partition_count)
        values += [r["value"] for r in batch]
    cell.facts["values"] = values
    cell.params = {"topic": cell.topic, "partitions": 2}


def _check_shrink(cell: Cell, wf: Workflow) -> None:
    t = cell.sim.controller.topic(cell.topic)
    assert [p.partition for p in t.partitions] == [0, 1]
    assert wf.steps.get(name="drain").output["removed"] == [2, 3]
    read = cell.sim.read_values(cell.topic)
    assert sorted(read) == sorted(cell.facts["values"])


# --- preferred leader election -----------------------------------------------------------------


def _setup_elect(cell: Cell) -> None:
    """One partition led by another replica after its preferred broker restarted (back in the
    ISR as a follower: the election needs no wait)."""
    sim = cell.sim
    _plain_topic(sim, cell.topic, 1)
    sim.cli("produce", "--topic", cell.topic, "--records", "60", "--keyed", "--batch-size", "20")
    preferred = sim.controller.topic(cell.topic).partitions[0].replicas[0]
    sim.cli("restart-broker", str(preferred))

    def follower_again() -> bool:
        p = sim.controller.topic(cell.topic).partitions[0]
        return p.leader not in (-1, preferred) and set(p.isr) == set(p.replicas)

    wait_until(follower_again, 60, "the restarted broker a follower in the ISR")
    p = sim.controller.topic(cell.topic).partitions[0]
    cell.facts["preferred"] = preferred
    # the "agent down" fault stops the replica that neither leads nor is preferred
    cell.facts["bystander"] = next(b for b in p.replicas if b not in (preferred, p.leader))
    cell.params = {"topic": cell.topic}


def _check_elect(cell: Cell, wf: Workflow) -> None:
    p = cell.sim.controller.topic(cell.topic).partitions[0]
    assert p.leader == cell.facts["preferred"], p
    _once(wf, LeaderAction.ELECT_PREFERRED)
    _nothing_lost(cell)


# --- Spark over the remote tier ----------------------------------------------------------------


def _dry_run(job: str, **arguments: Any) -> int:
    from tests.workflows.conftest import spark_dry_run

    return spark_dry_run(job, CLUSTER, timeout=900, **arguments).pk


def _segments(cell: Cell) -> list:
    with cell.sim.agent(_leader(cell.sim, cell.topic, 0)) as a:
        return list(a.inventory(cell.topic))


def _object(segment: Any) -> str:
    return segment.object_path


def _setup_purge(cell: Cell) -> None:
    from spark_tasks.models import SparkJob

    _tiered_topic(cell.sim, cell.topic, partitions=1, records=100)
    cell.sim.cli("disable-tiering", cell.topic, "--policy", "delete")
    cell.facts["segments"] = len(_segments(cell))
    cell.params = {"spark_run": _dry_run(SparkJob.PURGE)}


def _check_purge(cell: Cell, wf: Workflow) -> None:
    after = _segments(cell)
    assert len(after) == cell.facts["segments"] > 0
    assert all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in after)
    assert not any(s3util.exists(_object(s)) for s in after)


def _setup_sweep(cell: Cell) -> None:
    from spark_tasks.models import SparkJob

    _tiered_topic(cell.sim, cell.topic, partitions=1, records=60)
    referenced = _segments(cell)
    orphan = s3util.sibling(_object(referenced[0]), "orphan-0001.log")
    s3util.put(orphan, b"x" * 1000)
    cell.facts.update(orphan=orphan, referenced=[_object(s) for s in referenced])
    now_ms = int(time.time() * 1000) + 2 * HOUR_MS  # the orphan is "older than 1 h" then
    cell.params = {"spark_run": _dry_run(SparkJob.ORPHANS, older_than="1h", now_ms=now_ms)}


def _check_sweep(cell: Cell, wf: Workflow) -> None:
    assert not s3util.exists(cell.facts["orphan"])
    assert all(s3util.exists(uri) for uri in cell.facts["referenced"])
    assert len(_segments(cell)) == len(cell.facts["referenced"])  # their metadata records too
    _nothing_lost(cell)


def _topic_leader(cell: Cell) -> int:
    return _leader(cell.sim, cell.topic, 0)


SCENARIOS = {
    s.kind: s
    for s in (
        Scenario("disable_tiering", _setup_disable, _check_disable),
        Scenario("enable_tiering", _setup_enable, _check_enable),
        Scenario(
            "recover_log_dir",
            _setup_recover,
            _check_recover,
            agent=lambda cell: cell.params["broker"],
            during=_recover_gate,
        ),
        Scenario("expand_partitions", _setup_expand, _check_expand, waits_on_agent=False),
        Scenario("shrink_partitions", _setup_shrink, _check_shrink, waits_on_agent=False),
        Scenario(
            "elect_leaders",
            _setup_elect,
            _check_elect,
            agent=lambda cell: cell.facts["bystander"],
            waits_on_agent=False,  # its steps ask the controller, never an agent
        ),
        Scenario(
            "remote_purge",
            _setup_purge,
            _check_purge,
            agent=_topic_leader,
            spark=True,
            # its steps address the partition's leader, which moves when that agent stops: the
            # workflow may not wait, so the Redis cell kills Redis while a step runs
            waits_on_agent=False,
        ),
        Scenario(
            "orphan_sweep",
            _setup_sweep,
            _check_sweep,
            spark=True,
            waits_on_agent=False,  # its one step is the Spark delete: no agent
            pause_at="delete_objects:before",
        ),
    )
}
