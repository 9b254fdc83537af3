"""``submit._tree_rss``: the driver's memory leaves out the executors' subtrees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from spark_tasks.submit import _EXECUTOR_MARKS, _tree_rss

MIB = 2**20

# A stand-in for spark-submit's tree: the parent (the "driver", whose own command line must not
# carry the mark, hence the split string) starts a child whose command line carries an
# executor's mark (a Python worker daemon, an executor JVM), and that child forks a grandchild;
# both hold 64 MiB.
_TREE = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", WORKER_CODE, MARK_HEAD + MARK_TAIL])
time.sleep(60)
"""
_WORKER = """
import os, time
held = bytearray(64 * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1
if os.fork() == 0:
    mine = bytearray(64 * 2**20)
    for i in range(0, len(mine), 4096):
        mine[i] = 1
time.sleep(60)
"""


@pytest.mark.parametrize("mark", [m.decode() for m in _EXECUTOR_MARKS])
def test_driver_rss_leaves_out_the_executor_subtrees(mark):
    head, tail = mark[:3], mark[3:]
    script = (
        _TREE.replace("WORKER_CODE", repr(_WORKER))
        .replace("MARK_HEAD", repr(head))
        .replace("MARK_TAIL", repr(tail))
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        rss = _tree_rss(proc.pid)
        while rss.total - rss.driver < 120 * MIB and time.monotonic() < deadline:
            time.sleep(0.2)
            rss = _tree_rss(proc.pid)
        # the two worker processes hold >= 128 MiB between them, all outside the driver's share
        assert rss.total - rss.driver >= 120 * MIB
        # the driver's share is the parent interpreter alone
        assert 0 < rss.driver < 60 * MIB
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole tree: its own session
        proc.wait()
