"""Run a Spark job's process tree so that it cannot outlive the worker that started it.

    python guard.py PARENT_PID -- spark-submit ...

The guard leads a process group holding ``spark-submit``, its JVM and the Python workers, and
asks for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``): issue #16 found a SIGKILLed worker
left ``spark-submit`` running and deleting unsupervised for hours. On SIGTERM / SIGINT / SIGHUP,
or when the job ends, it SIGTERMs the group, waits :data:`GRACE_SECONDS`, then SIGKILLs it.
Standard library only: it runs before (and outside) Django and PySpark.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 10.0
POLL_SECONDS = 0.5
#: The exit code of a job taken down by a signal (128 + SIGTERM, as a shell reports it).
STOPPED_EXIT_CODE = 128 + signal.SIGTERM


def die_with_parent(parent: int) -> bool:
    """Ask for SIGTERM when ``parent`` (the thread that started this process) dies. False when
    it is gone already (it died before the request: ``getppid()`` is no longer ``parent``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return os.getppid() == parent


def _signal_rest_of_group(sig: int) -> None:
    """``sig`` to every other process of this group (the guard ignores it meanwhile)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(os.getpgrp(), sig)
    except ProcessLookupError:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _group_has_others() -> bool:
    me, group = os.getpid(), os.getpgrp()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getpgid(int(entry)) == group:
                    return True
            except (ProcessLookupError, PermissionError):
                continue
    return False


def _stop_group(since: float) -> None:
    """SIGTERM the rest of the group; SIGKILL it (and the guard) if it outlives the grace."""
    _signal_rest_of_group(signal.SIGTERM)
    while _group_has_others():
        if time.monotonic() - since > GRACE_SECONDS:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        time.sleep(0.1)


def run(parent: int, cmd: list[str]) -> int:
    """Run ``cmd`` under the guard; returns its exit code (:data:`STOPPED_EXIT_CODE` when the
    guard was told to stop)."""
    stop_requested: list[float] = []

    def on_signal(signum: int, frame: object) -> None:
        if not stop_requested:
            stop_requested.append(time.monotonic())

    if os.getpgrp() != os.getpid():  # never signal a group the guard does not lead
        os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if not die_with_parent(parent) or stop_requested:
        return STOPPED_EXIT_CODE
    child = subprocess.Popen(cmd)  # same group, same stdio, same environment
    sent = False
    while True:
        if stop_requested and not sent:
            _signal_rest_of_group(signal.SIGTERM)
            sent = True
        if stop_requested and time.monotonic() - stop_requested[0] > GRACE_SECONDS:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        try:
            code = child.wait(timeout=POLL_SECONDS)
            break
        except subprocess.TimeoutExpired:
            continue
    _stop_group(stop_requested[0] if stop_requested else time.monotonic())
    return STOPPED_EXIT_CODE if stop_requested else code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: guard.py PARENT_PID -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    return run(int(argv[0]), argv[2:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
