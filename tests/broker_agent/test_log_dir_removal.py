"""KIP-112 recovery, option 2: the bad log dir is removed from the broker's configuration.

Refused (INSUFFICIENT_SPACE) while the good dirs lack usable space for the replicas that must
move there; the check says needed vs usable per good dir; once there is room the dir is removed
from the configuration (persisted), which like Kafka's ``log.dirs`` takes effect when the broker
restarts: the restarted broker has no bad dir, re-creates the replicas on the good dir (no
LogDirReset) and they catch up. Dir sizes are simulated with ``--log-dir-capacity-bytes`` (real files, a small "disk").
"""

from __future__ import annotations

import json

import pytest

from broker_agent.contract.choices import ErrorCode, LogDirState
from broker_agent.contract.client import AgentError

from .conftest import wait_until
from .test_log_dir_failure import _break_dir

pytestmark = pytest.mark.integration

CAPACITY = 1 << 20  # 1 MiB per log dir


def test_removing_a_bad_dir_needs_room_on_the_good_dirs(sim_factory):
    sim = sim_factory(
        3,
        2,
        "--log-dir-capacity-bytes",
        str(CAPACITY),
        "--probe-interval",
        "0.5",
        "--session-timeout-ms",
        "2000",
    )
    sim.controller.create_topic("big", 2, 3, {"segment.bytes": "65536"})
    wait_until(
        lambda: all(len(p.created) == 3 for p in sim.controller.topic("big").partitions),
        15,
        what="replicas created",
    )
    producer = sim.producer()
    for _ in range(6):  # keyless: round robin, ~620 KB per partition
        producer.send("big", [{"key": None, "value": "x" * 1000} for _ in range(200)])
    producer.close()

    broker = 3
    agent = sim.agent(broker)
    bad = sim.replica(broker, "big", 0).log_dir
    good = next(d.name for d in agent.log_dirs() if d.name != bad)
    assert sim.replica(broker, "big", 1).log_dir == good
    # a healthy dir is never removed
    with pytest.raises(AgentError) as exc:
        agent.remove_log_dir(good, dry_run=True)
    assert exc.value.error == ErrorCode.LOG_DIR_NOT_OFFLINE

    bad_path = next(d.path for d in agent.log_dirs() if d.name == bad)
    _break_dir(bad_path)
    wait_until(
        lambda: {d.name: d.state for d in agent.log_dirs()}[bad] == LogDirState.OFFLINE,
        10,
        what="dir OFFLINE",
    )

    plan = agent.log_dir_removal_plan(bad)
    assert not plan.removable and plan.error == ErrorCode.INSUFFICIENT_SPACE
    [moving] = plan.replicas
    assert (moving.topic, moving.partition, moving.size_source) == ("big", 0, "leader")
    [target] = plan.good_dirs
    assert target.name == good and not target.fits
    assert target.needed_bytes == moving.size_bytes == plan.needed_bytes > target.usable_bytes
    assert target.usable_bytes == plan.available_bytes
    assert moving.size_bytes > 500_000 and target.usable_bytes < CAPACITY - 500_000
    for dry_run in (True, False):
        with pytest.raises(AgentError) as exc:
            agent.remove_log_dir(bad, dry_run=dry_run)
        assert exc.value.status == 409 and exc.value.error == ErrorCode.INSUFFICIENT_SPACE
        assert exc.value.body["plan"]["needed_bytes"] > exc.value.body["plan"]["available_bytes"]
    assert bad in {d.name for d in agent.log_dirs()}  # nothing changed

    # DeleteRecords on the leader frees the data that would have to move
    leader = sim.partition("big", 0).leader
    assert leader != broker
    hw = sim.replica(leader, "big", 0).high_watermark
    sim.agent(leader).publish_log_start_offset("big", 0, hw)
    wait_until(lambda: agent.log_dir_removal_plan(bad).removable, 20, what="room on the good dir")
    check = agent.remove_log_dir(bad, dry_run=True)
    assert check.removable and not check.removed and check.replicas[0].target_dir == good
    assert bad in {d.name for d in agent.log_dirs()}

    done = agent.remove_log_dir(bad)
    assert done.removed
    config = json.loads((sim.data / f"broker-{broker}" / "meta" / "log-dirs.json").read_text())
    assert config["removed"] == [bad]
    # configuration, effective at the restart: the running broker still has the failed dir
    pending = {d.name: d for d in agent.log_dirs()}[bad]
    assert pending.removal_pending and pending.state == LogDirState.OFFLINE
    assert sim.replica(broker, "big", 0).state == "OFFLINE"
    with pytest.raises(AgentError) as exc:
        agent.remove_log_dir(good)
    assert exc.value.status == 400 and exc.value.error == ErrorCode.LAST_LOG_DIR

    # restarted without the dir: no bad dir left, the replica is re-created on the good dir
    # and catches up (no LogDirReset)
    sim.cli("restart-broker", str(broker))
    assert [d.name for d in agent.log_dirs()] == [good]
    wait_until(lambda: broker in sim.partition("big", 0).isr, 30, what="back in the ISR")
    replica = sim.replica(broker, "big", 0)
    assert replica.state == "ONLINE" and replica.log_dir == good
    snap = agent.snapshot()
    assert snap.offline_log_directory_count == 0 and snap.offline_replica_count == 0

    # the removal is part of the broker's configuration: another restart keeps it
    sim.cli("kill-broker", str(broker))
    sim.cli("start-broker", str(broker))
    wait_until(lambda: sim.replica(broker, "big", 0) is not None, 20, what="broker back")
    assert [d.name for d in agent.log_dirs()] == [good]
    assert sim.replica(broker, "big", 0).log_dir == good
