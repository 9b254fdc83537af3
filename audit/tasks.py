"""Audit Celery tasks: writing the counted repeats of identical denials (beat)."""

from __future__ import annotations

from celery import shared_task

from audit.denials import flush_repeated_denials

__all__ = ["flush_denials"]


@shared_task(name="audit.flush_denials", ignore_result=True)
def flush_denials() -> int:
    """One audit event per kind of denial counted in a closed window (see :mod:`audit.denials`)."""
    return flush_repeated_denials()
