"""Agents refuse an oversized or unsigned request before they read its body, and a request
captured before an agent restarts is still a replay after it (#16)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

from broker_agent.contract.signing import NonceCache, audience_of, sign_headers
from broker_agent.server.web import DEFAULT_MAX_BODY_BYTES

from .conftest import wait_until

pytestmark = pytest.mark.integration


def _headers_only(url: str, path: str, headers: dict[str, str], content_length: int) -> bytes:
    """Send a POST's request line and headers, declaring ``content_length`` bytes of body, and
    send no body at all. A server that waited for the body would never answer (the socket
    timeout ends the test with an error, not a pass)."""
    parts = urlsplit(url)
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {content_length}",
        *(f"{k}: {v}" for k, v in headers.items()),
        "Connection: close",
        "",
        "",
    ]
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as s:
        s.sendall("\r\n".join(lines).encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


def test_oversized_and_unsigned_posts_are_refused_before_the_body_is_read(sim_factory):
    sim = sim_factory(1, 1)
    for url in (sim.urls["controller"], sim.urls["brokers"]["1"]):
        path = "/v1/topics" if url == sim.urls["controller"] else "/v1/produce"
        huge = _headers_only(url, path, {}, 20 * 1024 * 1024)
        assert huge.startswith(b"HTTP/1.1 413"), huge[:200]
        # Signed correctly for an empty body, but declaring more than the limit: still 413.
        signed = sign_headers(sim.secret, "POST", path, b"", audience=audience_of(url))
        huge_signed = _headers_only(url, path, signed, DEFAULT_MAX_BODY_BYTES + 1)
        assert huge_signed.startswith(b"HTTP/1.1 413"), huge_signed[:200]
        # Under the limit but unsigned: 401 from the headers alone.
        unsigned = _headers_only(url, path, {}, 1024 * 1024)
        assert unsigned.startswith(b"HTTP/1.1 401"), unsigned[:200]


def test_a_chunked_body_over_the_limit_is_refused_while_it_streams(sim_factory):
    sim = sim_factory(1, 1)
    url, path = sim.urls["brokers"]["1"], "/v1/produce"
    headers = sign_headers(sim.secret, "POST", path, b"x", audience=audience_of(url))

    def chunks():
        block = b"x" * (1024 * 1024)
        for _ in range(DEFAULT_MAX_BODY_BYTES // len(block) + 2):
            yield block

    r = httpx.post(url + path, content=chunks(), headers=headers, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE"


def test_a_request_captured_before_a_restart_is_refused_after_it(sim_factory):
    sim = sim_factory(1, 1)
    url, path = sim.urls["brokers"]["1"], "/v1/snapshot"
    captured = sign_headers(sim.secret, "GET", path, audience=audience_of(url))
    assert httpx.get(url + path, headers=captured, timeout=10).status_code == 200

    sim.cli("kill-broker", "1")
    sim.cli("start-broker", "1")
    wait_until(
        lambda: httpx.get(url + "/v1/health", timeout=5).status_code == 200,
        timeout=60,
        what="the broker answers again",
    )
    replay = httpx.get(url + path, headers=captured, timeout=10)
    assert replay.status_code == 401 and "REPLAYED" in replay.json()["message"]
    fresh = sign_headers(sim.secret, "GET", path, audience=audience_of(url))
    assert httpx.get(url + path, headers=fresh, timeout=10).status_code == 200


def test_the_nonce_file_keeps_what_is_inside_the_window_and_compacts(tmp_path):
    path = str(tmp_path / "nonces.log")
    cache = NonceCache(ttl_seconds=100, path=path)
    assert cache.check_and_add("a" * 16, now=1000.0)
    assert cache.check_and_add("b" * 16, now=1000.0)
    assert not cache.check_and_add("a" * 16, now=1001.0)

    reloaded = NonceCache(ttl_seconds=1e12, path=path)  # a restart: the same file
    assert not reloaded.check_and_add("a" * 16, now=1002.0)
    assert reloaded.check_and_add("c" * 16, now=1002.0)

    with open(path, "a") as fh:
        fh.write("17")  # a torn line from a crash mid-write is skipped
    again = NonceCache(ttl_seconds=1e12, path=path)
    assert not again.check_and_add("c" * 16, now=1003.0)
    lines = (tmp_path / "nonces.log").read_text().splitlines()
    assert sorted(line.split()[1] for line in lines) == ["a" * 16, "b" * 16, "c" * 16]
