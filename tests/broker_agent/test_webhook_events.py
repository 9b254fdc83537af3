"""Agents push signed LogDirFailure / LogDirRecovered / BrokerOffline events to the webhook URL
(a real HTTP listener here), and keep working when nobody listens."""

from __future__ import annotations

import json
import queue
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from broker_agent.contract.choices import EventType, LogDirState
from broker_agent.contract.models import WebhookEvent
from broker_agent.contract.signing import NonceCache, SignatureError, verify_signature

from .conftest import wait_until


def _fail_dir(sim, broker_id: int, name: str) -> None:
    """KIP-112's system test: the folder replaced by a file; the probe loop finds it."""
    path = sim.data / f"broker-{broker_id}" / name
    path.rename(f"{path}.removed")
    path.write_text("not a directory")


pytestmark = pytest.mark.integration

HOOK_PATH = "/hooks/strata?source=agent"


class _Listener:
    """A tiny webhook receiver: records (method, path, headers, body) and answers 204."""

    def __init__(self):
        received: queue.Queue = queue.Queue()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.put(("POST", self.path, dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{HOOK_PATH}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def next_event(self, secret: bytes, nonces: NonceCache, timeout: float = 20) -> WebhookEvent:
        method, path, headers, body = self.last = self.received.get(timeout=timeout)
        verify_signature(secret, method, path, body, headers, nonce_cache=nonces)
        return WebhookEvent.model_validate_json(body)


def test_signed_log_dir_and_broker_events_reach_a_real_listener(sim_factory):
    with _Listener() as hook:
        sim = sim_factory(1, 2, "--webhook", hook.url, "--probe-interval", "0.5")
        sim.controller.create_topic("hooked", 2, 1)
        wait_until(lambda: len(sim.agent(1).snapshot().replicas) == 2, 15, what="replicas")
        agent = sim.agent(1)
        nonces = NonceCache()

        on_dir0 = [
            f"{r.topic}:{r.partition}" for r in agent.snapshot().replicas if r.log_dir == "logdir-0"
        ]
        agent.cordon_log_dir("logdir-0")  # KIP-1066: a cordon is no failure, no event
        _fail_dir(sim, 1, "logdir-0")
        ev = hook.next_event(sim.secret, nonces)
        assert ev.event == EventType.LOG_DIR_FAILURE
        assert (ev.cluster, ev.broker_id, ev.log_dir) == (sim.urls["cluster_id"], 1, "logdir-0")
        assert on_dir0 and sorted(ev.offline_replicas) == sorted(on_dir0)
        assert "Error" in ev.error

        # every dir bad: the broker goes offline and says so (and still answers HTTP)
        _fail_dir(sim, 1, "logdir-1")
        events = [ev] + [hook.next_event(sim.secret, nonces) for _ in range(2)]
        assert [e.event for e in events] == [
            EventType.LOG_DIR_FAILURE,
            EventType.LOG_DIR_FAILURE,
            EventType.BROKER_OFFLINE,
        ]
        assert events[2].broker_id == 1 and events[2].log_dir is None
        assert agent.snapshot().state == "OFFLINE"
        assert len({e.event_id for e in events}) == 3
        # the receiver refuses a replayed delivery and a tampered body
        method, path, headers, body = hook.last
        with pytest.raises(SignatureError) as exc:
            verify_signature(sim.secret, method, path, body, headers, nonce_cache=nonces)
        assert exc.value.code == "REPLAYED_REQUEST"
        with pytest.raises(SignatureError):
            verify_signature(sim.secret, method, path, body.replace(b"1", b"2"), headers)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/strata"


def test_agents_keep_working_when_nobody_listens(sim_factory):
    sim = sim_factory(1, 2, "--webhook", _closed_port_url(), "--probe-interval", "0.5")
    sim.controller.create_topic("quiet", 2, 1)
    wait_until(lambda: len(sim.agent(1).snapshot().replicas) == 2, 15, what="replicas")
    agent = sim.agent(1)
    _fail_dir(sim, 1, "logdir-0")
    wait_until(lambda: agent.snapshot().offline_log_directory_count == 1, 10, what="dir failed")
    log_file = sim.data / "logs" / "broker-1.log"
    wait_until(lambda: "dropped LogDirFailure" in log_file.read_text(), 20, what="event dropped")
    # still serving: snapshot, produce and consume on the good dir
    snap = agent.snapshot()
    assert snap.offline_log_directory_count == 1 and snap.state == "ONLINE"
    good = next(r for r in snap.replicas if r.log_dir == "logdir-1")
    resp = agent.produce(
        "quiet", good.partition, [{"key": None, "value": "still here"}], undeleted_partition_count=2
    )
    fetched = agent.fetch("quiet", good.partition, resp.base_offset)
    assert [r.value for r in fetched.records] == ["still here"]
    assert agent.probe_log_dir("logdir-0").state == LogDirState.OFFLINE  # until a restart
    assert json.loads(sim.cli("status", "--json").stdout)["brokers"][0]["alive"]
