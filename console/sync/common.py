"""What the sync modules share: reading agents' and the controller's answers, and error text."""

from __future__ import annotations

import json

from psycopg.types.json import Json, Jsonb

__all__ = [
    "Backwards",
    "MalformedAnswer",
    "error_text",
    "loads_json",
    "raw_json",
    "raw_json_text",
]


def error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def raw_json(body: bytes) -> Jsonb:
    """A JSON answer as a ``jsonb`` parameter, sent as the bytes it came as (never re-encoded)."""
    return Jsonb(body, dumps=bytes)


def raw_json_text(body: bytes) -> Json:
    """A JSON answer as a ``json`` (text) parameter, sent as the bytes it came as. For a
    document that may pass 256 MB - a 1,000,000-partition cluster's metadata is 260 MB -
    which ``jsonb`` refuses whole ("total size of jsonb array elements exceeds the maximum");
    its parts are cast to ``jsonb`` one by one."""
    return Json(body, dumps=bytes)


def loads_json(value: object) -> dict:
    """A small ``jsonb`` result (Django's connection hands ``jsonb`` back as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


class MalformedAnswer(ValueError):
    """A controller or agent answer that lacks required fields."""


class Backwards(Exception):
    """An agent answered from a version older than the one asked from (it restarted)."""
