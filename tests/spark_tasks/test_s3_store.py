"""Issue #13: the Spark delete path on an S3 store (the suite's SeaweedFS): DeleteObjects
batches, an object already gone counted as deleted, per-key errors reported, never a delete
outside the configured bucket and prefix."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker_agent.contract.objectstore import S3Location
from spark_tasks import jobkit, s3_delete, store
from spark_tasks.jobkit import DeleteOutcome
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.schema import PLAN_SCHEMA
from spark_tasks.tasks import execute_run

CLUSTER = "s3lab"


@pytest.fixture
def lab(object_store):
    """A store prefix of the test's own, a sibling prefix sharing its characters, and a helper
    to put objects."""
    base = object_store.location.child(f"lab-{secrets.token_hex(3)}")
    client = object_store.client(max_pool_connections=16)

    def put(loc: S3Location, names: list[str]) -> list[str]:
        def one(name: str) -> str:
            client.put_object(Bucket=loc.bucket, Key=loc.key(name), Body=b"segment")
            return loc.object_uri(loc.key(name))

        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(one, names))

    def exists(uri: str) -> bool:
        key = uri.split("/", 3)[3]
        return client.list_objects_v2(Bucket=base.bucket, Prefix=key).get("KeyCount", 0) > 0

    return base, S3Location(base.bucket, base.prefix + "2"), put, exists


def test_the_root_and_entry_rules_for_an_s3_store():
    assert store.store_root("s3://strata-remote/tiered/") == "s3://strata-remote/tiered"
    root = store.store_root("s3://strata-remote/tiered")
    assert store.inside_store("s3://strata-remote/tiered/t-1/0/a.log", root)
    for outside in ("s3://strata-remote/tiered", "s3://strata-remote/tiered2/a.log",
                    "s3://other/tiered/a.log", "s3://strata-remote/tiered/../x.log",
                    "/tmp/tiered/a.log", None):  # fmt: skip
        assert not store.inside_store(outside, root), outside
    with pytest.raises(ValueError):
        store.store_root("s3://Bad_Bucket/x")


def test_deletes_only_inside_keys_and_counts_a_missing_one_as_deleted(lab):
    base, sibling, put, exists = lab
    inside = put(base, [f"t-1/0/{i:020d}-a.log" for i in range(5)])
    neighbour = put(sibling, ["t-1/0/keep.log"])[0]
    paths = [
        *inside,
        base.object_uri(base.key("t-1/0/never-written.log")),
        neighbour,
        f"s3://{base.bucket}/{base.prefix}/../{sibling.prefix}/t-1/0/keep.log",
        "/tmp/x.log",
        None,
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(base.uri))
    assert outcomes == [DeleteOutcome.DELETED] * 6 + [DeleteOutcome.REFUSED] * 4
    assert errors[:6] == [None] * 6 and all(errors[6:])
    assert not any(exists(p) for p in inside)
    assert exists(neighbour)  # a sibling prefix is outside, whatever its name shares


class _FlakyClient:
    """DeleteObjects that answers SlowDown for some keys at first, AccessDenied for one."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.slow = 2

    def delete_objects(self, Bucket: str, Delete: dict) -> dict:
        keys = [o["Key"] for o in Delete["Objects"]]
        assert len(keys) <= s3_delete.KEYS_PER_CALL
        self.calls.append(len(keys))
        errors = [{"Key": k, "Code": "AccessDenied", "Message": "no"} for k in keys if "deny" in k]
        if self.slow:
            self.slow -= 1
            errors += [
                {"Key": k, "Code": "SlowDown", "Message": "slow"} for k in keys if "slow" in k
            ]
        errors += [{"Key": k, "Code": "NoSuchKey", "Message": "gone"} for k in keys if "gone" in k]
        return {"Errors": errors}


def test_batches_of_1000_retry_slowdown_keys_and_report_the_others():
    root = "s3://strata-remote/p"
    names = [f"s3://strata-remote/p/k{i}" for i in range(2_400)]
    names[5] += "-slow"
    names[1500] += "-deny"
    names[7] += "-gone"
    client = _FlakyClient()
    outcomes, errors = s3_delete.delete_paths(names, root, client=client, calls_in_flight=1)
    assert client.calls == [1000, 1, 1, 1000, 400]  # the SlowDown key re-sent twice
    assert outcomes[5] == DeleteOutcome.DELETED
    assert outcomes[1500] == DeleteOutcome.FAILED and errors[1500] == "AccessDenied: no"
    assert outcomes[7] == DeleteOutcome.ALREADY_GONE
    assert outcomes.count(DeleteOutcome.DELETED) == 2_398


class S3Backend:
    root = ""

    def __init__(self, cluster):
        self.cluster = cluster

    def remote_root(self):
        return S3Backend.root

    def export_inputs(self, dest):  # pragma: no cover - the delete job takes a plan
        raise AssertionError("not used")

    def publish_log_start_offsets(self, items):  # pragma: no cover
        raise AssertionError("not used")

    def mark_segments(self, state, segments):  # pragma: no cover
        raise AssertionError("not used")


def _plan(path: Path, object_paths: list[str]) -> Path:
    path.mkdir(parents=True)
    rows = [
        {"segment_id": f"seg-{i}", "cluster": CLUSTER, "topic": "t", "partition": 0,
         "reason": "purge_disabled", "size_bytes": 7, "object_path": p}
        for i, p in enumerate(object_paths)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA), path / "part-00000.parquet")
    return path


def _execute(plan: Path) -> SparkJobRun:
    run = SparkJobRun.objects.create(
        job=SparkJob.DELETE_OBJECTS, arguments={"plan": str(plan)}, dry_run=False, cluster=CLUSTER
    )
    execute_run.apply(args=[run.pk]).get()
    run.refresh_from_db()
    return run


@pytest.mark.integration
def test_the_delete_job_empties_a_plan_on_s3_and_refuses_one_row_outside(
    db, settings, tmp_path, lab
):
    base, sibling, put, exists = lab
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    settings.SPARK_REMOTE_METADATA = "tests.spark_tasks.test_s3_store.S3Backend"
    S3Backend.root = base.uri
    objects = put(base, [f"t-x/{i % 3}/{i:020d}-s.log" for i in range(2_100)])
    neighbour = put(sibling, ["t-x/0/keep.log"])[0]

    refused = _execute(_plan(tmp_path / "bad" / "plan", [*objects[:10], neighbour]))
    assert refused.state == SparkRunState.FAILED, refused.log_tail
    assert "refused" in refused.error and "keep.log" in refused.error
    assert exists(objects[0]) and exists(neighbour)  # refused before any delete

    run = _execute(_plan(tmp_path / "good" / "plan", [*objects, objects[0]]))
    assert run.state == SparkRunState.SUCCEEDED, run.log_tail
    deleted = pq.read_table(Path(run.output_dir) / "deleted").to_pylist()
    assert len(deleted) == 2_101
    assert {r["outcome"] for r in deleted} == {DeleteOutcome.DELETED}, deleted[0]["error"]
    assert not any(exists(p) for p in objects[::97])
    assert exists(neighbour)
