"""The audit log's keys: the chain is an HMAC chain keyed outside the database.

Decisions:
- The key comes from ``STRATA_AUDIT_KEY`` or the file named by ``STRATA_AUDIT_KEY_FILE`` (never
  from PostgreSQL: a database writer who can read the key can re-compute the chain). The file
  may hold several keys, one per line: the first signs new events and checkpoints, the others
  only verify (rotation without re-writing history).
- A key is at least 32 characters (e.g. ``openssl rand -hex 32``); its UTF-8 bytes are the HMAC
  key. Each event stores the *key id* (16 hex digits of a SHA-256 over a fixed prefix and the
  key), so a verifier knows which key to use and a reviewer sees when the key changed. The id
  reveals nothing usable about a random key.
- No key configured: new events are written unkeyed (plain SHA-256 chain, ``key_id`` empty) and
  ``verify_audit`` says so; ``make run`` always generates one into ``.run/audit-key``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["MIN_KEY_CHARS", "AuditKey", "key_id_of", "keyring", "signing_key"]

MIN_KEY_CHARS = 32
_KEY_ID_PREFIX = b"strata-audit-key-id:"


@dataclasses.dataclass(frozen=True)
class AuditKey:
    key_id: str
    secret: bytes

    def sign(self, message: str) -> str:
        return hmac.new(self.secret, message.encode(), hashlib.sha256).hexdigest()


def key_id_of(secret: bytes) -> str:
    return hashlib.sha256(_KEY_ID_PREFIX + secret).hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def parse_keys(text: str) -> tuple[AuditKey, ...]:
    """Keys from ``text`` (one per line, blank lines and ``#`` comments skipped)."""
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) < MIN_KEY_CHARS:
            raise ImproperlyConfigured(
                f"an audit key (STRATA_AUDIT_KEY / _FILE) must be at least {MIN_KEY_CHARS} "
                f"characters; one has {len(line)}"
            )
        secret = line.encode()
        keys.append(AuditKey(key_id_of(secret), secret))
    return tuple(keys)


def keyring() -> dict[str, AuditKey]:
    """Every configured key by id (the signing key first)."""
    return {k.key_id: k for k in parse_keys(settings.STRATA_AUDIT_KEYS)}


def signing_key() -> AuditKey | None:
    """The key new events and checkpoints are signed with, or None (unkeyed)."""
    keys = parse_keys(settings.STRATA_AUDIT_KEYS)
    return keys[0] if keys else None
