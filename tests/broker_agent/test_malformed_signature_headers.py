"""A malformed signature header is a 401, never a 500 (issue #39): each header a signed request
carries (timestamp, nonce, signature, audience), too long, not a number (not hex, not ``vN=``),
empty and non-ASCII, sent to each of the three receivers: an agent and the controller (real
processes, the bytes written on a socket as a client could send them) and the console's
``/agent-events/``. A 400-digit ``X-Strata-Timestamp`` used to overflow the skew check and a
non-ASCII signature to raise in ``hmac.compare_digest``: 500 ``INTERNAL_ERROR`` to an
unauthenticated caller."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from broker_agent.contract.signing import (
    HEADER_AUDIENCE,
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    audience_of,
    sign_headers,
)

from .test_signing import MALFORMED, _case_id

pytestmark = pytest.mark.integration

#: Header values an HTTP server takes (it answers 431 / 400 itself past ~8 KiB, before any app).
ON_THE_WIRE = [case for case in MALFORMED if len(case[1]) <= 6000]
#: Webhook events are signed ``v1``, without audience: the console reads no audience header.
WEBHOOK = [case for case in MALFORMED if case[0] != HEADER_AUDIENCE]
#: Codes a malformed header may be refused with; which one depends on the header.
REFUSALS = ("UNSIGNED", "BAD_SIGNATURE", "WRONG_AUDIENCE")


def _raw_post(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:
    """POST ``body`` to ``url + path`` with ``headers`` written as latin-1 bytes (as ASGI and
    WSGI servers decode them; UTF-8 text goes as its bytes). Returns (status, JSON answer)."""
    parts = urlsplit(url)

    def wire(value: str) -> bytes:
        try:
            return value.encode("latin-1")
        except UnicodeEncodeError:
            return value.encode("utf-8")

    head = [
        f"POST {path} HTTP/1.1".encode(),
        f"Host: {parts.netloc}".encode(),
        b"Content-Type: application/json",
        f"Content-Length: {len(body)}".encode(),
        b"Connection: close",
        *(k.encode() + b": " + wire(v) for k, v in headers.items()),
    ]
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as s:
        s.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    _headers, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload or b"null")


def _with(headers: dict[str, str], header: str, value: str) -> dict[str, str]:
    headers = dict(headers)
    headers[header] = value
    return headers


def test_malformed_signature_headers_get_401_from_an_agent_and_the_controller(sim_factory):
    sim = sim_factory(1, 1)
    targets = {"controller": (sim.urls["controller"], "/v1/topics")}
    targets["broker 1"] = (sim.urls["brokers"]["1"], "/v1/produce")
    body = b"{}"
    answers = {}
    for name, (url, path) in targets.items():
        for case in ON_THE_WIRE:
            header, value, _why = case
            signed = sign_headers(sim.secret, "POST", path, body, audience=audience_of(url))
            status, answer = _raw_post(url, path, _with(signed, header, value), body)
            answers[(name, _case_id(case))] = (status, answer)
    wrong = {
        where: got
        for where, got in answers.items()
        if got[0] != 401
        or got[1].get("error") != "UNAUTHORIZED"
        or not got[1].get("message", "").startswith(REFUSALS)
    }
    assert not wrong, wrong
    # every header was tried at both receivers, and the servers are still answering
    assert {h for h, _v, _w in ON_THE_WIRE} == {
        HEADER_TIMESTAMP,
        HEADER_NONCE,
        HEADER_SIGNATURE,
        HEADER_AUDIENCE,
    }
    assert sim.controller.metadata().brokers


@pytest.mark.django_db
def test_malformed_signature_headers_get_401_from_the_console_agent_events(client, monkeypatch):
    from console.models import Cluster

    secret = "webhook-secret"
    monkeypatch.setenv("STRATA_TEST_WEBHOOK_SECRET", secret)
    Cluster.objects.create(
        name="lab",
        controller_url="http://127.0.0.1:1",
        secret_ref="env:STRATA_TEST_WEBHOOK_SECRET",
        cluster_id="lab-id",
    )
    body = json.dumps({"cluster": "lab-id"}).encode()
    wrong = {}
    for path in ("/agent-events/", "/agent-events/lab/"):
        for case in WEBHOOK:  # no HTTP server in front: every length reaches the view
            header, value, _why = case
            signed = sign_headers(secret, "POST", path, body, now=time.time())
            response = client.post(
                path, body, content_type="application/json", headers=_with(signed, header, value)
            )
            answer = response.json()
            if (
                response.status_code != 401
                or answer.get("error") != "UNAUTHORIZED"
                or not answer.get("message", "").startswith(REFUSALS)
            ):
                wrong[(path, _case_id(case))] = (response.status_code, answer)
    assert not wrong, wrong
