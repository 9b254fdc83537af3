"""Signed checkpoints of the audit chain's head, kept outside PostgreSQL, in two series.

A checkpoint ``{"n", "seq", "hash", "count", "at", "key_id", "signature"}`` (HMAC under the
audit key) is written first to the external series in the object store, the authority
(:mod:`audit.checkpoint_store`), then to local files ``<n:012d>.json``; a checkpoint the store
refused is not written locally. Not a row, since whoever rewrites the table must not rewrite its
witness; local files alone prove nothing to whoever holds the machine (#39). Only signed
checkpoints are written. :func:`load_series` names every problem (unreadable, forged, unknown
key, gap, series disagreeing, store unreachable), each failing verification. Written only when
the head moved and all verifies; writing one records no audit event (it would move the head).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hmac
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from audit.keys import AuditKey, keyring, signing_key

__all__ = [
    "Checkpoint",
    "Series",
    "checkpoint_dir",
    "enabled",
    "external_enabled",
    "load_series",
    "make",
    "parse",
    "signed_fields",
    "spans",
    "write_local",
]

_NAME = re.compile(r"^(\d{12})\.json$")
#: Checkpoints written before they were numbered: ``audit-checkpoint-<seq>.json``, no ``n``.
_LEGACY_NAME = re.compile(r"^audit-checkpoint-(\d{12})\.json$")
_FIELDS = ("n", "seq", "hash", "count", "at", "key_id")
_LEGACY_FIELDS = ("seq", "hash", "at", "key_id")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One valid signed checkpoint; ``n`` is None for a legacy (unnumbered) one."""

    n: int | None
    seq: int
    hash: str
    count: int | None
    at: str

    def same_mark(self, other: Checkpoint) -> bool:
        return (self.seq, self.hash, self.count) == (other.seq, other.hash, other.count)

    @property
    def at_time(self) -> dt.datetime | None:
        try:
            return dt.datetime.fromisoformat(self.at)
        except ValueError:
            return None


def checkpoint_dir() -> Path | None:
    """The configured local directory, or None when the local series is off."""
    configured = settings.STRATA_AUDIT_CHECKPOINT_DIR
    return Path(configured) if configured else None


def external_enabled() -> bool:
    """Whether the external series is configured (``STRATA_AUDIT_CHECKPOINT_STORE`` not off)."""
    return settings.STRATA_AUDIT_CHECKPOINT_STORE.strip().lower() != "off"


def enabled() -> bool:
    """Whether checkpoints are written: an audit key and at least one series configured."""
    return signing_key() is not None and (checkpoint_dir() is not None or external_enabled())


def signed_fields(doc: dict[str, Any]) -> str:
    """The text a checkpoint's signature covers (domain-separated from event hashes)."""
    names = _FIELDS if "n" in doc else _LEGACY_FIELDS
    body = {name: doc[name] for name in names}
    return "strata-audit-checkpoint:" + json.dumps(body, sort_keys=True, separators=(",", ":"))


def make(n: int, seq: int, head_hash: str, count: int, key: AuditKey) -> dict[str, Any]:
    """The signed document of the ``n``-th checkpoint."""
    doc: dict[str, Any] = {
        "n": n,
        "seq": seq,
        "hash": head_hash,
        "count": count,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "key_id": key.key_id,
    }
    doc["signature"] = key.sign(signed_fields(doc))
    return doc


def parse(
    raw: bytes | str, name: str, number: int | None, keys: dict[str, AuditKey]
) -> tuple[Checkpoint | None, str | None]:
    """``(Checkpoint, None)`` for a valid signed document, else ``(None, problem)``.

    ``number`` is the ``n`` its file or object name says (None for a legacy file): a document
    moved to another number is a problem, like an edited one."""
    try:
        doc = json.loads(raw)
        legacy = "n" not in doc
        cp = Checkpoint(
            n=None if legacy else int(doc["n"]),
            seq=int(doc["seq"]),
            hash=str(doc["hash"]),
            count=None if legacy else int(doc["count"]),
            at=str(doc["at"]),
        )
        key = keys.get(doc["key_id"])
        signature = str(doc["signature"])
        text = signed_fields(doc)
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{name}: unreadable checkpoint ({type(exc).__name__})"
    if key is None:
        return None, f"{name}: signed with audit key {doc['key_id']}, not configured"
    if not hmac.compare_digest(key.sign(text), signature) or cp.n != number:
        return None, f"{name}: signature does not match (forged or edited)"
    return cp, None


def write_local(doc: dict[str, Any]) -> Path:
    """Write a checkpoint document into the local directory atomically; prune old ones."""
    directory = checkpoint_dir()
    if directory is None:
        raise RuntimeError("STRATA_AUDIT_CHECKPOINT_DIR is not set")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{doc['n']:012d}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-checkpoint-")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    files = sorted(p for p in directory.iterdir() if _NAME.match(p.name))
    for old in files[: max(0, len(files) - settings.STRATA_AUDIT_CHECKPOINT_KEEP)]:
        old.unlink(missing_ok=True)
    return path


