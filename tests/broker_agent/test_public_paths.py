"""Only exact paths skip signing: ``GET /v1/health``, ``/openapi.json`` and ``/docs``. A path that
merely ends like one of them (a topic named ``docs``) is signed like any other (issue #11)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.integration

LOOK_ALIKES = [
    ("GET", "/v1/topics/openapi.json"),
    ("GET", "/v1/topics/docs/partition-for-key?key=k"),
    ("GET", "/x/v1/health"),
    ("GET", "/v1/health/"),
    ("POST", "/v1/health"),
]


@pytest.fixture
def sim(sim_factory):
    sim = sim_factory(1, 1)
    for name in ("docs", "openapi.json"):
        sim.controller.create_topic(name, 1, 1)
    return sim


def test_get_v1_topics_docs_unsigned_gets_401(sim):
    r = httpx.get(sim.urls["controller"] + "/v1/topics/docs", timeout=10)
    assert r.status_code == 401 and r.json()["error"] == "UNAUTHORIZED"
    assert r.json()["message"].startswith("UNSIGNED")
    # the topic is there: signed, the same path answers
    assert sim.controller.topic("docs").name == "docs"


def test_paths_that_only_resemble_a_public_one_are_signed(sim):
    for base in (sim.urls["controller"], sim.urls["brokers"]["1"]):
        for method, path in LOOK_ALIKES:
            r = httpx.request(method, base + path, timeout=10)
            assert (r.status_code, r.json()["error"]) == (401, "UNAUTHORIZED"), (base, path)


def test_the_exact_public_paths_answer_unsigned(sim):
    for base in (sim.urls["controller"], sim.urls["brokers"]["1"]):
        for path in ("/v1/health", "/openapi.json", "/docs"):
            assert httpx.get(base + path, timeout=10).status_code == 200, (base, path)
