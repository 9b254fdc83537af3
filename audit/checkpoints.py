"""Signed checkpoints of the audit chain's head, kept outside PostgreSQL.

A checkpoint is a small JSON file ``audit-checkpoint-<seq>.json`` in
``STRATA_AUDIT_CHECKPOINT_DIR``: ``{"seq", "hash", "at", "key_id", "signature"}``, the signature an
HMAC under the audit key (:mod:`audit.keys`) of the other four fields. ``verify_chain`` reads every
valid checkpoint and reports a chain whose event at a checkpoint's seq has another hash
(re-written) or that ends before the latest checkpoint (its tail removed).

Decisions:
- A file, not a row: whoever can rewrite the audit table must not be able to rewrite its witness.
  The directory should live where the database's writers cannot write (another host's mount, a
  bucket with object lock); ``make run`` keeps it in ``.run/audit-checkpoints``. Writing to the
  remote object store is the object-storage issue's part.
- Only signed checkpoints are written (no audit key → none): an unsigned file is forged as easily
  as the table it guards. A file with a bad signature or an unknown key id is a *problem* that
  fails verification, never silently skipped.
- Written by the beat task ``audit.write_checkpoint`` (every ``STRATA_AUDIT_CHECKPOINT_SECONDS``)
  and ``manage.py audit_checkpoint``, only when the head moved and the events since the previous
  checkpoint verify; the newest ``STRATA_AUDIT_CHECKPOINT_KEEP`` files are kept.
- Writing a checkpoint records no audit event: that event would move the head it just signed.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from audit.keys import AuditKey, keyring

__all__ = ["checkpoint_dir", "load_valid", "signed_fields", "write"]

_NAME = re.compile(r"^audit-checkpoint-(\d{12})\.json$")
_FIELDS = ("seq", "hash", "at", "key_id")


def checkpoint_dir() -> Path | None:
    """The configured directory, or None when checkpoints are off."""
    configured = settings.STRATA_AUDIT_CHECKPOINT_DIR
    return Path(configured) if configured else None


def signed_fields(doc: dict[str, Any]) -> str:
    """The text a checkpoint's signature covers (domain-separated from event hashes)."""
    body = {name: doc[name] for name in _FIELDS}
    return "strata-audit-checkpoint:" + json.dumps(body, sort_keys=True, separators=(",", ":"))


def write(seq: int, head_hash: str, key: AuditKey) -> Path:
    """Write the signed checkpoint of ``seq`` / ``head_hash`` atomically; prune old ones."""
    directory = checkpoint_dir()
    if directory is None:
        raise RuntimeError("STRATA_AUDIT_CHECKPOINT_DIR is not set")
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "seq": seq,
        "hash": head_hash,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "key_id": key.key_id,
    }
    doc["signature"] = key.sign(signed_fields(doc))
    path = directory / f"audit-checkpoint-{seq:012d}.json"
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
    _prune(directory)
    return path


def _prune(directory: Path) -> None:
    files = sorted(p for p in directory.iterdir() if _NAME.match(p.name))
    for old in files[: max(0, len(files) - settings.STRATA_AUDIT_CHECKPOINT_KEEP)]:
        old.unlink(missing_ok=True)


def load_valid() -> tuple[dict[int, str], list[str]]:
    """``({seq: hash}, problems)`` over every checkpoint file in the directory.

    A problem names a file that is unreadable, malformed, signed with a key not configured here,
    or whose signature does not match: each makes verification fail."""
    directory = checkpoint_dir()
    if directory is None or not directory.is_dir():
        return {}, []
    marks: dict[int, str] = {}
    problems: list[str] = []
    keys = keyring()
    files = sorted((p, m) for p in directory.iterdir() if (m := _NAME.match(p.name)))
    if files and not keys:
        return {}, [
            f"{len(files)} signed checkpoints but no audit key is configured here "
            "(set STRATA_AUDIT_KEY or STRATA_AUDIT_KEY_FILE)"
        ]
    for path, match in files:
        try:
            doc = json.loads(path.read_text())
            seq, head_hash = int(doc["seq"]), str(doc["hash"])
            key = keys.get(doc["key_id"])
            signature = doc["signature"]
            text = signed_fields(doc)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{path.name}: unreadable checkpoint ({type(exc).__name__})")
            continue
        if key is None:
            problems.append(f"{path.name}: signed with audit key {doc['key_id']}, not configured")
        elif not hmac.compare_digest(key.sign(text), str(signature)) or seq != int(match.group(1)):
            problems.append(f"{path.name}: signature does not match (forged or edited)")
        else:
            marks[seq] = head_hash
    return marks, problems
