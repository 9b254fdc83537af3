"""The KIP-112 dir probe: concurrent probes of one healthy dir never fail each other.

The periodic prober, an admin's re-probe and a recovery workflow's probe can run at once on
one dir. With one fixed probe file name, one probe truncated the file another was about to
read back and the dir was marked OFFLINE though the disk was fine.
"""

from __future__ import annotations

import os
import threading

from broker_agent.simulator.storage import PROBE_FILE, LogDir


def test_concurrent_probes_of_a_healthy_dir_all_succeed_and_leave_no_file(tmp_path):
    failures: list[str] = []
    d = LogDir("logdir-0", str(tmp_path), lambda _d, error: failures.append(error))
    d.probe_delay_ms = 2.0  # hold each probe's file open so the probes overlap
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def probe_many() -> None:
        start.wait()
        for _ in range(25):
            try:
                d.probe()
            except OSError as exc:  # the defect: another probe's bytes read back
                errors.append(exc)

    threads = [threading.Thread(target=probe_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert failures == []
    assert [n for n in os.listdir(tmp_path) if n.startswith(PROBE_FILE)] == []


def test_a_probe_that_fails_removes_its_file_and_raises(tmp_path, monkeypatch):
    d = LogDir("logdir-0", str(tmp_path), lambda _d, _e: None)
    real_open = open

    def short_read(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        if str(path).startswith(os.path.join(str(tmp_path), PROBE_FILE)) and "r" in mode:
            fh.read()  # the read-back sees nothing: like a disk that lost the write
        return fh

    monkeypatch.setattr("builtins.open", short_read)
    try:
        d.probe()
    except OSError as exc:
        assert "different bytes" in str(exc)
    else:
        raise AssertionError("a probe that reads back other bytes must raise")
    assert [n for n in os.listdir(tmp_path) if n.startswith(PROBE_FILE)] == []
