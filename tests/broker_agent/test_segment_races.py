"""A healthy log dir is never taken offline by threads racing over one partition's files.

The maintenance thread lists closed segments, then deletes (retention) or uploads (the copier)
them outside the log's lock; a follower's fetcher truncates, and the metadata thread deletes a
replica that is no longer assigned. CI saw a KIP-253 shrink fail with KAFKA_STORAGE_ERROR on
an idle disk: a file another thread had removed first raised FileNotFoundError inside
:meth:`LogDir.io`, which reads any OSError as a failed disk (KIP-112) and takes the dir - on a
one-dir broker the whole broker - offline.
"""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import LogDirState
from broker_agent.simulator.storage import LogDir, PartitionLog, StorageError, encode_batch


def _log(tmp_path, failures: list) -> PartitionLog:
    d = LogDir("logdir-0", str(tmp_path), on_failure=lambda _d, error: failures.append(error))
    plog = PartitionLog(d, "fade", 3, "topic-id", segment_bytes=1 << 20)
    plog.create()
    for n in range(3):  # three segments: two closed, one active
        plog.append(encode_batch([(None, b"v%d" % n, 1000 + n)]), assign_offsets=True)
        plog.maybe_roll()
    plog.append(encode_batch([(None, b"tail", 2000)]), assign_offsets=True)
    assert len(plog.closed_segments()) == 3
    return plog


def test_a_segment_truncated_away_after_it_was_listed_is_not_deleted_twice(tmp_path):
    failures: list[str] = []
    plog = _log(tmp_path, failures)
    listed = plog.closed_segments()  # the maintenance thread's view
    plog.truncate_fully_and_start_at(10)  # the fetcher, meanwhile
    for seg in listed:
        plog.delete_segment(seg)  # retention goes on from its list
    assert failures == [] and plog.log_dir.state == LogDirState.ONLINE
    assert plog.segments == [] and plog.log_start_offset == 10


def test_the_copier_skips_a_segment_deleted_after_it_was_listed(tmp_path):
    failures: list[str] = []
    plog = _log(tmp_path, failures)
    first, second = plog.closed_segments()[:2]
    plog.delete_segment(first)
    assert plog.read_segment_bytes(first) is None
    assert plog.read_segment_bytes(second) is not None  # the others still upload
    assert failures == [] and plog.log_dir.state == LogDirState.ONLINE


def test_a_deleted_replica_log_fails_alone_not_its_dir(tmp_path):
    failures: list[str] = []
    plog = _log(tmp_path, failures)
    seg = plog.closed_segments()[0]
    plog.delete()  # no longer assigned: the metadata thread removes it
    with pytest.raises(StorageError, match="was deleted"):
        plog.append(encode_batch([(None, b"late", 3000)]), assign_offsets=True)
    with pytest.raises(StorageError, match="was deleted"):
        plog.checkpoint_high_watermark()
    with pytest.raises(StorageError, match="was deleted"):
        plog.read_segment_bytes(seg)  # the copier listed it before the delete
    assert failures == [] and plog.log_dir.state == LogDirState.ONLINE


def test_a_real_io_error_still_takes_the_dir_offline(tmp_path):
    """The guard is about files this process removed itself; a disk error is still one."""
    failures: list[str] = []
    plog = _log(tmp_path, failures)
    seg = plog.closed_segments()[0]
    (tmp_path / "fade-3" / seg.path.rsplit("/", 1)[-1]).unlink()  # gone behind our back
    with pytest.raises(StorageError):
        plog.delete_segment(seg)
    assert plog.log_dir.state == LogDirState.OFFLINE and len(failures) == 1
