"""The chaos cells of the kinds that run on a ``kafka`` cluster (#36): the session's simulated
cluster registered through its brokers' Kafka listeners (SASL/PLAIN, ``Sim.register_kafka``),
the same faults and fault-independent checks as the agents' cells (``test_chaos.py``).

"Once on the cluster" is read twice where it can be: over Kafka's protocol (the configs, the
offsets, the partition count) and underneath, in the simulated controller (a disable is one
tiered-epoch increment there: an IncrementalAlterConfigs applied twice would be two). Keyed by
the table's row name (``disable_tiering`` has two: retain and delete)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from audit.models import AuditEvent
from broker_agent.contract.choices import DisablePolicy, LogDirState, TieredState
from workflows.choices import AuditAction, StepState, WorkflowState
from workflows.kinds.cluster_writes import KafkaWrites, writes_for
from workflows.kinds.disks_kafka import KafkaRecoverAction
from workflows.kinds.disks_kafka_moves import MoveAction
from workflows.kinds.leaders import LeaderAction
from workflows.kinds.tiering_kafka import ALTER_CONFIGS, EARLIEST, EARLIEST_LOCAL
from workflows.kinds.topology_kafka import CREATE_PARTITIONS
from workflows.models import Workflow

from .conftest import KAFKA_CLUSTER
from .scenarios import (
    Cell,
    Scenario,
    _check_elect,
    _leader,
    _nothing_lost,
    _setup_elect,
    _setup_enable,
    _setup_expand,
    _tiered_topic,
    break_leader_dir,
)

#: latest-tiered must stand still this long for a retain to be verified (the simulated copier
#: runs every 0.5 s; the product's 30 s is for real brokers)
TIERING_ENV = (("STRATA_TIER_COPY_QUIET_SECONDS", "3"),)
TIERED_PARTITIONS = 2


@contextlib.contextmanager
def _kafka() -> Iterator[KafkaWrites]:
    with writes_for(KAFKA_CLUSTER) as writes:
        assert isinstance(writes, KafkaWrites)
        yield writes


def _sent_once(wf: Workflow, action: str, target: str) -> AuditEvent:
    [event] = AuditEvent.objects.filter(workflow=wf, action=action)
    assert event.target_id == f"{KAFKA_CLUSTER}/{target}", event.target_id
    assert event.before["backend"] == "kafka", event.before
    return event


# --- KIP-950 as Kafka 3.9 shipped it -----------------------------------------------------------


def _setup_disable(policy: str):
    def setup(cell: Cell) -> None:
        _tiered_topic(cell.sim, cell.topic, partitions=TIERED_PARTITIONS, records=120)
        cell.params = {"topic": cell.topic, "policy": policy}

    return setup


def _check_retain(cell: Cell, wf: Workflow) -> None:
    event = _sent_once(wf, ALTER_CONFIGS, cell.topic)
    assert event.after == {
        "configs": {"local.retention.bytes": "-2", "remote.log.copy.disable": "true"}
    }
    with _kafka() as kafka:
        read = kafka.topic_configs(cell.topic)
    assert (read["remote.log.copy.disable"], read["local.retention.bytes"]) == ("true", "-2")
    t = cell.sim.controller.topic(cell.topic)  # one disable underneath: one epoch increment
    assert (t.tiered_state, t.disable_policy, t.tiered_epoch) == (
        TieredState.DISABLED,
        DisablePolicy.RETAIN,
        1,
    )
    assert "latest_tiered" in wf.steps.get(name="verify_copy_stopped").output
    _nothing_lost(cell)  # retain: the remote data stays readable


def _check_delete(cell: Cell, wf: Workflow) -> None:
    event = _sent_once(wf, ALTER_CONFIGS, cell.topic)
    assert event.after == {
        "configs": {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    }
    parts = list(range(TIERED_PARTITIONS))
    with _kafka() as kafka:
        read = kafka.topic_configs(cell.topic)
        start = kafka.offsets(cell.topic, parts, EARLIEST)
        local = kafka.offsets(cell.topic, parts, EARLIEST_LOCAL)
    assert (read["remote.storage.enable"], read["remote.log.delete.on.disable"]) == (
        "false",
        "true",
    )
    assert all(start[p] >= local[p] for p in parts), (start, local)
    t = cell.sim.controller.topic(cell.topic)
    assert (t.tiered_state, t.disable_policy, t.tiered_epoch) == (
        TieredState.DISABLED,
        DisablePolicy.DELETE,
        1,
    )


def _check_enable(cell: Cell, wf: Workflow) -> None:
    event = _sent_once(wf, ALTER_CONFIGS, cell.topic)
    assert event.after == {"configs": {"remote.log.copy.disable": None}}
    with _kafka() as kafka:
        read = kafka.topic_configs(cell.topic)
    assert (read["remote.storage.enable"], read["remote.log.copy.disable"]) == ("true", "false")
    t = cell.sim.controller.topic(cell.topic)
    assert (t.tiered_state, t.tiered_epoch) == (TieredState.ENABLED, 1)  # the epoch is kept
    _nothing_lost(cell)


# --- KIP-112 on Kafka: cordoned.log.dirs and two manual steps ----------------------------------


def _setup_recover(cell: Cell) -> None:
    """With ``move_replicas``: the cell's topic has 2 replicas on the 3 brokers, so its
    partitions on the failed dir have a broker to move to (the load topic's, on all three,
    stay and are re-created at the restart)."""
    break_leader_dir(cell, KAFKA_CLUSTER, rf=2, move_replicas=True)


def _at_gate(wf_id: int, step: str) -> bool:
    return Workflow.objects.filter(
        pk=wf_id, state=WorkflowState.WAITING, steps__name=step, steps__state=StepState.WAITING
    ).exists()


def _recover_gates(cell: Cell, wf_id: int, api: Any) -> None:
    """The operator, as test_recover_log_dir_kafka does it: replaces the disk and confirms,
    then (the cordon lifted) restarts the broker by hand and confirms. Each once."""
    broker, name = cell.params["broker"], cell.params["log_dir"]
    if not cell.facts.get("disk_confirmed") and _at_gate(wf_id, "confirm_disk_replaced"):
        if cell.sim.log_dir_path(broker, name).is_file():
            cell.sim.replace_disk(broker, name)
        if api.post(f"/workflows/{wf_id}/confirm").status_code == 200:
            cell.facts["disk_confirmed"] = True
    if not cell.facts.get("restart_confirmed") and _at_gate(wf_id, "restart_broker"):
        if not cell.facts.get("restarted"):
            cell.sim.cli("restart-broker", str(broker))
            cell.facts["restarted"] = True
        if api.post(f"/workflows/{wf_id}/confirm").status_code == 200:
            cell.facts["restart_confirmed"] = True


def _check_recover(cell: Cell, wf: Workflow) -> None:
    broker, name = cell.params["broker"], cell.params["log_dir"]
    for action in (KafkaRecoverAction.CORDON, KafkaRecoverAction.UNCORDON):
        [event] = AuditEvent.objects.filter(workflow=wf, action=action)
        assert event.target_id == f"{KAFKA_CLUSTER}/{broker}:{name}", event.target_id
    confirmed = AuditEvent.objects.filter(workflow=wf, action=AuditAction.WORKFLOW_CONFIRMED)
    assert sorted(e.extra["step"] for e in confirmed) == [
        "confirm_disk_replaced",
        "restart_broker",
    ]
    verified = wf.steps.get(name="verify").output
    assert verified["log_dir_state"] == LogDirState.ONLINE and verified["reassignments"] == []
    assert cell.sim.dir_state(broker, name) == LogDirState.ONLINE
    # the cell topic's partitions on the dir moved off the broker, each once, throttled
    moves = wf.plan["moves"]
    assert any(m["topic"] == cell.topic and m["partition"] == 0 for m in moves), moves
    for m in moves:
        part = next(
            p for p in cell.sim.controller.topic(m["topic"]).partitions
            if p.partition == m["partition"]
        )  # fmt: skip
        assert part.replicas == m["replicas_after"] and broker not in part.replicas
    throttle = wf.plan["throttle"]  # per topic moved (earlier cells' too) and broker
    resources = len(throttle["leader_replicas"]) + len(throttle["brokers"])
    for action, count in (
        (MoveAction.REASSIGN, 1),
        (MoveAction.THROTTLE_SET, resources),
        (MoveAction.THROTTLE_REMOVE, resources),
    ):
        assert AuditEvent.objects.filter(workflow=wf, action=action).count() == count, action
    _nothing_lost(cell)


# --- CreatePartitions, ElectLeaders ------------------------------------------------------------


def _check_expand(cell: Cell, wf: Workflow) -> None:
    event = _sent_once(wf, CREATE_PARTITIONS, cell.topic)
    assert event.after == {"partition_count": 4}
    t = cell.sim.controller.topic(cell.topic)
    assert t.undeleted_partition_count == 4 and len(t.partitions) == 4
    assert all(p.leader >= 0 for p in t.partitions)
    _nothing_lost(cell)  # keys remapped, no record lost


def _check_elect_kafka(cell: Cell, wf: Workflow) -> None:
    _sent_once(wf, LeaderAction.ELECT_PREFERRED, cell.topic)
    _check_elect(cell, wf)


def _topic_leader(cell: Cell) -> int:
    return _leader(cell.sim, cell.topic, 0)


#: The Redis cell: a broker down does not make a kafka cluster unreachable (the client asks
#: another broker), so no step waits on one: Redis is killed while a step runs.
KAFKA_SCENARIOS = {
    name: scenario
    for name, scenario in (
        (
            "disable_tiering-retain",
            Scenario(
                "disable_tiering",
                _setup_disable(DisablePolicy.RETAIN),
                _check_retain,
                waits_on_agent=False,
                kafka=True,
                worker_env=TIERING_ENV,
            ),
        ),
        (
            "disable_tiering-delete",
            Scenario(
                "disable_tiering",
                _setup_disable(DisablePolicy.DELETE),
                _check_delete,
                waits_on_agent=False,
                kafka=True,
                worker_env=TIERING_ENV,
            ),
        ),
        (
            "enable_tiering",
            Scenario(
                "enable_tiering",
                _setup_enable,
                _check_enable,
                waits_on_agent=False,
                kafka=True,
                worker_env=TIERING_ENV,
            ),
        ),
        (
            "recover_log_dir",
            Scenario(
                "recover_log_dir",
                _setup_recover,
                _check_recover,
                agent=lambda cell: cell.params["broker"],
                during=_recover_gates,
                waits_on_agent=False,
                kafka=True,
            ),
        ),
        (
            "expand_partitions",
            Scenario(
                "expand_partitions",
                _setup_expand,
                _check_expand,
                agent=_topic_leader,
                waits_on_agent=False,
                kafka=True,
            ),
        ),
        (
            "elect_leaders",
            Scenario(
                "elect_leaders",
                _setup_elect,
                _check_elect_kafka,
                agent=lambda cell: cell.facts["bystander"],
                waits_on_agent=False,
                kafka=True,
            ),
        ),
    )
}
