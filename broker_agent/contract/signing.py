"""HMAC-SHA256 request signing, shared by the agent server, its client and the console.

Headers ``X-Strata-Timestamp``, ``-Nonce``, ``-Audience`` and ``-Signature`` (``v2=<hex>``;
``v1=`` for webhook events, which carry no audience). Their shapes are checked before anything
is computed from them, so junk is 401 ``BAD_SIGNATURE``, never a 500 (``int()`` takes ``1_7``
and non-ASCII digits). ``v2`` signs method, audience, request target as sent, timestamp, nonce
and the body's SHA-256; ``MAX_SKEW_SECONDS`` (60 s) bounds staleness and the nonce cache.
The audience is the target's advertised ``host:port`` (:func:`audience_of`), refused as
``WRONG_AUDIENCE`` elsewhere: each agent has its own nonce cache, so an unbound command for one
broker would replay on another. In synthetic mode the broker id is in the signed path. The
secret is per cluster (:func:`load_secret`). Rationale: DESIGN.md "Processes".
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Collection, Mapping
from typing import TextIO
from urllib.parse import urlsplit

__all__ = [
    "HEADER_AUDIENCE",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MAX_SKEW_SECONDS",
    "NonceCache",
    "Refusal",
    "SignatureError",
    "audience_of",
    "check_signature_headers",
    "load_secret",
    "read_secret",
    "sign_headers",
    "signature_for",
    "verify_signature",
]

HEADER_TIMESTAMP = "X-Strata-Timestamp"
HEADER_NONCE = "X-Strata-Nonce"
HEADER_AUDIENCE = "X-Strata-Audience"
HEADER_SIGNATURE = "X-Strata-Signature"
UNBOUND_VERSION = "v1"  # no audience: webhook events to the console
BOUND_VERSION = "v2"  # names its audience: every request to an agent or a controller
MAX_SKEW_SECONDS = 60
# The shapes the headers must have (matched whole, ASCII only) before they are used.
_TIMESTAMP = re.compile(r"[0-9]{1,12}", re.ASCII)
_NONCE = re.compile(r"[0-9a-fA-F]{16,64}", re.ASCII)
_SIGNATURE = re.compile(rf"(?:{UNBOUND_VERSION}|{BOUND_VERSION})=[0-9a-f]{{64}}", re.ASCII)
#: How much of a refused audience the log line quotes.
_AUDIENCE_LOGGED = 100
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Refusal:
    """Why a signed request is refused (the prefix of the 401 message)."""

    UNSIGNED = "UNSIGNED"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    WRONG_AUDIENCE = "WRONG_AUDIENCE"
    STALE_REQUEST = "STALE_REQUEST"
    REPLAYED_REQUEST = "REPLAYED_REQUEST"


class SignatureError(Exception):
    """Raised when a request's signature is missing, wrong, misdirected, stale or replayed.

    ``message`` is safe to answer to the caller; ``detail`` (may be empty) is for the log only.
    """

    def __init__(self, code: str, message: str, detail: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


def read_secret(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The secret ``$NAME``, else the contents of the file named by ``$NAME_FILE`` (stripped of
    surrounding whitespace, so a mounted secret may end with a newline); None when neither gives
    one. A secret is never empty: an empty variable or file counts as unset.

    The one reader of secrets, with :func:`read_secret_file`: the agent's (:func:`load_secret`),
    Django's settings (``config.env.env_secret``), the simulated cluster's ``<data>/secret``
    (``processes.data_secret``) and a registered cluster's ``secret_ref``
    (``console.models.clusters.read_secret_ref``). Bytes that are not UTF-8 survive the round trip to bytes
    (``surrogateescape``, as in ``os.environ``), so a key file is used byte for byte."""
    env = os.environ if env is None else env
    value = env.get(name)
    if value:
        return value
    path = env.get(f"{name}_FILE")
    return read_secret_file(path) if path else None


def read_secret_file(path: str) -> str | None:
    """The secret held in the file ``path``: its contents stripped of surrounding whitespace,
    decoded like :func:`read_secret`; None when the file is empty. A missing file raises
    :class:`FileNotFoundError` (a reference to a file that is not there is a mistake to report,
    not an unset secret)."""
    with open(path, "rb") as fh:
        data = fh.read().strip()
    return data.decode("utf-8", "surrogateescape") if data else None


