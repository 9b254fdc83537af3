"""Audit Celery tasks (beat): counted repeats of identical denials, signed head checkpoints."""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from audit import checkpoints
from audit.denials import flush_repeated_denials
from audit.keys import signing_key
from audit.models import ChainVerification
from audit.trail import verify_chain

__all__ = [
    "checkpoint_head",
    "flush_denials",
    "request_verification",
    "verify_now",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

#: A verification queued or running longer than this is taken as lost (its worker died).
STALE_AFTER = dt.timedelta(minutes=30)


@shared_task(name="audit.flush_denials", ignore_result=True)
def flush_denials() -> int:
    """One audit event per kind of denial counted in a closed window (see :mod:`audit.denials`)."""
    return flush_repeated_denials()


def checkpoint_head() -> tuple[str, int | None]:
    """Sign the chain's head into the checkpoint directory when it moved and verifies.

    Verifies only the events after the latest valid checkpoint (the events before it were
    verified when it was written). Returns ``(outcome, seq)``: ``written``, ``unchanged``,
    ``off`` (no directory or no key), ``empty`` or ``broken`` (nothing written; the reason is
    logged at ERROR and ``verify_audit`` reports it)."""
    key = signing_key()
    if checkpoints.checkpoint_dir() is None or key is None:
        return "off", None
    marks, problems = checkpoints.load_valid()
    after = (max(marks), marks[max(marks)]) if marks else None
    result = verify_chain(after=after)
    if not result.ok or problems:
        log.error("audit checkpoint not written: %s %s", result.first_broken, problems)
        return "broken", None
    if result.head_seq is None:
        return "empty", None
    if after and result.head_seq == after[0]:
        return "unchanged", result.head_seq
    checkpoints.write(result.head_seq, result.head_hash or "", key)
    return "written", result.head_seq


@shared_task(name="audit.write_checkpoint", ignore_result=True)
def write_checkpoint() -> str:
    outcome, seq = checkpoint_head()
    return f"{outcome} {seq or ''}".strip()


def request_verification(user: object | None) -> tuple[ChainVerification, bool]:
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
