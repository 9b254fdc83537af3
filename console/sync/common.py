"""What the sync modules share: reading agents' and the controller's answers, and error text."""

from __future__ import annotations

import json

from psycopg.types.json import Jsonb

__all__ = ["Backwards", "MalformedAnswer", "error_text", "loads_json", "raw_json"]


def error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def raw_json(body: bytes) -> Jsonb:
    """A JSON answer as a ``jsonb`` parameter, sent as the bytes it came as (never re-encoded)."""
    return Jsonb(body, dumps=bytes)


def loads_json(value: object) -> dict:
    """A small ``jsonb`` result (Django's connection hands ``jsonb`` back as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


class MalformedAnswer(ValueError):
    """A controller or agent answer that lacks required fields."""


class Backwards(Exception):
    """An agent answered from a version older than the one asked from (it restarted)."""
