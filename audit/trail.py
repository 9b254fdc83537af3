"""Writing and verifying the audit log.

``record()`` is the only writer: call it inside the change's ``transaction.atomic()`` (fail
closed; it refuses to run outside one) and *last*, because its transaction-scoped advisory lock
serialises audited transactions until commit (row locks after it invite deadlocks). The hash is
``HMAC-SHA256(key, canonical JSON + key_id + prev_hash)`` (unkeyed ``sha256`` for events from
before keys, so old chains verify); values are normalised before storing so ``jsonb`` gives back
what was hashed. ``verify_chain`` detects edits, deletions, insertions, re-orderings, a chain
re-computed without the key, and with the checkpoints a removed tail. It cannot detect tail
removal after the newest checkpoint (two intervals), nor an attacker holding the key *and*
able to delete from the external series.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import getpass
import hashlib
import json
import math
import socket
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from audit import checkpoints as audit_checkpoints
from audit.choices import AuditContext, AuditOutcome
from audit.keys import AuditKey, keyring, signing_key
from audit.models import AuditEvent

__all__ = [
    "GENESIS_HASH",
    "AuditError",
    "AuditScope",
    "VerifyResult",
    "audit_scope",
    "canonical_json",
    "compute_hash",
    "current_scope",
    "event_payload",
    "normalise",
    "record",
    "record_many",
    "verify_chain",
]

GENESIS_HASH = "0" * 64
#: Key of the transaction-scoped advisory lock that serialises appends ("AUDITLOG" in ASCII).
AUDIT_LOCK_KEY = 0x4155444954_4C4F47
_UNSET: Any = object()


class AuditError(RuntimeError):
    """The audit log cannot be written as asked (misuse, not a database failure)."""


# --- scope: who acts, from where -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AuditScope:
    """Defaults for ``record()``: the context and actor of the request, task or command.

    ``actor`` may be a callable, resolved at record time (the API authenticates a bearer token
    after the middleware ran)."""

    context: str
    actor: Any = None
    actor_name: str = ""

    def resolve_actor(self) -> Any:
        actor = self.actor() if callable(self.actor) else self.actor
        if actor is not None and not getattr(actor, "is_authenticated", False):
            return None
        return actor


_scope: contextvars.ContextVar[AuditScope | None] = contextvars.ContextVar(
    "strata_audit_scope", default=None
)


def current_scope() -> AuditScope | None:
    return _scope.get()


@contextlib.contextmanager
def audit_scope(context: str, actor: Any = None, actor_name: str = "") -> Iterator[AuditScope]:
    """Make ``context`` / ``actor`` the defaults of every ``record()`` in the block."""
    if context not in AuditContext.ALL:
        raise AuditError(f"unknown audit context {context!r}")
    scope = AuditScope(context=context, actor=actor, actor_name=actor_name)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def process_actor_name(context: str) -> str:
    """Name of a non-human actor: ``worker@host``, ``beat@host``, ``cli:user@host``."""
    host = socket.gethostname()
    if context == AuditContext.CLI:
        try:
            return f"cli:{getpass.getuser()}@{host}"
        except (KeyError, OSError):
            return f"cli@{host}"
    return f"{context}@{host}"


# --- canonical form and hash ------------------------------------------------------------------


def normalise(value: Any) -> Any:
    """The JSON value as it will read back from ``jsonb``: plain types, integral floats as ints.

    Raises ``ValueError`` for NaN / infinity (not JSON) so a bad event fails closed."""
    value = json.loads(json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False))
    return _fix_numbers(value)


def _fix_numbers(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if isinstance(value, dict):
        return {k: _fix_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_numbers(v) for v in value]
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")  # PostgreSQL text and jsonb refuse NUL
    return value


def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="microseconds")


def event_payload(row: dict[str, Any]) -> dict[str, Any]:
    """The hashed fields of an event, from a ``values()`` row or a dict of field values.

    ``key_id`` is part of the payload only when set: an unkeyed event hashes exactly as events
    did before keys existed."""
    payload = {
        "seq": row["seq"],
        "created_at": _iso(row["created_at"]),
        "actor_id": row["actor_id"],
        "actor_name": row["actor_name"],
        "context": row["context"],
        "action": row["action"],
        "target_type": row["target_type"],
        "target_id": row["target_id"],
        "workflow_id": row["workflow_id"],
        "before": row["before"],
        "after": row["after"],
        "outcome": row["outcome"],
        "extra": row["extra"],
        "prev_hash": row["prev_hash"],
    }
    if row.get("key_id"):
        payload["key_id"] = row["key_id"]
    return payload


def canonical_json(payload: dict[str, Any]) -> str:
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def compute_hash(payload: dict[str, Any], key: AuditKey | None = None) -> str:
    """HMAC-SHA256 under ``key`` of the canonical JSON; plain SHA-256 when ``key`` is None."""
    text = canonical_json(payload)
    if key is not None:
        return key.sign(text)
    return hashlib.sha256(text.encode()).hexdigest()


# --- append -------------------------------------------------------------------------------


def record(action: str, **fields: Any) -> AuditEvent:
    """Append one event to the chain, in the caller's transaction.

    ``fields`` are :func:`_event_fields`' keywords: ``actor`` (a user or None) and ``context``
    default to the current :func:`audit_scope`; ``actor_name`` defaults to the user's name, else
    to the process (``worker@host``); ``workflow`` (a Workflow or its id) puts the event on that
    workflow's timeline; ``target_type`` / ``target_id``, ``before`` / ``after``, ``outcome``
    and ``extra`` describe the change.
    """
    return record_many([{"action": action, **fields}])[0]


def record_many(events: list[dict[str, Any]]) -> list[AuditEvent]:
    """Append several events to the chain, in this order, in the caller's transaction: each a
    dict of :func:`record`'s arguments (``action`` included). One lock, one read of the chain's
    head and one INSERT for all of them — a fan-out's acknowledgements, recorded as they arrive
    (#17); the events and their hashes are exactly those :func:`record` would append one by
    one."""
    if not connection.in_atomic_block:
        raise AuditError("record() must be called inside transaction.atomic() with the change")
    rows = [_event_fields(**event) for event in events]
    if not rows:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [AUDIT_LOCK_KEY])
    last = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    seq, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS_HASH)
    key = signing_key()
    for fields in rows:
        fields.update(
            seq=seq,
            prev_hash=prev_hash,
            created_at=timezone.now(),
            key_id=key.key_id if key else "",
        )
        fields["hash"] = compute_hash(event_payload(fields), key)
        seq, prev_hash = seq + 1, fields["hash"]
    if len(rows) == 1:
        return [AuditEvent.objects.create(**rows[0])]
    return AuditEvent.objects.bulk_create([AuditEvent(**fields) for fields in rows])


def _event_fields(
    action: str,
    *,
    actor: Any = _UNSET,
    actor_name: str = "",
    context: str | None = None,
    target_type: str = "",
    target_id: str | int = "",
    workflow: Any = None,
    before: Any = None,
    after: Any = None,
    outcome: str = AuditOutcome.SUCCESS,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An event's fields but its place in the chain (seq, prev_hash, hash, time, key)."""
    scope = current_scope()
    if actor is _UNSET:
        actor = scope.resolve_actor() if scope else None
    context = context or (scope.context if scope else None)
    if context not in AuditContext.ALL:
        raise AuditError(f"audit context missing or unknown: {context!r}")
    if outcome not in AuditOutcome.ALL:
        raise AuditError(f"unknown audit outcome {outcome!r}")
    if not actor_name:
        if actor is not None:
            actor_name = actor.get_username()
        elif scope and scope.actor_name:
            actor_name = scope.actor_name
        else:
            actor_name = process_actor_name(context)
    return {
        "actor_id": getattr(actor, "pk", None),
        "actor_name": str(actor_name)[:150],
        "context": context,
        "action": action,
        "target_type": target_type,
        "target_id": str(target_id)[:255],
        "workflow_id": getattr(workflow, "pk", workflow),
        "before": normalise(before),
        "after": normalise(after),
        "outcome": outcome,
        "extra": normalise(extra or {}),
    }


def record_standalone(action: str, **kwargs: Any) -> AuditEvent:
    """``record()`` in a transaction of its own: for events that change nothing else (a refused
    request, a failed login). Inside an outer transaction it becomes a savepoint of it."""
    with transaction.atomic():
        return record(action, **kwargs)


# --- verify -------------------------------------------------------------------------------


@dataclasses.dataclass
class VerifyResult:
    """What ``verify_chain`` found. Stable fields (``/api/v1/audit/verify``, ``verify_audit
    --json``): ``ok``, ``events``, ``first_broken`` (``seq``, ``id``, ``reason``), ``head_seq``,
    ``head_hash``; added: ``first_broken.unverifiable`` (the event names a key not configured
    here: unverifiable, not evidence of tampering), ``keyed_events`` / ``unkeyed_events`` (how
    many are HMACs under a configured key / plain SHA-256), ``checkpoints`` (valid signed
    checkpoints read), ``checkpoint_seq`` (the latest one's seq), ``problems`` (each a reason: a
    checkpoint not valid, a gap, the series disagreeing, the external series not checked, events
    left uncovered too long; any makes ``ok`` false) and ``external`` (the external series:
    ``location``, ``checked``, ``error``, ``object_lock``, ``checkpoints``, ``newest``; None when
    it is off)."""

    ok: bool
    events: int
    first_broken: dict[str, Any] | None = None
    head_seq: int | None = None
    head_hash: str | None = None
    keyed_events: int = 0
    unkeyed_events: int = 0
    checkpoints: int = 0
    checkpoint_seq: int | None = None
    problems: list[str] = dataclasses.field(default_factory=list)
    external: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_VERIFY_FIELDS = (
    "id",
    "seq",
    "created_at",
    "actor_id",
    "actor_name",
    "context",
    "action",
    "target_type",
    "target_id",
    "workflow_id",
    "before",
    "after",
    "outcome",
    "extra",
    "key_id",
    "prev_hash",
    "hash",
)


def _row_problem(
    row: dict[str, Any], expected_seq: int, prev: str, keyed_seen: bool, keys: dict[str, AuditKey]
) -> str | None:
    if row["seq"] != expected_seq:
        return f"sequence gap: expected seq {expected_seq}, found {row['seq']}"
    if row["prev_hash"] != prev:
        return "prev_hash does not match the previous event's hash"
    key = None
    if row["key_id"]:
        key = keys.get(row["key_id"])
        if key is None:
            return (
                f"signed with audit key {row['key_id']}, which is not configured here "
                "(STRATA_AUDIT_KEY / STRATA_AUDIT_KEY_FILE)"
            )
    elif keyed_seen:
        return "unkeyed event after keyed events (re-written without the audit key?)"
    if compute_hash(event_payload(row), key) != row["hash"]:
        return "hash does not match the event's contents"
    return None


def verify_chain(
    chunk_size: int = 5000,
    progress: Callable[[int], None] | None = None,
    after: tuple[int, str] | None = None,
    series: audit_checkpoints.Series | None = None,
) -> VerifyResult:
    """Walk the chain in ``seq`` order over a server-side cursor; stop at the first break.

    A break is a gap or repeat in ``seq`` (a deleted or inserted row), a ``prev_hash`` that is
    not the previous event's hash (re-ordered or deleted), a ``hash`` that is not the event's
    HMAC under the key its ``key_id`` names (edited, or re-computed without the key), an unkeyed
    event after a keyed one, an event whose hash differs from a signed checkpoint's, or a chain
    that ends before the latest signed checkpoint (its tail removed). The checkpoint series'
    own problems (:func:`audit.checkpoints.load_series`) and :func:`_coverage_problem` fail it too.

    ``after=(seq, hash)`` verifies only the events after a trusted ``seq`` whose hash is ``hash``
    (the checkpoint writer's incremental check, which passes the ``series`` it read); ``events``
    then counts those events only, and the coverage rule is not applied."""
    if series is None:
        series = audit_checkpoints.load_series()
    marks = series.marks()
    keys = keyring()
    result = VerifyResult(
        ok=not series.problems,
        events=0,
        checkpoints=len(series.all()),
        checkpoint_seq=max(marks) if marks else None,
        problems=list(series.problems),
        external=series.external,
    )
    expected_seq, prev = (after[0] + 1, after[1]) if after else (1, GENESIS_HASH)
    rows = AuditEvent.objects.order_by("seq")
    if after:
        rows = rows.filter(seq__gt=after[0])
        anchor = AuditEvent.objects.filter(seq=after[0]).values("id", "hash").first()
        if anchor is None or anchor["hash"] != after[1]:
            result.ok = False
            result.first_broken = {
                "seq": after[0],
                "id": anchor and anchor["id"],
                "reason": "the event a signed checkpoint names is missing or differs",
            }
            return result
    for row in rows.values(*_VERIFY_FIELDS).iterator(chunk_size):
        reason = _row_problem(row, expected_seq, prev, result.keyed_events > 0, keys)
        mark_hash, mark_count = marks.get(row["seq"], (row["hash"], None))
        if reason is None and mark_hash != row["hash"]:
            reason = "hash differs from the signed checkpoint at this seq (re-written)"
        elif reason is None and mark_count not in (None, row["seq"]):
            reason = f"a signed checkpoint counts {mark_count} events up to this seq"
        if reason:
            result.ok = False
            result.first_broken = {
                "seq": row["seq"],
                "id": row["id"],
                "reason": reason,
                # not evidence of tampering: this verifier lacks the key the event names
                "unverifiable": bool(row["key_id"]) and row["key_id"] not in keys,
            }
            break
        result.events += 1
        if row["key_id"]:
            result.keyed_events += 1
        else:
            result.unkeyed_events += 1
        expected_seq, prev = row["seq"] + 1, row["hash"]
        if progress and result.events % chunk_size == 0:
            progress(result.events)
    result.head_seq = expected_seq - 1 or None
    result.head_hash = prev if result.events or after else None
    if result.first_broken is None and marks and max(marks) > expected_seq - 1:
        result.ok = False
        result.first_broken = {
            "seq": expected_seq,
            "id": None,
            "reason": f"the log ends at #{expected_seq - 1} but a signed checkpoint names "
            f"#{max(marks)}: events were removed from its end",
        }
    problem = (
        None
        if after or result.first_broken
        else _coverage_problem(series.newest(), result.head_seq)
    )
    if problem:
        result.ok = False
        result.problems.append(problem)
    return result


def _coverage_problem(
    newest: audit_checkpoints.Checkpoint | None, head_seq: int | None
) -> str | None:
    """Events no checkpoint has covered for more than two intervals, when checkpoints are on.

    The writer signs a moved head every ``STRATA_AUDIT_CHECKPOINT_SECONDS``, so an event older
    than two intervals with no checkpoint at or after it means the newest checkpoint was deleted
    (with or without the events it covered) or the writer stopped. Both clocks are checked — the
    newest checkpoint's time and the first uncovered event's — so a quiet chain (nothing after the
    newest checkpoint) and a restart after downtime (the events after it are new) do not fire."""
    if head_seq is None or not audit_checkpoints.enabled():
        return None
    interval = settings.STRATA_AUDIT_CHECKPOINT_SECONDS
    cutoff = timezone.now() - dt.timedelta(seconds=2 * interval)
    covered = newest.seq if newest else 0
    if head_seq <= covered:
        return None
    first = (
        AuditEvent.objects.filter(seq__gt=covered)
        .order_by("seq")
        .values_list("created_at", flat=True)
        .first()
    )
    if first is None or first >= cutoff:
        return None
    since = f"{first.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    if newest is None:
        return (
            f"{head_seq} events but no signed checkpoint, the first event from {since}, more "
            f"than two checkpoint intervals ({2 * interval:g} s) ago: the checkpoints were "
            "deleted, or the checkpoint writer (beat) is not running"
        )
    written = newest.at_time
    if written is not None and written >= cutoff:
        return None
    label = f"#{newest.n}" if newest.n else "(unnumbered)"
    return (
        f"the newest checkpoint {label} (head #{newest.seq}, written {newest.at}) is older than "
        f"two checkpoint intervals ({2 * interval:g} s) while events #{newest.seq + 1}..#{head_seq}"
        f" follow it (the first from {since}): a newer checkpoint is missing (deleted?), or the "
        "checkpoint writer (beat) is not running"
    )
