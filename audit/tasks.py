"""Audit Celery tasks (beat): counted repeats of identical denials, signed head checkpoints
(numbered, to the object store and the local directory), the Verify button's walk."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from celery import shared_task
from django.db import connection, transaction
from django.utils import timezone

from audit import checkpoint_store, checkpoints
from audit.denials import flush_repeated_denials
from audit.keys import AuditKey, signing_key
from audit.models import ChainVerification
from audit.trail import verify_chain

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = [
    "checkpoint_head",
    "flush_denials",
    "request_verification",
    "verify_now",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

#: Session advisory lock held while a checkpoint is written ("AUDITCP" in ASCII).
CHECKPOINT_LOCK_KEY = 0x41554449_544350
#: A verification queued or running longer than this is taken as lost (its worker died).
STALE_AFTER = dt.timedelta(minutes=30)


@shared_task(name="audit.flush_denials", ignore_result=True)
def flush_denials() -> int:
    """One audit event per kind of denial counted in a closed window (see :mod:`audit.denials`)."""
    return flush_repeated_denials()


def checkpoint_head() -> tuple[str, int | None]:
    """Sign the chain's head as the next numbered checkpoint when it moved and verifies.

    Reads both series (:func:`audit.checkpoints.load_series`, only the newest external
    checkpoint's contents) and verifies only the events after the newest checkpoint (those
    before it were verified when it was written). Checkpoint ``n + 1`` (head seq, hash, event
    count) goes to the external series first, then to the local directory. Returns
    ``(outcome, seq)``: ``written``, ``unchanged``, ``off`` (no key, or neither series
    configured), ``empty``, ``broken`` (the chain or the series have a problem: nothing is
    signed over it; logged at ERROR, ``verify_audit`` reports it) or ``failed`` (the object store
    refused the write or did not answer: nothing written locally either; the next run retries)
    or ``busy`` (another writer holds the lock: two writers would both sign checkpoint ``n + 1``)."""
    key = signing_key()
    if key is None or not checkpoints.enabled():
        return "off", None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [CHECKPOINT_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return "busy", None
        try:
            return _write_next_checkpoint(key)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [CHECKPOINT_LOCK_KEY])


def _write_next_checkpoint(key: AuditKey) -> tuple[str, int | None]:
    from botocore.exceptions import BotoCoreError, ClientError

    series = checkpoints.load_series(read_external=1)
    newest = series.newest()
    after = (newest.seq, newest.hash) if newest else None
    result = verify_chain(after=after, series=series)
    if not result.ok:
        log.error("audit checkpoint not written: %s %s", result.first_broken, result.problems)
        return "broken", None
    if result.head_seq is None:
        return "empty", None
    if newest and result.head_seq == newest.seq:
        return "unchanged", result.head_seq
    doc = checkpoints.make(
        series.next_number(), result.head_seq, result.head_hash or "", result.head_seq, key
    )
    if checkpoints.external_enabled():
        try:
            checkpoint_store.put(doc)
        except (BotoCoreError, ClientError, ValueError) as exc:
            log.error("audit checkpoint #%s not written to the object store: %s", doc["n"], exc)
            return "failed", None
    if checkpoints.checkpoint_dir() is not None:
        checkpoints.write_local(doc)
    return "written", result.head_seq


@shared_task(name="audit.write_checkpoint", ignore_result=True)
def write_checkpoint() -> str:
    outcome, seq = checkpoint_head()
    return f"{outcome} {seq or ''}".strip()


def request_verification(user: User | None) -> tuple[ChainVerification, bool]:
    """The verification a request asked for: the one already queued or running if any (one at a
    time), else a new row, sent to a worker when it commits. Returns ``(row, created)``."""
    with transaction.atomic():
        open_one = (
            ChainVerification.objects.select_for_update()
            .filter(state__in=[ChainVerification.State.QUEUED, ChainVerification.State.RUNNING])
            .first()
        )
        if open_one is not None and open_one.requested_at > timezone.now() - STALE_AFTER:
            return open_one, False
        if open_one is not None:  # its worker died with it: say so, start another
            open_one.state, open_one.finished_at = ChainVerification.State.FAILED, timezone.now()
            open_one.error = f"no result after {STALE_AFTER}: the worker running it was lost"
            open_one.save(update_fields=["state", "finished_at", "error"])
        row = ChainVerification.objects.create(requested_by=user)
        transaction.on_commit(lambda: verify_now.delay(row.pk))
    return row, True


@shared_task(name="audit.verify_now", ignore_result=True)
def verify_now(verification_id: int) -> str:
    """Walk the whole chain for a :class:`ChainVerification` row and store what it found."""
    claimed = ChainVerification.objects.filter(
        pk=verification_id, state=ChainVerification.State.QUEUED
    ).update(state=ChainVerification.State.RUNNING)
    if not claimed:
        return "taken"
    try:
        result = verify_chain()
    except Exception as exc:  # a database error: the row says so rather than staying "running"
        log.exception("chain verification %s failed", verification_id)
        ChainVerification.objects.filter(pk=verification_id).update(
            state=ChainVerification.State.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
        )
        return "failed"
    ChainVerification.objects.filter(pk=verification_id).update(
        state=ChainVerification.State.DONE,
        ok=result.ok,
        result=result.as_dict(),
        finished_at=timezone.now(),
    )
    return "ok" if result.ok else "broken"
