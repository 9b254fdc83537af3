"""Fault injection for crash tests and ``make chaos``, at the engine's step boundaries.

``STRATA_FAULT_KILL_AT`` = ``kind:step:when[,...]`` (``when`` is ``before``, ``mid`` or
``after``; ``*`` matches any kind or step) SIGKILLs the process once per workflow, step and
boundary (marker files in ``STRATA_FAULT_DIR``).

``STRATA_FAULT_PAUSE_AT`` (same syntax): at the first matching boundary of each workflow the
process writes ``wf<pk>-paused`` and waits until ``wf<pk>-resume`` exists (at most
``PAUSE_LIMIT_SECONDS``), so a harness can bring a fault (a server or an agent down) in exactly
there, mid-run, whatever the kind.

Connected to :data:`workflows.engine.step_boundary` by the test app only.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

from django.conf import settings
from django.dispatch import receiver

from workflows.engine import step_boundary

log = logging.getLogger(__name__)

PAUSE_LIMIT_SECONDS = 120.0


def _matches(spec: str, workflow: Any, step: Any, when: str) -> bool:
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            continue
        kind, name, boundary = parts
        if kind in ("*", workflow.kind) and name in ("*", step.name) and boundary == when:
            return True
    return False


def _first(marker: str) -> bool:
    """True for the one caller that creates ``marker`` (O_EXCL): once per workflow and point."""
    folder = settings.STRATA_FAULT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


@receiver(step_boundary, dispatch_uid="strata_test_fault_kill")
def kill_at_boundary(sender: Any, workflow: Any, step: Any, when: str, **kwargs: Any) -> None:
    spec = settings.STRATA_FAULT_KILL_AT
    marker = f"wf{workflow.pk}-step{step.position}-{when}"
    if spec and _matches(spec, workflow, step, when) and _first(marker):
        log.warning("fault injection: SIGKILL at %s %s %s", workflow, step.name, when)
        os.kill(os.getpid(), signal.SIGKILL)


@receiver(step_boundary, dispatch_uid="strata_test_fault_pause")
def pause_at_boundary(sender: Any, workflow: Any, step: Any, when: str, **kwargs: Any) -> None:
    spec = settings.STRATA_FAULT_PAUSE_AT
    if not (spec and _matches(spec, workflow, step, when)):
        return
    if not _first(f"wf{workflow.pk}-paused"):
        return
    log.warning("fault injection: paused at %s %s %s", workflow, step.name, when)
    resume = settings.STRATA_FAULT_DIR / f"wf{workflow.pk}-resume"
    deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
    while not resume.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
