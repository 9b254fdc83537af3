"""Writing and verifying the audit log.

``record()`` is the only way an :class:`~audit.models.AuditEvent` is written. Call it inside
the ``transaction.atomic()`` block of the change it describes (fail closed: when the audit write
fails the change rolls back, and ``record()`` refuses to run outside a transaction). Call it as
the *last* statement of the transaction: it takes a transaction-scoped advisory lock that
serialises every audited transaction until commit, so the chain stays linear under concurrent
writers; taking row locks after it invites lock-order deadlocks.

Hash: ``sha256`` of the canonical JSON (sorted keys, no spaces, UTF-8) of the event's fields and
``prev_hash``. JSON values are normalised *before* they are stored and hashed (integral floats
become ints, datetimes ISO strings) so that what PostgreSQL's ``jsonb`` gives back hashes the
same. The first event's ``prev_hash`` is 64 zeros.

Limits: the chain detects an edit, deletion or insertion anywhere except the removal of the
newest events; an externally kept checkpoint (``audit.checkpoint`` events, ``verify_audit
--head``) covers that.
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

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from audit.choices import AuditContext, AuditOutcome
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
    """The hashed fields of an event, from a ``values()`` row or a dict of field values."""
    return {
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


def canonical_json(payload: dict[str, Any]) -> str:
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def compute_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


# --- append -------------------------------------------------------------------------------


def record(
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
) -> AuditEvent:
    """Append one event to the chain, in the caller's transaction.

    ``actor`` (a user or None) and ``context`` default to the current :func:`audit_scope`;
    ``actor_name`` defaults to the user's name, else to the process (``worker@host``).
    ``workflow`` (a Workflow or its id) puts the event on that workflow's timeline.
    """
    if not connection.in_atomic_block:
        raise AuditError("record() must be called inside transaction.atomic() with the change")
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
    workflow_id = getattr(workflow, "pk", workflow)

    fields: dict[str, Any] = {
        "actor_id": getattr(actor, "pk", None),
        "actor_name": str(actor_name)[:150],
        "context": context,
        "action": action,
        "target_type": target_type,
        "target_id": str(target_id)[:255],
        "workflow_id": workflow_id,
        "before": normalise(before),
        "after": normalise(after),
        "outcome": outcome,
        "extra": normalise(extra or {}),
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [AUDIT_LOCK_KEY])
    last = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    seq, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS_HASH)
    fields.update(seq=seq, prev_hash=prev_hash, created_at=timezone.now())
    fields["hash"] = compute_hash(event_payload(fields))
    return AuditEvent.objects.create(**fields)


def record_standalone(action: str, **kwargs: Any) -> AuditEvent:
    """``record()`` in a transaction of its own: for events that change nothing else (a refused
    request, a failed login). Inside an outer transaction it becomes a savepoint of it."""
    with transaction.atomic():
        return record(action, **kwargs)


# --- verify -------------------------------------------------------------------------------


@dataclasses.dataclass
class VerifyResult:
    ok: bool
    events: int
    first_broken: dict[str, Any] | None = None
    head_seq: int | None = None
    head_hash: str | None = None

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
    "prev_hash",
    "hash",
)


def verify_chain(
    chunk_size: int = 5000, progress: Callable[[int], None] | None = None
) -> VerifyResult:
    """Walk the chain in ``seq`` order over a server-side cursor; stop at the first break.

    A break is a gap or repeat in ``seq`` (a deleted or inserted row), a ``prev_hash`` that is
    not the previous event's hash (re-ordered or deleted), or a ``hash`` that does not match the
    event's fields (edited)."""
    expected_seq, prev = 1, GENESIS_HASH
    count = 0
    rows = AuditEvent.objects.order_by("seq").values(*_VERIFY_FIELDS).iterator(chunk_size)
    for row in rows:
        reason = None
        if row["seq"] != expected_seq:
            reason = f"sequence gap: expected seq {expected_seq}, found {row['seq']}"
        elif row["prev_hash"] != prev:
            reason = "prev_hash does not match the previous event's hash"
        elif compute_hash(event_payload(row)) != row["hash"]:
            reason = "hash does not match the event's contents"
        if reason:
            return VerifyResult(
                ok=False,
                events=count,
                first_broken={"seq": row["seq"], "id": row["id"], "reason": reason},
                head_seq=expected_seq - 1 or None,
                head_hash=prev if count else None,
            )
        count += 1
        expected_seq, prev = row["seq"] + 1, row["hash"]
        if progress and count % chunk_size == 0:
            progress(count)
    return VerifyResult(
        ok=True,
        events=count,
        head_seq=expected_seq - 1 or None,
        head_hash=prev if count else None,
    )