def load_secret(env: Mapping[str, str] | None = None) -> bytes:
    """The cluster secret from ``STRATA_AGENT_SECRET`` or ``STRATA_AGENT_SECRET_FILE``."""
    secret = read_secret("STRATA_AGENT_SECRET", env)
    if secret is None:
        raise RuntimeError("no agent secret: set STRATA_AGENT_SECRET or STRATA_AGENT_SECRET_FILE")
    return secret.encode("utf-8", "surrogateescape")


def audience_of(url: str) -> str:
    """The audience of ``url``: ``host:port`` as dialled, host lower-case, the scheme's default
    port filled in, an IPv6 host in brackets (``http://LocalHost`` -> ``localhost:80``).
    Path, query, user info are not part of it."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in _DEFAULT_PORTS:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def _as_bytes(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def signature_for(
    secret: bytes | str,
    method: str,
    path: str,
    body: bytes,
    timestamp: str,
    nonce: str,
    *,
    audience: str | None = None,
) -> str:
    """``v2=<hex>`` over method, audience, path, timestamp, nonce and the body's SHA-256; with
    no ``audience``, ``v1=<hex>`` over the same without the audience line (webhook events)."""
    fields = [method.upper(), path, timestamp, nonce, hashlib.sha256(body or b"").hexdigest()]
    version = UNBOUND_VERSION
    if audience is not None:
        fields.insert(1, audience)
        version = BOUND_VERSION
    digest = hmac.new(_as_bytes(secret), "\n".join(fields).encode(), hashlib.sha256).hexdigest()
    return f"{version}={digest}"


def sign_headers(
    secret: bytes | str,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    audience: str | None = None,
    now: float | None = None,
) -> dict[str, str]:
    """Headers to add to a request of ``method`` on ``path`` (with query) carrying ``body``.

    ``audience`` is the target's ``host:port`` (:func:`audience_of` of the URL dialled); agents
    and controllers refuse a request without it. Leave it out only for webhook events."""
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    headers = {HEADER_TIMESTAMP: timestamp, HEADER_NONCE: nonce}
    if audience is not None:
        headers[HEADER_AUDIENCE] = audience
    headers[HEADER_SIGNATURE] = signature_for(
        secret, method, path, body, timestamp, nonce, audience=audience
    )
    return headers


class NonceCache:
    """Nonces seen within the skew window; a second sighting is a replay. Thread-safe.

    With ``path``, the cache survives a restart: each new nonce is appended to that file (one
    ``<unix time> <nonce>`` line, flushed to the OS before the request is served) and a new
    process loads the lines still inside the window, so a request captured before a restart is
    still a replay after it. The file is compacted when it holds mostly expired lines. (A power
    loss may drop the last lines written; a process crash or SIGKILL does not.)"""

    def __init__(self, ttl_seconds: float = 2 * MAX_SKEW_SECONDS, path: str | None = None):
        self._ttl = ttl_seconds
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0
        self._path = path
        self._file: TextIO | None = None
        self._lines = 0
        if path:
            self._load(path)

    def _load(self, path: str) -> None:
        cutoff = time.time() - self._ttl
        try:
            with open(path, encoding="ascii", errors="replace") as fh:
                for line in fh:
                    stamp, _, nonce = line.strip().partition(" ")
                    try:
                        t = float(stamp)
                    except ValueError:
                        continue  # a torn last line
                    if nonce and t >= cutoff:
                        self._seen[nonce] = t
        except FileNotFoundError:
            pass
        self._rewrite()

    def _rewrite(self) -> None:
        """Replace the file by the live entries (under the lock, or before first use)."""
        assert self._path
        tmp = f"{self._path}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.writelines(f"{t:.3f} {n}\n" for n, t in self._seen.items())
        os.replace(tmp, self._path)
        if self._file is not None:
            self._file.close()
        self._file = open(self._path, "a", encoding="ascii")  # noqa: SIM115 (kept open)
        self._lines = len(self._seen)

    def check_and_add(self, nonce: str, now: float) -> bool:
        """True if ``nonce`` is new (and remember it); False on replay."""
        with self._lock:
            if now >= self._next_prune:
                cutoff = now - self._ttl
                self._seen = {n: t for n, t in self._seen.items() if t >= cutoff}
                self._next_prune = now + 5
                if self._file is not None and self._lines > 2 * len(self._seen) + 1000:
                    self._rewrite()
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            if self._file is not None:
                self._file.write(f"{now:.3f} {nonce}\n")
                self._file.flush()
                self._lines += 1
            return True


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    if value is None:
        # Django's request.META spelling: HTTP_X_STRATA_TIMESTAMP.
        value = headers.get("HTTP_" + name.upper().replace("-", "_"))
    return value


def check_signature_headers(
    headers: Mapping[str, str],
    *,
    audiences: Collection[str] | None = None,
    now: float | None = None,
) -> tuple[str, str, str | None]:
    """The checks that need no body: the headers are present and well formed, the timestamp is
    within the skew window and the audience is this server. Servers run it before they read a
    body, so an unsigned or misdirected request costs no more than its headers. Returns
    ``(timestamp, nonce, audience)``; :func:`verify_signature` runs it too."""
    now = time.time() if now is None else now
    timestamp = _header(headers, HEADER_TIMESTAMP)
    nonce = _header(headers, HEADER_NONCE)
    signature = _header(headers, HEADER_SIGNATURE)
    if not timestamp or not nonce or not signature:
        raise SignatureError(Refusal.UNSIGNED, "missing signature headers")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise SignatureError(Refusal.BAD_SIGNATURE, "malformed timestamp (unix seconds)")
    if not _NONCE.fullmatch(nonce):
        raise SignatureError(Refusal.BAD_SIGNATURE, "malformed nonce (16..64 hex digits)")
    if not _SIGNATURE.fullmatch(signature):
        raise SignatureError(Refusal.BAD_SIGNATURE, "malformed signature")
    if abs(now - int(timestamp)) > MAX_SKEW_SECONDS:
        raise SignatureError(
            Refusal.STALE_REQUEST, f"timestamp is more than {MAX_SKEW_SECONDS}s off"
        )
    audience = None
    if audiences is not None:
        audience = _header(headers, HEADER_AUDIENCE)
        if not audience:
            raise SignatureError(
                Refusal.WRONG_AUDIENCE,
                f"the request does not name its audience ({HEADER_AUDIENCE})",
                f"no audience; this server answers to {', '.join(sorted(audiences))}",
            )
        if audience not in audiences:
            raise SignatureError(
                Refusal.WRONG_AUDIENCE,
                "the request was signed for another target",
                f"signed for {audience[:_AUDIENCE_LOGGED]!r}; "
                f"this server answers to {', '.join(sorted(audiences))}",
            )
    return timestamp, nonce, audience


def verify_signature(
    secret: bytes | str,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    audiences: Collection[str] | None = None,
    nonce_cache: NonceCache | None = None,
    now: float | None = None,
) -> None:
    """Check a signed request; raise :class:`SignatureError` if it must be refused.

    ``headers`` may be any mapping: Starlette/httpx headers, Django's ``request.headers`` or even
    ``request.META``. ``audiences`` are the ``host:port`` names this server answers to: when
    given, the request must name one of them and carry a ``v2`` signature over it (agents and
    controllers); when ``None``, a ``v1`` signature without audience is expected (webhook events).
    Pass a long-lived ``nonce_cache`` to refuse replays (without one, only signature, audience
    and staleness are checked).
    """
    now = time.time() if now is None else now
    timestamp, nonce, audience = check_signature_headers(headers, audiences=audiences, now=now)
    signature = _header(headers, HEADER_SIGNATURE) or ""
    expected = signature_for(secret, method, path, body, timestamp, nonce, audience=audience)
    if not hmac.compare_digest(expected, signature):
        raise SignatureError(Refusal.BAD_SIGNATURE, "signature does not match")
    if nonce_cache is not None and not nonce_cache.check_and_add(nonce, now):
        raise SignatureError(Refusal.REPLAYED_REQUEST, "nonce already used")
