"""Fault injection for crash tests: SIGKILL the worker at a step boundary.

``STRATA_FAULT_KILL_AT`` = ``kind:step:before|after[,...]`` (``*`` matches any kind or step)
kills the process once per workflow, step and boundary (marker files in ``STRATA_FAULT_DIR``).
Connected to :data:`workflows.engine.step_boundary` by the test app only.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from django.conf import settings
from django.dispatch import receiver

from workflows.engine import step_boundary

log = logging.getLogger(__name__)


@receiver(step_boundary, dispatch_uid="strata_test_fault_kill")
def kill_at_boundary(sender: Any, workflow: Any, step: Any, when: str, **kwargs: Any) -> None:
    spec = settings.STRATA_FAULT_KILL_AT
    if not spec:
        return
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            continue
        kind, name, boundary = parts
        if kind in ("*", workflow.kind) and name in ("*", step.name) and boundary == when:
            folder = settings.STRATA_FAULT_DIR
            folder.mkdir(parents=True, exist_ok=True)
            marker = folder / f"wf{workflow.pk}-step{step.position}-{when}"
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            log.warning("fault injection: SIGKILL at %s %s %s", workflow, step.name, when)
            os.kill(os.getpid(), signal.SIGKILL)
