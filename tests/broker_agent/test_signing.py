"""HMAC request signing: unit checks of the shared helper the console also uses, including the
audience a request is signed for."""

from __future__ import annotations

import time

import pytest

from broker_agent.signing import (
    HEADER_AUDIENCE,
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    NonceCache,
    SignatureError,
    audience_of,
    sign_headers,
    verify_signature,
)

SECRET = b"s3cret"


def test_signed_request_verifies_once_and_replay_is_refused():
    h = sign_headers(SECRET, "POST", "/hook?x=1", b'{"a":1}')
    cache = NonceCache()
    verify_signature(SECRET, "POST", "/hook?x=1", b'{"a":1}', h, nonce_cache=cache)
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "POST", "/hook?x=1", b'{"a":1}', h, nonce_cache=cache)
    assert exc.value.code == "REPLAYED_REQUEST"


@pytest.mark.parametrize(
    ("method", "path", "body", "secret"),
    [
        ("GET", "/hook?x=1", b'{"a":1}', SECRET),
        ("POST", "/hook?x=2", b'{"a":1}', SECRET),
        ("POST", "/hook?x=1", b'{"a":2}', SECRET),
        ("POST", "/hook?x=1", b'{"a":1}', b"other"),
    ],
)
def test_any_change_of_method_path_body_or_secret_breaks_the_signature(method, path, body, secret):
    h = sign_headers(SECRET, "POST", "/hook?x=1", b'{"a":1}')
    with pytest.raises(SignatureError) as exc:
        verify_signature(secret, method, path, body, h)
    assert exc.value.code == "BAD_SIGNATURE"


def test_stale_and_unsigned_requests_are_refused():
    h = sign_headers(SECRET, "GET", "/v1/snapshot", b"", now=time.time() - 61)
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "GET", "/v1/snapshot", b"", h)
    assert exc.value.code == "STALE_REQUEST"
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "GET", "/v1/snapshot", b"", {})
    assert exc.value.code == "UNSIGNED"


def test_django_meta_style_headers_are_accepted():
    h = sign_headers(SECRET, "POST", "/agents/events", b"{}")
    meta = {
        "HTTP_X_STRATA_TIMESTAMP": h[HEADER_TIMESTAMP],
        "HTTP_X_STRATA_NONCE": h[HEADER_NONCE],
        "HTTP_X_STRATA_SIGNATURE": h[HEADER_SIGNATURE],
    }
    verify_signature(SECRET, "POST", "/agents/events", b"{}", meta)


# -- audience: the target a request is signed for ------------------------------------------------

BROKER_1 = "127.0.0.1:9001"
BROKER_2 = "127.0.0.1:9002"


def test_a_request_signed_for_one_audience_is_refused_by_another():
    h = sign_headers(SECRET, "POST", "/v1/log-dirs/logdir-0/cordon", audience=BROKER_1)
    with pytest.raises(SignatureError) as exc:
        verify_signature(
            SECRET, "POST", "/v1/log-dirs/logdir-0/cordon", b"", h, audiences={BROKER_2}
        )
    assert exc.value.code == "WRONG_AUDIENCE"
    # the message answered to the caller does not name the server; the log detail does
    assert BROKER_2 not in exc.value.message and BROKER_2 in exc.value.detail
    verify_signature(SECRET, "POST", "/v1/log-dirs/logdir-0/cordon", b"", h, audiences={BROKER_1})


def test_rewriting_the_audience_header_breaks_the_signature():
    h = sign_headers(SECRET, "GET", "/v1/snapshot", audience=BROKER_1)
    h[HEADER_AUDIENCE] = BROKER_2
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "GET", "/v1/snapshot", b"", h, audiences={BROKER_2})
    assert exc.value.code == "BAD_SIGNATURE"


def test_a_signature_naming_no_audience_is_refused_where_one_is_required():
    h = sign_headers(SECRET, "GET", "/v1/snapshot")
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "GET", "/v1/snapshot", b"", h, audiences={BROKER_1})
    assert exc.value.code == "WRONG_AUDIENCE"


def test_a_signature_for_an_audience_is_not_a_webhook_signature():
    h = sign_headers(SECRET, "POST", "/agents/events", b"{}", audience=BROKER_1)
    assert h[HEADER_SIGNATURE].startswith("v2=")
    with pytest.raises(SignatureError) as exc:
        verify_signature(SECRET, "POST", "/agents/events", b"{}", h)
    assert exc.value.code == "BAD_SIGNATURE"


@pytest.mark.parametrize(
    ("url", "audience"),
    [
        ("http://127.0.0.1:9092", "127.0.0.1:9092"),
        ("http://127.0.0.1:9092/brokers/3", "127.0.0.1:9092"),
        ("http://Kafka-1.Example.COM", "kafka-1.example.com:80"),
        ("https://kafka-1.example.com/", "kafka-1.example.com:443"),
        ("http://[::1]:9092", "[::1]:9092"),
    ],
)
def test_the_audience_is_host_and_port_as_dialled(url, audience):
    assert audience_of(url) == audience


def test_a_url_without_host_has_no_audience():
    with pytest.raises(ValueError):
        audience_of("127.0.0.1:9092")
