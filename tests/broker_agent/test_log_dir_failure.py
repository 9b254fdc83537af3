"""Acceptance 2: KIP-112's three system tests, under continuous produce and consume.

A log dir is failed the way KIP-112's system tests do it: the folder is replaced by a file
(``chmod 000`` does not stop root, which these tests may run as). Then the disk is "replaced"
(an empty folder); the dir stays OFFLINE until the broker process restarts (KIP-112: "fix disks
and reboot broker"), and after the restart the replica is re-created and rejoins the ISR.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from broker_agent.contract.choices import LogDirState

from .conftest import Load, wait_until

pytestmark = pytest.mark.integration

FAST = (
    "--probe-interval",
    "0.5",
    "--session-timeout-ms",
    "2000",
    "--replica-lag-time-max-ms",
    "3000",
)


def _break_dir(path: str) -> None:
    """Remove the log directory and create a file with the same path (KIP-112 system test).

    The folder is moved away atomically (the broker may be writing into it right now), then a
    file takes its path."""
    os.rename(path, path + ".removed")
    Path(path).write_text("not a directory")


def _heal_dir(path: str) -> None:
    """The disk is replaced: an empty directory again."""
    Path(path).unlink()
    Path(path).mkdir()
    shutil.rmtree(path + ".removed", ignore_errors=True)


def _replica_dir(sim, broker_id: int, topic: str):
    snap = sim.agent(broker_id).snapshot()
    r = next(r for r in snap.replicas if r.topic == topic)
    return next(d for d in snap.log_dirs if d.name == r.log_dir)


def _assert_offline_gauges(sim, broker_id: int, topic: str, dir_name: str):
    snap = sim.agent(broker_id).snapshot()
    assert snap.offline_log_directory_count == 1  # OfflineLogDirectoryCount
    assert snap.offline_replica_count == 1  # OfflineReplicaCount
    assert {d.name: d.state for d in snap.log_dirs}[dir_name] == LogDirState.OFFLINE
    wait_until(
        lambda: broker_id in sim.partition(topic).offline_replicas,
        10,
        what="controller lists the offline replica",
    )
    part = sim.partition(topic)
    assert part.leader != broker_id and broker_id not in part.isr


def _still_serves_new_replicas(sim, broker_id: int):
    """Create another RF=3 topic, kill the two other brokers: the broker with the bad dir
    leads it from its good dir and produce / consume work."""
    sim.controller.create_topic("second", 1, 3)
    wait_until(lambda: broker_id in sim.partition("second").created, 15, what="replica created")
    r = sim.replica(broker_id, "second")
    assert r.state == "ONLINE"
    bad = {
        d.name for d in sim.agent(broker_id).snapshot().log_dirs if d.state == LogDirState.OFFLINE
    }
    assert r.log_dir not in bad
    others = [b for b in (1, 2, 3) if b != broker_id]
    for b in others:
        sim.cli("kill-broker", str(b))
    wait_until(
        lambda: sim.partition("second").leader == broker_id, 20, what="leadership on survivor"
    )
    with Load(sim, "second") as load:
        load.wait_acked(200)
    load.verify_exactly_once()
    for b in others:
        sim.cli("start-broker", str(b))
    wait_until(
        lambda: all(b.alive for b in sim.controller.metadata().brokers), 20, what="brokers back"
    )


def _heal_and_restart(sim, broker_id: int, topic: str, dir_info):
    _heal_dir(dir_info.path)
    # the disk works again, but Kafka keeps a failed dir offline while the process runs
    probed = sim.agent(broker_id).probe_log_dir(dir_info.name)
    assert probed.state == LogDirState.OFFLINE and probed.probe_latency_ms is not None
    assert broker_id not in sim.partition(topic).isr
    sim.cli("restart-broker", str(broker_id))
    wait_until(lambda: broker_id in sim.partition(topic).isr, 30, what="replica back in the ISR")
    status = sim.agent(broker_id).recreate_status()
    assert all(r["state"] == "ONLINE" for r in status.replicas)
    snap = sim.agent(broker_id).snapshot()
    assert snap.offline_log_directory_count == 0 and snap.offline_replica_count == 0


def _wait_offline(sim, broker_id, name):
    def offline():
        snap = sim.agent(broker_id).snapshot()
        return {d.name: d.state for d in snap.log_dirs}[name] == LogDirState.OFFLINE

    # the dir must show OFFLINE within 5 s, idle or not
    wait_until(offline, 5, 0.05, what="log dir OFFLINE within 5 s")


def test_log_dir_failure_on_leader_during_runtime(sim_factory):
    sim = sim_factory(3, 2, *FAST)
    sim.controller.create_topic("events", 1, 3)
    leader = sim.partition("events").leader
    with Load(sim, "events") as load:
        load.wait_acked(200)
        d = _replica_dir(sim, leader, "events")
        _break_dir(d.path)
        _wait_offline(sim, leader, d.name)
        _assert_offline_gauges(sim, leader, "events", d.name)
        load.wait_acked(200)
    load.verify_exactly_once()
    _still_serves_new_replicas(sim, leader)
    _heal_and_restart(sim, leader, "events", d)


def test_log_dir_failure_on_follower_during_runtime(sim_factory):
    sim = sim_factory(3, 2, *FAST)
    sim.controller.create_topic("events", 1, 3)
    part = sim.partition("events")
    follower = next(b for b in part.replicas if b != part.leader)
    with Load(sim, "events") as load:
        load.wait_acked(200)
        d = _replica_dir(sim, follower, "events")
        _break_dir(d.path)
        _wait_offline(sim, follower, d.name)
        _assert_offline_gauges(sim, follower, "events", d.name)
        load.wait_acked(200)
    load.verify_exactly_once()
    _still_serves_new_replicas(sim, follower)
    _heal_and_restart(sim, follower, "events", d)


def test_log_dir_failure_on_leader_during_bootstrap(sim_factory):
    sim = sim_factory(3, 2, *FAST)
    sim.controller.create_topic("events", 1, 3)
    leader = sim.partition("events").leader
    with Load(sim, "events") as load:
        load.wait_acked(200)
        d = _replica_dir(sim, leader, "events")
        sim.cli("kill-broker", str(leader))
        _break_dir(d.path)
        sim.cli("start-broker", str(leader))
        _wait_offline(sim, leader, d.name)
        _assert_offline_gauges(sim, leader, "events", d.name)
        load.wait_acked(200)
    load.verify_exactly_once()
    _heal_and_restart(sim, leader, "events", d)


def test_a_failed_dir_stays_offline_until_the_broker_restarts_then_refills_without_reset(
    sim_factory,
):
    """KIP-112: a failed dir stays offline while the broker runs ("fix disks and reboot
    broker"; Kafka's ``LogManager.handleLogDirFailure`` drops the dir from its live dirs, read
    again only at start). After the restart: "Even if isNewReplica=false and replica is not found on any log
    directory, broker will still create replica on a good log directory if there is no bad log
    directory" - the replaced disk refills from the leader; LogDirReset is not needed."""
    sim = sim_factory(3, 2, *FAST)
    sim.controller.create_topic("events", 1, 3)
    part = sim.partition("events")
    follower = next(b for b in part.replicas if b != part.leader)
    with Load(sim, "events") as load:
        load.wait_acked(200)
        d = _replica_dir(sim, follower, "events")
        _break_dir(d.path)
        _wait_offline(sim, follower, d.name)
        _assert_offline_gauges(sim, follower, "events", d.name)  # offline while the dir is bad
        _heal_dir(d.path)  # an empty disk in its place, no LogDirReset
        before = sim.agent(follower).incarnation()
        assert sim.agent(follower).probe_log_dir(d.name).state == LogDirState.OFFLINE
        load.wait_acked(100)  # the process runs on, the dir stays offline
        assert sim.agent(follower).snapshot().offline_log_directory_count == 1
        assert follower not in sim.partition("events").isr
        sim.cli("restart-broker", str(follower))
        assert sim.agent(follower).incarnation() != before
        wait_until(
            lambda: follower in sim.partition("events").isr, 30, what="replica back in the ISR"
        )
        load.wait_acked(200)
    load.verify_exactly_once()
    r = sim.replica(follower, "events")
    assert r.state == "ONLINE" and r.log_end_offset > 0
    snap = sim.agent(follower).snapshot()
    assert snap.offline_log_directory_count == 0 and snap.offline_replica_count == 0
