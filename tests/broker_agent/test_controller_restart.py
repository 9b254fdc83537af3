"""KIP-112 scenario 6 (#14 gap 5): a controller restart keeps leaders. The restarted controller
keeps each registered broker's session for one session timeout after load; only a broker that
does not heartbeat within it is fenced, and only that moves leadership."""

from __future__ import annotations

import signal
import time

from broker_agent.simulator.processes import stop_process

from .conftest import wait_until


def _leaders(sim, topic: str) -> dict[int, tuple[int, int]]:
    return {p.partition: (p.leader, p.leader_epoch) for p in sim.controller.topic(topic).partitions}


def _restart_controller(sim) -> int:
    """SIGKILL the controller, start it again with ``sim up``; the restart time in ms."""
    assert stop_process(str(sim.data), "controller", signal.SIGKILL)
    restarted_ms = int(time.time() * 1000)
    sim.cli("up", "--brokers", "3", "--log-dirs", "1")
    return restarted_ms


def _heartbeats_since(sim, since_ms: int, brokers: set[int]) -> bool:
    md = sim.controller.metadata()
    return all(
        b.alive and b.last_heartbeat_ms > since_ms for b in md.brokers if b.broker_id in brokers
    )


def test_controller_restart_keeps_leaders_and_leader_epochs(sim_factory):
    sim = sim_factory(3, 1)
    sim.cli("create-topic", "kept", "--partitions", "6", "--replication-factor", "3")
    before = _leaders(sim, "kept")
    assert all(leader >= 0 for leader, _ in before.values())

    restarted = _restart_controller(sim)
    # every broker heartbeated the new controller: its session was kept, nothing was elected
    wait_until(lambda: _heartbeats_since(sim, restarted, {1, 2, 3}), 30, what="heartbeats")
    assert _leaders(sim, "kept") == before
    assert all(p.isr == p.replicas for p in sim.controller.topic("kept").partitions)


def test_only_a_broker_that_stays_away_is_fenced_after_a_controller_restart(sim_factory):
    sim = sim_factory(3, 1)
    sim.cli("create-topic", "moved", "--partitions", "6", "--replication-factor", "3")
    before = _leaders(sim, "moved")
    sim.cli("kill-broker", "2")  # dies while the controller is down: nobody fenced it yet
    assert stop_process(str(sim.data), "controller", signal.SIGKILL)
    restarted = int(time.time() * 1000)
    sim.cli("up", "--brokers", "3", "--log-dirs", "1", check=False)  # restarts controller and 2
    sim.cli("kill-broker", "2")  # ... so stop 2 again before its first heartbeat counts
    wait_until(
        lambda: not next(b for b in sim.controller.metadata().brokers if b.broker_id == 2).alive,
        60,
        what="broker 2 fenced by the session timeout",
    )
    wait_until(lambda: _heartbeats_since(sim, restarted, {1, 3}), 30, what="heartbeats")
    wait_until(
        lambda: all(leader != 2 for leader, _ in _leaders(sim, "moved").values()),
        30,
        what="leaders off broker 2",
    )
    after = _leaders(sim, "moved")
    for p, (leader, epoch) in before.items():
        if leader == 2:  # moved once, by the election the fencing triggered
            assert after[p][0] in (1, 3) and after[p][1] == epoch + 1, (p, before[p], after[p])
        else:  # untouched: same leader, same leader epoch
            assert after[p] == (leader, epoch), (p, before[p], after[p])


def test_a_restarted_controller_drives_a_disablement_it_finds_disabling(sim_factory):
    """KIP-950 "Controller Failover in DISABLING State" (#14 gap 2): the new controller sends
    DisableRemoteTopic to every hosting broker again and completes once all acknowledged."""
    sim = sim_factory(3, 1)
    sim.cli("create-topic", "left", "--partitions", "3", "--replication-factor", "3", "--tiered")
    t = sim.controller.start_disable("left", "retain")  # by AlterConfigs; nobody drives it on
    sim.agent(1).disable_remote_topic("left", t.topic_id, t.tiered_epoch, "retain")  # one acked
    assert sim.controller.topic("left").tiering_acks == [1]

    _restart_controller(sim)
    wait_until(
        lambda: sim.controller.topic("left").tiered_state == "DISABLED",
        60,
        what="the restarted controller to complete the disablement",
    )
    done = sim.controller.topic("left")
    assert (done.tiered_epoch, done.disable_policy, done.tiering_acks) == (1, "retain", [1, 2, 3])
    for b in (1, 2, 3):  # every broker applied it, once: a re-send is answered applied: false
        again = sim.agent(b).disable_remote_topic("left", t.topic_id, 1, "retain")
        assert again.applied is False and again.tiered_state == "DISABLED"
