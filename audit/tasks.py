"""Audit Celery tasks (beat): counted repeats of identical denials, signed head checkpoints."""

from __future__ import annotations

import logging

from celery import shared_task

from audit import checkpoints
from audit.denials import flush_repeated_denials
from audit.keys import signing_key
from audit.trail import verify_chain

__all__ = ["checkpoint_head", "flush_denials", "write_checkpoint"]

log = logging.getLogger(__name__)


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
