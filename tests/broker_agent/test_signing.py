"""HMAC request signing: unit checks of the shared helper the console also uses, including the
audience a request is signed for."""

from __future__ import annotations

import time

import pytest

from broker_agent.contract.signing import (
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


# -- malformed headers: parsed with bounds, refused 401, never an exception that is not ours ------

NOW = 1_700_000_000.0
NONCE = "0123456789abcdef0123456789abcdef"

#: (header, spelling, why) for every signature header: too long, not a number (or not hex, not
#: ``vN=``), empty, non-ASCII. Header values reach the servers as latin-1 text (ASGI, WSGI).
MALFORMED = [
    (HEADER_TIMESTAMP, "9" * 400, "400 digits: int() takes it, the skew arithmetic overflowed"),
    (HEADER_TIMESTAMP, "9" * 5000, "past int()'s digit limit"),
    (HEADER_TIMESTAMP, "1700000000" + "0" * 3, "13 digits"),
    (HEADER_TIMESTAMP, "1.7e9", "not an integer"),
    (HEADER_TIMESTAMP, "+1700000000", "a sign"),
    (HEADER_TIMESTAMP, "17000 00000", "a space"),
    (HEADER_TIMESTAMP, "1_700_000_000", "underscores"),
    (HEADER_TIMESTAMP, "-1", "negative"),
    (HEADER_TIMESTAMP, "", "empty"),
    (HEADER_TIMESTAMP, "\u0661\u0667" + "\u0660" * 8, "Arabic-Indic digits int() accepts"),
    (HEADER_TIMESTAMP, "17000000\xe9", "latin-1 byte"),
    (HEADER_NONCE, "a" * 65, "too long"),
    (HEADER_NONCE, "a" * 100_000, "far too long"),
    (HEADER_NONCE, "a" * 15, "too short"),
    (HEADER_NONCE, "z" * 32, "not hex"),
    (HEADER_NONCE, "", "empty"),
    (HEADER_NONCE, "\xe9" * 32, "non-ASCII"),
    (HEADER_SIGNATURE, "v2=" + "a" * 65, "a digest too long"),
    (HEADER_SIGNATURE, "v2=" + "a" * 100_000, "far too long"),
    (HEADER_SIGNATURE, "v2=" + "g" * 64, "not hex"),
    (HEADER_SIGNATURE, "v9=" + "a" * 64, "unknown version"),
    (HEADER_SIGNATURE, "", "empty"),
    (HEADER_SIGNATURE, "v2=" + "\xe9" * 64, "non-ASCII: compare_digest raised TypeError"),
    (HEADER_AUDIENCE, "127.0.0.1:" + "9" * 400, "too long"),
    (HEADER_AUDIENCE, "127.0.0.1:port", "not a port"),
    (HEADER_AUDIENCE, "", "empty"),
    (HEADER_AUDIENCE, "h\xf4te:9001", "non-ASCII"),
]


def _malformed(header: str, value: str) -> dict[str, str]:
    h = sign_headers(SECRET, "POST", "/v1/produce", b"{}", audience=BROKER_1, now=NOW)
    h[HEADER_NONCE] = NONCE
    h[header] = value
    return h


def _case_id(case: tuple[str, str, str]) -> str:
    return f"{case[0].removeprefix('X-Strata-')}: {case[2]}"


@pytest.mark.parametrize(("header", "value", "why"), MALFORMED, ids=map(_case_id, MALFORMED))
def test_a_malformed_signature_header_is_refused_as_a_signature_error(header, value, why):
    h = _malformed(header, value)
    for audiences in ({BROKER_1}, None):  # an agent or controller; the console's webhook
        with pytest.raises(SignatureError) as exc:
            verify_signature(SECRET, "POST", "/v1/produce", b"{}", h, audiences=audiences, now=NOW)
        assert exc.value.code in {"UNSIGNED", "BAD_SIGNATURE", "WRONG_AUDIENCE"}, why
        # what the caller reads stays short, whatever was sent
        assert len(exc.value.message) < 200 and len(exc.value.detail) < 400
