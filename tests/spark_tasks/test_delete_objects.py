"""The executors' delete loop and how a plan is cut into tasks (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks import jobkit
from spark_tasks.jobkit import DeleteOutcome
from spark_tasks.schema import PLAN_SCHEMA


def test_an_object_already_gone_counts_as_deleted_and_unsafe_paths_are_refused(tmp_path):
    present = tmp_path / "a.log"
    present.write_bytes(b"x")
    directory = tmp_path / "seg"
    directory.mkdir()
    (directory / "index").write_bytes(b"y")
    paths = [
        str(present),
        str(tmp_path / "never.log"),
        f"file://{directory}",
        "relative/b.log",
        f"{tmp_path}/../{tmp_path.name}/x.log",
        None,
    ]
    outcomes, errors = jobkit.unlink_paths(paths)
    assert outcomes == [
        DeleteOutcome.DELETED,
        DeleteOutcome.ALREADY_GONE,
        DeleteOutcome.DELETED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.REFUSED,
    ]
    assert not present.exists() and not directory.exists()
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
