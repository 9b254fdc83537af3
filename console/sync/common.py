"""What the sync modules share: the sync's cursor, reading agents' and the controller's answers,
and error text."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

__all__ = [
    "Backwards",
    "MalformedAnswer",
    "SyncCursor",
    "error_text",
    "loads_json",
    "raw_json",
    "split_topics",
]


class SyncCursor:
    """The one cursor of a sync's transaction, handed to each of its parts: every statement
    they run takes the cluster's primary key and the sync's time as ``%(cluster)s`` and
    ``%(now)s``, so a part needs no more of the cluster to write its rows."""

    def __init__(self, cur: Any, cluster_pk: int, now: datetime):
        self.cur = cur  # Django's cursor: StageTable and plain statements use it
        self.cluster_pk = cluster_pk
        self.now = now

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> int:
        """Execute with ``cluster`` and ``now`` bound; answers the rows it touched."""
        self.cur.execute(statement, {"cluster": self.cluster_pk, "now": self.now, **(params or {})})
        rowcount: int = self.cur.rowcount
        return rowcount

    def raw(self, statement: str, params: dict[str, Any] | None = None) -> Any:
        """Execute on the psycopg cursor itself: its parameters are whole JSON answers (tens of
        MB), which Django's debug wrapper would format into its query log."""
        raw = self.cur.cursor
        raw.execute(statement, {"cluster": self.cluster_pk, "now": self.now, **(params or {})})
        return raw

    def execute(self, statement: str, params: list[Any] | None = None) -> None:
        """A statement with positional parameters, as it is (settings, lookups by key)."""
        self.cur.execute(statement, params)

    def fetchone(self) -> Any:
        return self.cur.fetchone()

    def fetchall(self) -> list[Any]:
        rows: list[Any] = self.cur.fetchall()
        return rows


def error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def raw_json(body: bytes) -> Jsonb:
    """A JSON answer as a ``jsonb`` parameter, sent as the bytes it came as (never re-encoded)."""
    return Jsonb(body, dumps=bytes)


#: Where the controller's answer lists its topics, and what follows them (the models' field
#: order: ``ClusterMetadata`` puts ``topics`` before ``changed``; ``TopicMetadata`` starts with
#: ``name`` and holds no array of objects whose first key is ``name``).
_TOPICS_HEAD = b'"topics":['
_TOPICS_TAIL = b'],"changed":'
_TOPIC_BOUNDARY = b'},{"name":"'


def split_topics(body: bytes, chunk_bytes: int) -> tuple[bytes, list[bytes]] | None:
    """The controller's metadata answer cut into its envelope (the answer with ``"topics":[]``)
    and JSON arrays of whole topics of about ``chunk_bytes`` each, without parsing it: a
    1,000,000-partition answer is 260 MB, past what one ``jsonb`` value may hold (256 MB) and
    ~3 GB as Python objects. ``None`` when the answer is not laid out as expected (the caller
    then stages it whole). A cut can only fall between two topics: ``{"name":"`` cannot occur
    inside a JSON string (its quotes would be escaped), and were it ever to fall inside a
    topic, both pieces would be invalid JSON and PostgreSQL would refuse them - never a
    silently wrong inventory."""
    head = body.find(_TOPICS_HEAD)
    tail = body.rfind(_TOPICS_TAIL)
    if head < 0 or tail < head:
        return None
    start = head + len(_TOPICS_HEAD)
    envelope = body[:start] + body[tail:]
    chunks: list[bytes] = []
    pos = start
    while pos < tail:
        cut = body.find(_TOPIC_BOUNDARY, min(pos + chunk_bytes, tail), tail)
        end = tail if cut < 0 else cut + 1  # keep the closing brace, drop the comma
        chunks.append(b"[" + body[pos:end] + b"]")
        pos = end + 1
    return envelope, chunks


def loads_json(value: Any) -> dict[str, Any]:
    """A small ``jsonb`` result (Django's connection hands ``jsonb`` back as text)."""
    obj: dict[str, Any] = json.loads(value) if isinstance(value, str | bytes) else value
    return obj


class MalformedAnswer(ValueError):
    """A controller or agent answer that lacks required fields."""


class Backwards(Exception):
    """An agent answered from a version older than the one asked from (it restarted)."""
