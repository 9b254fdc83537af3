"""The executors' delete loop and how a plan is cut into tasks (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks import jobkit, store
from spark_tasks.jobkit import DeleteOutcome
from spark_tasks.schema import PLAN_SCHEMA


def test_an_object_already_gone_counts_as_deleted_and_unsafe_paths_are_refused(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    present = remote / "a.log"
    present.write_bytes(b"x")
    directory = remote / "seg"
    directory.mkdir()
    (directory / "index").write_bytes(b"y")
    outside = tmp_path / "outside.log"
    outside.write_bytes(b"z")
    paths = [
        str(present),
        str(remote / "never.log"),
        f"file://{directory}",
        "relative/b.log",
        f"{remote}/../outside.log",
        None,
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(str(remote)))
    assert outcomes == [
        DeleteOutcome.DELETED,
        DeleteOutcome.ALREADY_GONE,
        DeleteOutcome.DELETED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.REFUSED,
    ]
    assert not present.exists() and not directory.exists() and outside.exists()
    assert errors[:3] == [None, None, None] and all(errors[3:])


def test_a_one_file_plan_is_split_between_the_cores_from_metadata(tmp_path, monkeypatch):
    monkeypatch.setattr(jobkit, "MIN_DELETE_CHUNK", 10)
    rows = [
        {"segment_id": str(i), "reason": "purge_disabled", "object_path": f"/r/{i}"}
        for i in range(45)
    ]
    (tmp_path / "plan").mkdir()
    pq.write_table(
        pa.Table.from_pylist(rows, schema=PLAN_SCHEMA), tmp_path / "plan" / "part-0.parquet"
    )
    (tmp_path / "plan" / "_temporary").mkdir()
    pq.write_table(
        pa.Table.from_pylist(rows, schema=PLAN_SCHEMA),
        tmp_path / "plan" / "_temporary" / "part-9.parquet",
    )
    units = jobkit.plan_units(tmp_path / "plan", parallelism=2)
    assert [(first, end) for _, _, first, end in units] == [(0, 23), (23, 45)]


def test_the_unlinkat_loop_handles_directories_and_bounds_its_descriptors(tmp_path, monkeypatch):
    """Objects are unlinked relative to a cached directory descriptor: a directory object (with
    or without a trailing slash) still goes through the careful path, a missing directory means
    already gone, a file where a directory should be fails, and the cache stays bounded."""
    import os

    monkeypatch.setattr(jobkit, "MAX_OPEN_DIRS", 3)
    files = []
    for d in range(7):
        (tmp_path / f"d{d}").mkdir()
        for f in range(3):
            path = tmp_path / f"d{d}" / f"{f}.log"
            path.write_bytes(b"x")
            files.append(str(path))
    seg = tmp_path / "seg"
    seg.mkdir()
    (seg / "index").write_bytes(b"y")
    seg2 = tmp_path / "seg2"
    seg2.mkdir()
    plain = tmp_path / "plain.log"
    plain.write_bytes(b"z")
    fds_before = len(os.listdir("/proc/self/fd"))
    paths = [
        *files,
        f"{seg}/",
        str(seg2),
        str(tmp_path / "gone-dir" / "x.log"),
        f"{plain}/x.log",
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(str(tmp_path)))
    assert outcomes[: len(files)] == [DeleteOutcome.DELETED] * len(files)
    assert outcomes[len(files) :] == [
        DeleteOutcome.DELETED,
        DeleteOutcome.DELETED,
        DeleteOutcome.ALREADY_GONE,
        DeleteOutcome.FAILED,
    ]
    assert errors[-1] and not any(errors[:-1])
    assert not seg.exists() and not seg2.exists() and plain.exists()
    assert not any(os.path.exists(p) for p in files)
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_hidden_directories_and_dot_parts_are_resolved_not_refused(tmp_path):
    """``.run/`` is a name like any other; a ``..`` that stays inside the store deletes the
    object it resolves to, one that leaves the store is refused."""
    remote = tmp_path / ".run" / "remote"
    hidden = remote / "t-0"
    hidden.mkdir(parents=True)
    objects = [hidden / f"{i:05d}.log" for i in range(3)]
    for obj in objects:
        obj.write_bytes(b"x")
    kept = tmp_path / ".run" / "kept.log"
    kept.write_bytes(b"k")
    inside = f"{remote}/../remote/t-0/00000.log"
    escaping = f"{remote}/t-0/../../kept.log"
    outcomes, _ = jobkit.unlink_paths(
        [inside, *(str(o) for o in objects[1:]), escaping], store.store_root(str(remote))
    )
    assert outcomes == [DeleteOutcome.DELETED] * 3 + [DeleteOutcome.REFUSED]
    assert not any(o.exists() for o in objects) and kept.exists()
