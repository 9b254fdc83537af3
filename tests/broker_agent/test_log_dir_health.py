"""KIP-112 dir health beyond failure: DEGRADED (a probe far slower than its peers, with latency
injected by the test-only hook) and the admin cordon (KIP-1066)."""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import ErrorCode, LogDirState, ReplicaState
from broker_agent.contract.client import AgentError

from .conftest import wait_until

pytestmark = pytest.mark.integration


def _dirs(agent) -> dict:
    return {d.name: d for d in agent.log_dirs()}


def _set_probe_delay(agent, name: str, delay_ms: int) -> dict:
    return agent.request(
        "PUT", f"/v1/test/log-dirs/{name}/probe-delay", body={"delay_ms": delay_ms}
    )


def test_a_dir_whose_probe_is_far_slower_than_its_peers_is_degraded(sim_factory, agent_test_hooks):
    sim = sim_factory(1, 3, "--probe-interval", "0.2")
    sim.controller.create_topic("slow", 3, 1)
    agent = sim.agent(1)
    wait_until(lambda: len(agent.snapshot().replicas) == 3, 15, what="replicas")
    _set_probe_delay(agent, "logdir-1", 1500)
    wait_until(lambda: _dirs(agent)["logdir-1"].state == LogDirState.DEGRADED, 30, what="DEGRADED")
    dirs = _dirs(agent)
    assert dirs["logdir-1"].probe_latency_ms >= 1500
    assert dirs["logdir-1"].error is None
    assert dirs["logdir-0"].state == dirs["logdir-2"].state == LogDirState.ONLINE
    # degraded is still good: its replica stays online and serves produce / fetch
    snap = agent.snapshot()
    assert snap.offline_log_directory_count == 0
    slow = next(r for r in snap.replicas if r.log_dir == "logdir-1")
    assert slow.state == ReplicaState.ONLINE
    resp = agent.produce(
        "slow",
        slow.partition,
        [{"key": None, "value": "on a slow disk"}],
        undeleted_partition_count=3,
    )
    assert agent.fetch("slow", slow.partition, resp.base_offset).records[0].value == (
        "on a slow disk"
    )
    # the controller sees the state through heartbeats
    wait_until(
        lambda: (
            {d.name: d.state for d in sim.controller.metadata().brokers[0].log_dirs}["logdir-1"]
            == LogDirState.DEGRADED
        ),
        10,
        what="controller sees DEGRADED",
    )
    _set_probe_delay(agent, "logdir-1", 0)
    wait_until(lambda: _dirs(agent)["logdir-1"].state == LogDirState.ONLINE, 30, what="ONLINE")


def test_cordon_only_stops_new_replicas_on_the_dir_and_its_replicas_keep_serving(sim_factory):
    """KIP-1066 ``cordoned.log.dirs`` (Kafka 4.3): a cordoned dir receives no new replica, its
    existing replicas keep serving (no leader moves, the ISR keeps the broker), and it is not
    offline: OfflineLogDirectoryCount counts only failed dirs (KIP-112). The cordon is
    configuration: it survives a restart, and lifting it lets new replicas land there again."""
    sim = sim_factory(2, 2, "--probe-interval", "0.5", "--session-timeout-ms", "2000")
    sim.controller.create_topic("fenced", 2, 2)
    wait_until(
        lambda: all(len(p.created) == 2 for p in sim.controller.topic("fenced").partitions),
        15,
        what="replicas created",
    )
    agent = sim.agent(1)
    led = next(p for p in sim.controller.topic("fenced").partitions if p.leader == 1)
    target = sim.replica(1, "fenced", led.partition).log_dir
    epoch = led.leader_epoch

    info = agent.cordon_log_dir(target)
    assert info.state == LogDirState.ONLINE and info.cordoned and info.error is None
    assert agent.cordon_log_dir(target).cordoned  # idempotent
    snap = agent.snapshot()
    assert snap.offline_log_directory_count == 0 and snap.offline_replica_count == 0
    assert all(r.state == ReplicaState.ONLINE for r in snap.replicas)
    # new replicas avoid the cordoned dir
    sim.controller.create_topic("after", 2, 2)
    wait_until(
        lambda: all(sim.replica(1, "after", p) is not None for p in (0, 1)), 15, what="replicas"
    )
    assert {sim.replica(1, "after", p).log_dir for p in (0, 1)} == {
        d.name for d in agent.log_dirs() if d.name != target
    }
    # the replicas on it serve on: same leader, same epoch, broker 1 in the ISR, writes land
    part = sim.partition("fenced", led.partition)
    assert (part.leader, part.leader_epoch) == (1, epoch) and 1 in part.isr
    acked = agent.produce(
        "fenced", led.partition, [{"value": "still served"}], undeleted_partition_count=2
    )
    assert acked.base_offset >= 0  # acks=all: the follower on broker 2 has it too
    broker = next(b for b in sim.controller.metadata().brokers if b.broker_id == 1)
    assert broker.offline_log_directory_count == 0
    assert next(d for d in broker.log_dirs if d.name == target).cordoned
    # unknown dirs, and the test hooks (only the tests' entry point has them, agent_hooks), are 404
    with pytest.raises(AgentError) as exc:
        agent.cordon_log_dir("no-such-dir")
    assert exc.value.status == 404 and exc.value.error == ErrorCode.NOT_FOUND
    with pytest.raises(AgentError) as exc:
        _set_probe_delay(agent, target, 10)
    assert exc.value.status == 404

    # configuration: still cordoned after a restart; lifted, the dir takes new replicas again
    sim.cli("restart-broker", "1")
    assert {d.name: d.cordoned for d in sim.agent(1).log_dirs()}[target]
    sim.cli("cordon-log-dir", "1", target, "--lift")
    assert not {d.name: d.cordoned for d in sim.agent(1).log_dirs()}[target]
    sim.controller.create_topic("later", 4, 2)
    wait_until(
        lambda: all(sim.replica(1, "later", p) is not None for p in range(4)), 15, what="replicas"
    )
    assert target in {sim.replica(1, "later", p).log_dir for p in range(4)}


def test_one_slow_probe_does_not_make_a_dir_degraded_but_a_sustained_one_does():
    """A single slow fsync (a write burst) is not a failing disk: DEGRADED takes
    DEGRADED_WINDOW slow probes in a row, and one normal probe makes the dir ONLINE again."""
    from types import SimpleNamespace

    from broker_agent.simulator.broker import DEGRADED_WINDOW
    from broker_agent.simulator.broker.logdirs import ProbeGrades

    dirs = {n: SimpleNamespace(good=True, state=LogDirState.ONLINE) for n in ("a", "b", "c")}
    grades = ProbeGrades()

    def grade(a_ms: float) -> str:
        grades.grade(dirs, {"a": a_ms, "b": 2.0, "c": 3.0})
        return dirs["a"].state

    assert grade(2.0) == LogDirState.ONLINE
    assert grade(900.0) == LogDirState.ONLINE  # one slow probe
    assert grade(2.0) == LogDirState.ONLINE
    states = [grade(900.0) for _ in range(DEGRADED_WINDOW)]
    assert states[-1] == LogDirState.DEGRADED and LogDirState.DEGRADED not in states[:-1]
    assert grade(2.0) == LogDirState.ONLINE  # recovered at once
