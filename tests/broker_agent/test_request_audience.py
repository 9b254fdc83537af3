"""A signed request names its target (issue #11): one captured on its way to broker 1 is refused
by broker 2 and by the controller, on the simulated cluster's real processes; in synthetic scale
mode, where one process answers as every broker, the broker in the signed path tells them apart.
"""

from __future__ import annotations

import json

import httpx
import pytest

from broker_agent.contract.choices import LogDirState
from broker_agent.contract.client import AgentClient
from broker_agent.contract.signing import HEADER_AUDIENCE, audience_of

from .conftest import run_cli

pytestmark = pytest.mark.integration


def _message(resp: httpx.Response) -> str:
    assert resp.status_code == 401, resp.text
    assert resp.json()["error"] == "UNAUTHORIZED"
    return resp.json()["message"]


def test_a_request_signed_for_broker_1_and_sent_to_broker_2_gets_401(sim_factory):
    sim = sim_factory(2, 1)
    url_1, url_2 = sim.urls["brokers"]["1"], sim.urls["brokers"]["2"]
    target = "/v1/log-dirs/logdir-0/cordon"
    captured = sim.agent(1).signed_headers("POST", target)

    replayed = httpx.post(url_2 + target, headers=captured, timeout=10)
    assert _message(replayed).startswith("WRONG_AUDIENCE")
    # the cordon did not happen on broker 2
    assert [d.cordoned for d in sim.agent(2).log_dirs()] == [False]
    # nor at the controller, which is one more target with its own name
    ctl = httpx.post(sim.urls["controller"] + target, headers=captured, timeout=10)
    assert _message(ctl).startswith("WRONG_AUDIENCE")
    # claiming broker 2 as the audience breaks the signature
    relabelled = dict(captured, **{HEADER_AUDIENCE: audience_of(url_2)})
    assert _message(httpx.post(url_2 + target, headers=relabelled, timeout=10)).startswith(
        "BAD_SIGNATURE"
    )
    # the same request is good where it was meant to go
    assert httpx.post(url_1 + target, headers=captured, timeout=10).status_code == 200
    assert [(d.state, d.cordoned) for d in sim.agent(1).log_dirs()] == [
        (LogDirState.ONLINE, True)  # KIP-1066: a cordon takes nothing offline
    ]

    log = (sim.data / "logs" / "broker-2.log").read_text()
    assert f"signed for '{audience_of(url_1)}'" in log
    assert f"answers to {audience_of(url_2)}" in log


def test_a_request_signed_for_one_synthetic_broker_is_refused_by_another(tmp_path):
    data = tmp_path / "syn"
    try:
        out = run_cli(
            data,
            "up",
            "--brokers",
            "2",
            "--log-dirs",
            "1",
            "--synthetic-topics",
            "2",
            "--partitions-per-topic",
            "4",
            "--synthetic-tick-interval",
            "0",
        )
        urls = json.loads(out.stdout.strip().splitlines()[-1])
        secret = (data / "secret").read_bytes().strip()
        # one process, one authority: the same audience for both brokers
        assert audience_of(urls["brokers"]["1"]) == audience_of(urls["brokers"]["2"])
        with AgentClient(urls["brokers"]["1"], secret) as agent_1:
            captured = agent_1.signed_headers("GET", "/v1/snapshot")
        replayed = httpx.get(urls["brokers"]["2"] + "/v1/snapshot", headers=captured, timeout=10)
        assert _message(replayed).startswith("BAD_SIGNATURE")
        good = httpx.get(urls["brokers"]["1"] + "/v1/snapshot", headers=captured, timeout=10)
        assert good.status_code == 200 and good.json()["broker_id"] == 1
    finally:
        run_cli(data, "down", check=False)
