"""The simulated cluster for the tiering / Spark workflow tests: real processes in a temporary
data dir (``python -m broker_agent sim up``), always torn down; helpers to make a tiered topic,
register the cluster in console and sync it (the plans read the synced inventory); requests
planned by the real worker (``request_planned``, ``request_outcome`` from :mod:`.simcluster`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from audit.models import AuditEvent
from broker_agent.contract.choices import RemoteSegmentState
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import Sim, _kill_all, run_cli, wait_until
from workflows.models import Workflow

from .simcluster import planned_from, request_outcome, request_planned

__all__ = [
    "CLUSTER",
    "planned_from",
    "register",
    "request_outcome",
    "request_planned",
    "sim_cluster",
    "sync",
    "tiered_topic",
    "wait_until",
]

CLUSTER = "lab"
SEGMENT_BYTES = "2048"


@contextlib.contextmanager
def sim_cluster(data: Path, *extra: str, brokers: int = 3) -> Iterator[Sim]:
    """``sim up`` with ``brokers`` brokers and two log dirs each; ``sim down`` at the end."""
    try:
        proc = run_cli(data, "up", "--brokers", str(brokers), "--log-dirs", "2", *extra)
        sim = Sim(data, json.loads(proc.stdout.strip().splitlines()[-1]))
    except BaseException:
        _kill_all(data)
        raise
    try:
        yield sim
    finally:
        sim.close()
        with contextlib.suppress(Exception):
            run_cli(data, "down", check=False, timeout=60)
        _kill_all(data)


def register(sim: Sim, name: str = CLUSTER) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(
        name=name,
        defaults={"controller_url": sim.urls["controller"], "secret_ref": str(sim.data / "secret")},
    )
    return cluster


def sync(name: str = CLUSTER) -> None:
    do_sync_cluster(Cluster.objects.get(name=name))


def tiered_topic(sim: Sim, topic: str, *, partitions: int = 3, records: int = 300) -> None:
    """A tiered topic, RF 3, whose closed segments are all in the remote store."""
    sim.cli(
        "create-topic",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "3",
        "--tiered",
        "--segment-bytes",
        SEGMENT_BYTES,
        "--config",
        "local.retention.bytes=1",
    )
    sim.cli("produce", "--topic", topic, "--records", str(records), "--keyed", "--batch-size", "20")
    for p in range(partitions):
        leader = sim.partition(topic, p).leader
        sim.agent(leader).roll(topic, p)
        wait_until(
            lambda p=p, leader=leader: (
                (r := sim.replica(leader, topic, p)) is not None
                and r.remote_log_end_offset == r.log_end_offset - 1
            ),
            60,
            what=f"{topic}-{p} tiered",
        )


def remote_segments(sim: Sim, topic: str) -> list:
    leader = sim.partition(topic, 0).leader
    return [
        s
        for s in sim.agent(leader).inventory(topic)
        if s.state != RemoteSegmentState.DELETE_SEGMENT_FINISHED
    ]


def state_of(pk: int) -> str:
    return Workflow.objects.values_list("state", flat=True).get(pk=pk)


def acks_per_broker(wf_id: int, action: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for target in AuditEvent.objects.filter(workflow_id=wf_id, action=action).values_list(
        "target_id", flat=True
    ):
        broker = int(target.rpartition("/")[2])  # "<cluster>/<broker id>" (audit.targets)
        counts[broker] = counts.get(broker, 0) + 1
    return counts
