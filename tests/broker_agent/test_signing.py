"""HMAC request signing: unit checks of the shared helper the console also uses."""

from __future__ import annotations

import time

import pytest

from broker_agent.signing import (
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    NonceCache,
    SignatureError,
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
