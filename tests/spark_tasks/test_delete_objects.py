"""The executors' delete loop on the S3 store (the session's SeaweedFS) and how a plan is cut
into tasks (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks import jobkit, store
from spark_tasks.jobkit import DeleteOutcome
from spark_tasks.schema import PLAN_SCHEMA
from tests import s3util
from tests.spark_tasks.tiny_store import store_prefix


def test_an_object_already_gone_counts_as_deleted_and_unsafe_paths_are_refused(tmp_path):
    root = store_prefix(tmp_path.name).uri
    present = f"{root}/t-0/0/a.log"
    s3util.put(present, b"x")
    outside = f"{root}-outside/t-0/0/b.log"
    s3util.put(outside, b"z")
    paths = [
        present,
        f"{root}/t-0/0/never-written.log",  # already gone: S3 answers it deleted
        present,  # twice in one batch: one call, both rows deleted
        "relative/b.log",
        f"{root}/../{root.rsplit('/', 1)[-1]}-outside/t-0/0/b.log",
        outside,
        f"file:///{root.removeprefix('s3://')}/t-0/0/c.log",
        None,
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(root))
    assert outcomes == [DeleteOutcome.DELETED] * 3 + [DeleteOutcome.REFUSED] * 5
    assert errors[:3] == [None, None, None]
    assert all("outside the remote store" in e for e in errors[3:])
    assert not s3util.exists(present) and s3util.exists(outside)


def test_a_one_file_plan_is_split_between_the_cores_from_metadata(tmp_path, monkeypatch):
    monkeypatch.setattr(jobkit, "MIN_DELETE_CHUNK", 10)
    rows = [
        {"segment_id": str(i), "reason": "purge_disabled", "object_path": f"s3://b-1/r/{i}"}
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


def test_hidden_prefixes_are_names_and_dot_segments_are_refused(tmp_path):
    """``.run/`` is a name like any other; a ``..`` is refused even where a filesystem would
    resolve it back inside the store (S3 keys are literal: ``a/../b`` is not ``b``), so the
    object it seems to name is left alone."""
    root = f"{store_prefix(tmp_path.name).uri}/.run/remote"
    objects = [f"{root}/t-0/0/{i:05d}.log" for i in range(3)]
    for obj in objects:
        s3util.put(obj, b"x")
    kept = f"{root}/t-0/0/kept.log"
    s3util.put(kept, b"k")
    outcomes, _ = jobkit.unlink_paths(
        [*objects, f"{root}/../remote/t-0/0/kept.log", f"{root}/t-0/0/./kept.log"],
        store.store_root(root),
    )
    assert outcomes == [DeleteOutcome.DELETED] * 3 + [DeleteOutcome.REFUSED] * 2
    assert not any(s3util.exists(o) for o in objects) and s3util.exists(kept)
