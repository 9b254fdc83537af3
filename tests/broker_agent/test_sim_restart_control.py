"""The simulated cluster's restart control (``broker_agent.simulator.sim_controls``): what a worker uses
to restart a broker, since Kafka brings a failed log dir back only at a restart (KIP-112 "fix
disks and reboot broker"). It restarts a broker process at most once per incarnation, moves
leaders off first (Kafka's controlled shutdown), and exists only on a simulated cluster."""

from __future__ import annotations

import json

from fastapi import FastAPI

from broker_agent.simulator import sim_controls


def _cluster(tmp_path) -> str:
    (tmp_path / "cluster.json").write_text(
        json.dumps({"data": str(tmp_path), "brokers": {"1": {"url": "http://127.0.0.1:1"}}})
    )
    return str(tmp_path)


def _fake_processes(monkeypatch, incarnations: list[str]) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(sim_controls, "broker_incarnation", lambda url: incarnations[0])
    monkeypatch.setattr(sim_controls, "running_pid", lambda data, name: 42)
    monkeypatch.setattr(sim_controls, "ensure_secret", lambda data: {})
    monkeypatch.setattr(sim_controls, "wait_health", lambda url, timeout: True)

    def stop(data, name, sig, wait):
        calls.append(f"stop {name}")

    def start(c, bid, env):
        calls.append(f"start broker-{bid}")
        incarnations.pop(0)

    monkeypatch.setattr(sim_controls, "stop_process", stop)
    monkeypatch.setattr(sim_controls, "start_broker", start)
    return calls


def test_a_restart_of_the_incarnation_seen_stops_and_starts_after_moving_leaders(
    tmp_path, monkeypatch
):
    calls = _fake_processes(monkeypatch, ["old", "new"])
    out = sim_controls.restart_broker(
        _cluster(tmp_path), 1, expected_incarnation="old", before_stop=lambda: calls.append("fence")
    )
    assert calls == ["fence", "stop broker-1", "start broker-1"]
    assert out == {
        "broker_id": 1,
        "restarted": True,
        "incarnation_before": "old",
        "incarnation": "new",
    }


def test_a_restart_already_done_is_not_done_twice(tmp_path, monkeypatch):
    """A worker SIGKILLed after the restart, before auditing it, asks again with the
    incarnation it saw first: the broker runs another one, so nothing is restarted."""
    calls = _fake_processes(monkeypatch, ["new"])
    out = sim_controls.restart_broker(_cluster(tmp_path), 1, expected_incarnation="old")
    assert calls == []
    assert out == {"broker_id": 1, "restarted": False, "incarnation": "new"}


def test_only_a_simulated_cluster_offers_the_restart_control(tmp_path):
    bare, sim = FastAPI(), FastAPI()
    sim_controls.install_sim_routes(bare, str(tmp_path / "not-a-sim"), lambda b: None)
    sim_controls.install_sim_routes(sim, _cluster(tmp_path), lambda b: None)
    assert not [r for r in bare.routes if "/v1/sim/" in getattr(r, "path", "")]
    assert {r.path for r in sim.routes if "/v1/sim/" in getattr(r, "path", "")} == {
        "/v1/sim/controls",
        "/v1/sim/brokers/{broker_id}/restart",
    }
