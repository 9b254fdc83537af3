"""Bulk loading: ``COPY`` rows into a temporary table, then merge with one SQL statement.

This is how the sync writes a 200,000-partition cluster without one query per row: every kind
of row is streamed into a ``TEMP`` table (dropped at commit) with PostgreSQL's ``COPY``, and a
single ``INSERT ... SELECT ... ON CONFLICT DO UPDATE ... WHERE ... IS DISTINCT FROM`` merges it,
so unchanged rows are not even rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from psycopg.types.json import Jsonb

__all__ = ["Column", "StageTable", "jsonb"]

Column = tuple[str, str]


def jsonb(value: object) -> Jsonb:
    """A value for a ``jsonb`` column (encoded at COPY time; never pass pre-encoded JSON)."""
    return Jsonb(value)


_NULL = "\\N"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _text(value: object) -> str:
    return str(value).translate(_ESCAPES)


def _int(value: object) -> str:
    return str(int(value))


def _bool(value: object) -> str:
    return "t" if value else "f"


def _int_array(value: object) -> str:
    return "{" + ",".join(str(int(v)) for v in value) + "}"


def _json(value: object) -> str:
    obj = value.obj if isinstance(value, Jsonb) else value
    return json.dumps(obj, separators=(",", ":")).translate(_ESCAPES)


_FORMATTERS = {
    "text": _text,
    "int4": _int,
    "int8": _int,
    "float8": lambda v: repr(float(v)),
    "bool": _bool,
    "int4[]": _int_array,
    "jsonb": _json,
}


class StageTable:
    """A temporary table with typed columns, filled by ``COPY ... FROM STDIN``."""

    def __init__(
        self,
        cursor,
        name: str,
        columns: Sequence[Column],
        *,
        not_null: Sequence[str] = (),
        keys: Sequence[str] = (),
    ):
        self.cursor = cursor
        self.name = name
        self.columns = list(columns)
        self.keys = list(keys)
        self.rows = 0
        self._analyzed_at_rows = -1
        cols = ", ".join(
            f"{c} {t}" + (" NOT NULL" if c in not_null else "") for c, t in self.columns
        )
        # Dropped first: inside an outer transaction (tests, a caller's atomic block) the
        # previous sync's tables are still there, ON COMMIT DROP notwithstanding.
        cursor.execute(
            f"DROP TABLE IF EXISTS pg_temp.{name}; CREATE TEMP TABLE {name} ({cols}) ON COMMIT DROP"
        )

    def copy(self, rows: Iterable[Sequence[object]]) -> int:
        """Append ``rows`` (tuples in column order); returns how many were written.

        Rows are formatted here in COPY's text format (a few times faster than psycopg's
        per-value dumpers, which matters at 600,000 replicas) and sent in large chunks.
        """
        names = ", ".join(c for c, _ in self.columns)
        fmts = [_FORMATTERS[t] for _, t in self.columns]
        raw = self.cursor.cursor  # the psycopg cursor under Django's wrapper
        n = 0
        buf: list[str] = []
        with raw.copy(f"COPY {self.name} ({names}) FROM STDIN") as copy:
            for row in rows:
                buf.append(
                    "\t".join(_NULL if v is None else f(v) for f, v in zip(fmts, row, strict=True))
                )
                n += 1
                if len(buf) >= 5000:
                    copy.write("\n".join(buf) + "\n")
                    buf.clear()
            if buf:
                copy.write("\n".join(buf) + "\n")
        self.rows += n
        return n

    def copy_text(self, *parts: bytes | memoryview, chunk: int = 1 << 20) -> int:
        """Append rows that already are COPY text format, one per line, in column order (an
        agent's ``format=tsv`` snapshot; several ``parts`` go in one COPY, each ended by a
        newline); returns how many were written. A malformed row raises the database's error
        (``psycopg.DataError`` / ``IntegrityError``) and writes nothing."""
        names = ", ".join(c for c, _ in self.columns)
        raw = self.cursor.cursor
        with raw.copy(f"COPY {self.name} ({names}) FROM STDIN") as copy:
            for data in parts:
                view = memoryview(data)
                for start in range(0, len(view), chunk):
                    copy.write(view[start : start + chunk])
                if view and view[-1] != ord("\n"):
                    copy.write(b"\n")
        n = max(0, raw.rowcount)
        self.rows += n
        return n

    def analyze(self) -> None:
        """Give the planner row counts for the merge (temp tables are never auto-analysed),
        and statistics of the ``keys`` it joins on (of every column without keys): the other
        columns are only read, and analysing them all (27 of a replica) was most of the cost
        (#17). A table analysed since its last rows is not analysed again."""
        if self.rows == self._analyzed_at_rows:
            return
        keys = f" ({', '.join(self.keys)})" if self.keys else ""
        self.cursor.execute(f"ANALYZE {self.name}{keys}")
        self._analyzed_at_rows = self.rows
