"""Acceptance 5: unsigned / bad / stale / replayed requests are refused with 401 and logged, and
schemathesis over the agent's and the controller's OpenAPI documents finds no 5xx."""

from __future__ import annotations

import time

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings

from broker_agent.contract.signing import audience_of, sign_headers

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 8


def _send(url: str, path: str, headers: dict) -> httpx.Response:
    return httpx.get(url + path, headers=headers, timeout=10)


def test_unsigned_bad_stale_and_replayed_requests_get_401(sim_factory):
    sim = sim_factory(1, 1)
    for url in (sim.urls["controller"], sim.urls["brokers"]["1"]):
        path = "/v1/snapshot" if url != sim.urls["controller"] else "/v1/metadata"
        audience = audience_of(url)
        r = _send(url, path, {})
        assert r.status_code == 401 and r.json()["error"] == "UNAUTHORIZED"
        bad = sign_headers(b"wrong secret", "GET", path, audience=audience)
        assert _send(url, path, bad).status_code == 401
        stale = sign_headers(sim.secret, "GET", path, audience=audience, now=time.time() - 120)
        assert "STALE" in _send(url, path, stale).json()["message"]
        good = sign_headers(sim.secret, "GET", path, audience=audience)
        assert _send(url, path, good).status_code == 200
        replay = _send(url, path, good)
        assert replay.status_code == 401 and "REPLAYED" in replay.json()["message"]
        # signed for another path
        other = sign_headers(sim.secret, "GET", path + "?since=1", audience=audience)
        assert _send(url, path, other).status_code == 401
        # signed without naming its target (the old, replayable form)
        unbound = sign_headers(sim.secret, "GET", path)
        assert "WRONG_AUDIENCE" in _send(url, path, unbound).json()["message"]
    logs = (sim.data / "logs" / "broker-1.log").read_text()
    assert "refused GET /v1/snapshot" in logs


class _SigningAuth(requests.auth.AuthBase):
    def __init__(self, secret: bytes):
        self.secret = secret

    def __call__(self, r):
        body = r.body or b""
        if isinstance(body, str):
            body = body.encode()
        r.headers.update(
            sign_headers(self.secret, r.method, r.path_url, body, audience=audience_of(r.url))
        )
        return r


def _fuzz(base_url: str, secret: bytes) -> list[str]:
    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    session = requests.Session()
    session.auth = _SigningAuth(secret)
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy())
        def run(case):
            resp = case.call(base_url=base_url, session=session, timeout=30)
            if resp.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path}: {resp.status_code} {resp.text[:200]}"
                )
            elif resp.status_code == 401:
                failures.append(f"{case.method} {case.formatted_path}: signing failed")

        run()
    return failures


def test_schemathesis_finds_no_5xx_in_the_controller_api(sim_factory):
    # The controller alone (no broker registered): create-topic cannot fan out thousands of
    # replica folders, everything else is exercised.
    sim = sim_factory(0, 1)
    assert _fuzz(sim.urls["controller"], sim.secret) == []


def test_schemathesis_finds_no_5xx_in_the_agent_api(sim_factory):
    sim = sim_factory(1, 2)
    sim.controller.create_topic("fuzzed", 1, 1, {"remote.storage.enable": "true"})
    assert _fuzz(sim.urls["brokers"]["1"], sim.secret) == []