def _read_local(
    keys: dict[str, AuditKey],
) -> tuple[dict[int, Checkpoint], list[Checkpoint], list[str]]:
    """``(numbered by n, legacy, problems)`` of the local directory."""
    directory = checkpoint_dir()
    numbered: dict[int, Checkpoint] = {}
    legacy: list[Checkpoint] = []
    problems: list[str] = []
    if directory is None or not directory.is_dir():
        return numbered, legacy, problems
    for path in sorted(directory.iterdir()):
        match, old = _NAME.match(path.name), _LEGACY_NAME.match(path.name)
        if not (match or old):
            continue
        try:
            raw = path.read_bytes()
        except OSError as exc:
            problems.append(f"{path.name}: unreadable checkpoint ({type(exc).__name__})")
            continue
        number = int(match.group(1)) if match else None
        cp, problem = parse(raw, path.name, number, keys)
        if cp is None:
            problems.append(problem or f"{path.name}: unreadable checkpoint")
        elif cp.n is not None:
            numbered[cp.n] = cp
        elif old is not None and cp.seq == int(old.group(1)):  # legacy: the name says its seq
            legacy.append(cp)
        else:
            problems.append(f"{path.name}: signature does not match (forged or edited)")
    return numbered, legacy, problems


def spans(numbers: list[int]) -> str:
    """``#3``, ``#3..#5`` or ``#3, #7..#9``: a set of checkpoint numbers, readably."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return ", ".join(f"#{a}" if a == b else f"#{a}..#{b}" for a, b in out)


def _gap_problem(label: str, numbers: set[int]) -> str | None:
    if not numbers:
        return None
    missing = sorted(set(range(min(numbers), max(numbers) + 1)) - numbers)
    if not missing:
        return None
    return (
        f"{label} has a gap: checkpoints {spans(missing)} are missing between #{min(numbers)} "
        f"and #{max(numbers)} (deleted?)"
    )


@dataclasses.dataclass
class Series:
    """Both series as read, with every problem found in or between them."""

    local: dict[int, Checkpoint] = dataclasses.field(default_factory=dict)
    legacy: list[Checkpoint] = dataclasses.field(default_factory=list)
    #: ``None`` when the external series is off; else what the store held (see ``external``).
    external: dict[str, Any] | None = None
    external_numbers: set[int] = dataclasses.field(default_factory=set)
    external_read: dict[int, Checkpoint] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    def all(self) -> list[Checkpoint]:
        """Every valid checkpoint read (the external one where both series hold an ``n``)."""
        merged = {**self.local, **self.external_read}
        return [*merged.values(), *self.legacy]

    def marks(self) -> dict[int, tuple[str, int | None]]:
        """``{seq: (hash, count)}`` of every valid checkpoint: what the chain must match."""
        return {cp.seq: (cp.hash, cp.count) for cp in sorted(self.all(), key=lambda c: c.n or 0)}

    def newest(self) -> Checkpoint | None:
        """The checkpoint of the highest ``n`` (a legacy one only when none is numbered)."""
        numbered = {**self.local, **self.external_read}
        if numbered:
            return numbered[max(numbered)]
        return max(self.legacy, key=lambda c: c.seq) if self.legacy else None

    def next_number(self) -> int:
        return max([0, *self.local, *self.external_numbers]) + 1


def load_series(read_external: int | None = None) -> Series:
    """Both series and their problems.

    ``read_external`` bounds how many of the newest external checkpoints are read (all are
    listed); default ``STRATA_AUDIT_CHECKPOINT_KEEP``, the writer reads only the newest."""
    from audit import checkpoint_store

    keys = keyring()
    series = Series()
    series.local, series.legacy, series.problems = _read_local(keys)
    local_count = len(series.local) + len(series.legacy)
    if local_count and not keys:
        series.problems = [
            f"{local_count} signed checkpoints but no audit key is configured here "
            "(set STRATA_AUDIT_KEY or STRATA_AUDIT_KEY_FILE)"
        ]
        return series
    if problem := _gap_problem("the local checkpoint directory", set(series.local)):
        series.problems.append(problem)
    if not external_enabled():
        return series
    limit = settings.STRATA_AUDIT_CHECKPOINT_KEEP if read_external is None else read_external
    listing = checkpoint_store.read_series(keys, limit)
    series.external = listing.summary()
    series.problems.extend(listing.problems)
    if not listing.checked:
        return series
    series.external_numbers, series.external_read = set(listing.numbers), listing.read
    if problem := _gap_problem(f"the external series at {listing.uri}", series.external_numbers):
        series.problems.append(problem)
    series.problems.extend(_disagreements(series, listing.uri))
    return series


def _disagreements(series: Series, uri: str) -> list[str]:
    """Where the local and the external series differ (only when the local one is on)."""
    if checkpoint_dir() is None:
        return []
    local, external = set(series.local), series.external_numbers
    problems = []
    if only_local := sorted(local - external):
        problems.append(
            f"checkpoints {spans(only_local)} are in the local directory but not in the "
            f"external series at {uri} (deleted from the store?)"
        )
    floor = min(local) if local else 0
    if only_external := sorted(n for n in external - local if n >= floor):
        problems.append(
            f"checkpoints {spans(only_external)} are in the external series but not in the "
            "local directory (deleted locally?)"
            if local
            else f"the local checkpoint directory holds none of the external series' "
            f"checkpoints ({spans(only_external)}): emptied?"
        )
    for n in sorted(local & set(series.external_read)):
        if not series.local[n].same_mark(series.external_read[n]):
            problems.append(
                f"checkpoint #{n} differs between the local directory "
                f"(#{series.local[n].seq}) and the external series "
                f"(#{series.external_read[n].seq})"
            )
    return problems
