"""``submit._tree_rss``: the driver's memory leaves out Spark's Python worker daemon subtree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from spark_tasks.submit import _tree_rss

MIB = 2**20

# A stand-in for spark-submit's tree: the parent (the "driver", whose own command line must not
# carry the mark, hence the split string) starts a child whose command line
# carries Spark's worker mark, and that child forks a grandchild; both children hold 64 MiB.
_TREE = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", WORKER_CODE, "pyspark." + "daemon"])
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


def test_driver_rss_leaves_out_the_worker_subtree():
    script = _TREE.replace("WORKER_CODE", repr(_WORKER))
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
