"""HMAC-SHA256 request signing, shared by the agent server, its client and the console.

Headers (all required on every request but ``/v1/health``):

``X-Strata-Timestamp``  unix seconds (integer, decimal)
``X-Strata-Nonce``      random, unique per request (hex, 16..64 chars)
``X-Strata-Signature``  ``v1=<hex HMAC-SHA256>``

The signed string is, joined by ``\\n``: method (upper case), path including the query string
exactly as sent, timestamp, nonce, and the hex SHA-256 of the body. A request older or newer than
``MAX_SKEW_SECONDS`` (60 s) is stale; a nonce seen within that window is a replay. The same scheme
signs the webhook events agents push to the console: call :func:`verify_signature` with the
incoming request's method, path (with query), raw body and headers.

The secret is per cluster: env ``STRATA_AGENT_SECRET`` or the file named by
``STRATA_AGENT_SECRET_FILE`` (see :func:`load_secret`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Mapping

__all__ = [
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MAX_SKEW_SECONDS",
    "NonceCache",
    "SignatureError",
    "load_secret",
    "sign_headers",
    "signature_for",
    "verify_signature",
]

HEADER_TIMESTAMP = "X-Strata-Timestamp"
HEADER_NONCE = "X-Strata-Nonce"
HEADER_SIGNATURE = "X-Strata-Signature"
SIGNATURE_VERSION = "v1"
MAX_SKEW_SECONDS = 60


class SignatureError(Exception):
    """Raised when a request's signature is missing, wrong, stale or replayed."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def load_secret(env: Mapping[str, str] | None = None) -> bytes:
    """The cluster secret from ``STRATA_AGENT_SECRET`` or ``STRATA_AGENT_SECRET_FILE``."""
    env = os.environ if env is None else env
    value = env.get("STRATA_AGENT_SECRET")
    if value:
        return value.encode()
    path = env.get("STRATA_AGENT_SECRET_FILE")
    if path:
        with open(path, "rb") as fh:
            data = fh.read().strip()
        if data:
            return data
    raise RuntimeError("no agent secret: set STRATA_AGENT_SECRET or STRATA_AGENT_SECRET_FILE")


def _as_bytes(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def signature_for(
    secret: bytes | str, method: str, path: str, body: bytes, timestamp: str, nonce: str
) -> str:
    message = "\n".join(
        [method.upper(), path, timestamp, nonce, hashlib.sha256(body or b"").hexdigest()]
    ).encode()
    digest = hmac.new(_as_bytes(secret), message, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def sign_headers(
    secret: bytes | str, method: str, path: str, body: bytes = b"", *, now: float | None = None
) -> dict[str, str]:
    """Headers to add to a request of ``method`` on ``path`` (with query) carrying ``body``."""
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    return {
        HEADER_TIMESTAMP: timestamp,
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: signature_for(secret, method, path, body, timestamp, nonce),
    }


class NonceCache:
    """Nonces seen within the skew window; a second sighting is a replay. Thread-safe."""

    def __init__(self, ttl_seconds: float = 2 * MAX_SKEW_SECONDS):
        self._ttl = ttl_seconds
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def check_and_add(self, nonce: str, now: float) -> bool:
        """True if ``nonce`` is new (and remember it); False on replay."""
        with self._lock:
            if now >= self._next_prune:
                cutoff = now - self._ttl
                self._seen = {n: t for n, t in self._seen.items() if t >= cutoff}
                self._next_prune = now + 5
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            return True


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    if value is None:
        # Django's request.META spelling: HTTP_X_STRATA_TIMESTAMP.
        value = headers.get("HTTP_" + name.upper().replace("-", "_"))
    return value


def verify_signature(
    secret: bytes | str,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    nonce_cache: NonceCache | None = None,
    now: float | None = None,
) -> None:
    """Check a signed request; raise :class:`SignatureError` if it must be refused.

    ``headers`` may be any mapping: Starlette/httpx headers, Django's ``request.headers`` or even
    ``request.META``. Pass a long-lived ``nonce_cache`` to refuse replays (without one, only
    signature and staleness are checked).
    """
    now = time.time() if now is None else now
    timestamp = _header(headers, HEADER_TIMESTAMP)
    nonce = _header(headers, HEADER_NONCE)
    signature = _header(headers, HEADER_SIGNATURE)
    if not timestamp or not nonce or not signature:
        raise SignatureError("UNSIGNED", "missing signature headers")
    try:
        ts = int(timestamp)
    except ValueError:
        raise SignatureError("BAD_SIGNATURE", "malformed timestamp") from None
    if not (16 <= len(nonce) <= 64):
        raise SignatureError("BAD_SIGNATURE", "malformed nonce")
    expected = signature_for(secret, method, path, body, timestamp, nonce)
    if not hmac.compare_digest(expected, signature):
        raise SignatureError("BAD_SIGNATURE", "signature does not match")
    if abs(now - ts) > MAX_SKEW_SECONDS:
        raise SignatureError("STALE_REQUEST", f"timestamp is more than {MAX_SKEW_SECONDS}s off")
    if nonce_cache is not None and not nonce_cache.check_and_add(nonce, now):
        raise SignatureError("REPLAYED_REQUEST", "nonce already used")
