"""Issue #11, "Deletes stay inside the remote store": the store's root comes from configuration,
an object outside it is never deleted, and a plan given to ``delete_objects`` naming one fails the
run, with the row named, before anything is deleted (a planning job quarantines the partition
instead, issue #39: ``test_quarantine.py``)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_tasks import jobkit, store
from spark_tasks.jobkit import DeleteOutcome
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.schema import PLAN_SCHEMA
from spark_tasks.tasks import execute_run
from tests import s3util
from tests.spark_tasks import tiny_store

# --- the rule ---------------------------------------------------------------------------------


def test_only_keys_strictly_below_the_prefix_in_its_bucket_are_inside():
    root = store.store_root("s3://strata-remote/lab/")
    assert root == "s3://strata-remote/lab"
    inside = [
        "s3://strata-remote/lab/t-0/0/seg.log",
        "s3://strata-remote/lab/seg.log",
        "s3://strata-remote/lab/.run/t-0/seg.log",  # a hidden name is a name like any other
    ]
    outside = [
        "s3://strata-remote/lab",  # the prefix itself
        "s3://strata-remote/lab/",
        "s3://strata-remote/lab/.",
        "s3://strata-remote/lab/t-0/..",
        "s3://strata-remote/lab/../lab-evil/seg.log",  # climbs out through ..
        "s3://strata-remote/lab/t-0/../../lab-evil/seg.log",
        "s3://strata-remote/lab/t-0/../seg.log",  # .. that would stay inside: still refused
        "s3://strata-remote/lab/t-0/./seg.log",
        "s3://strata-remote/lab//t-0/seg.log",  # an empty segment
        "s3://strata-remote/lab/t-0/seg.log/",
        "s3://strata-remote/lab-evil/seg.log",  # a sibling prefix sharing the root's characters
        "s3://strata-remote/lab2/seg.log",
        "s3://strata-remote/seg.log",
        "s3://other-bucket/lab/t-0/seg.log",  # another bucket, same key
        "s3://strata-remote-evil/lab/t-0/seg.log",
        "S3://strata-remote/lab/t-0/seg.log",
        "file:///strata-remote/lab/t-0/seg.log",
        "/strata-remote/lab/t-0/seg.log",
        "relative/seg.log",
        "",
        None,
    ]
    assert [p for p in inside if not store.inside_store(p, root)] == []
    assert [p for p in outside if store.inside_store(p, root)] == []
    assert store.store_entry(inside[0], root) == inside[0]


@pytest.mark.parametrize(
    "root",
    [
        "",
        "/",
        "/srv/remote",
        "file:///",
        "file:///srv/remote",
        "relative/remote",
        "gs://bucket/p",
        "s3://",
        "s3://Bad_Bucket/p",
        "s3://b-1/a/../p",
        "s3://b-1/a//p",
    ],
)
def test_a_root_that_is_not_an_s3_prefix_is_refused(root):
    with pytest.raises(ValueError, match=r"s3://BUCKET/PREFIX|bucket|segment"):
        store.store_root(root)


def test_a_local_directory_root_is_refused_naming_what_to_set():
    with pytest.raises(ValueError) as refused:
        store.store_root("file:///srv/kafka-remote")
    assert "s3://BUCKET/PREFIX" in str(refused.value)
    assert "STRATA_REMOTE_STORE" in str(refused.value)


def test_the_delete_loop_leaves_everything_outside_the_store_alone(tmp_path):
    t = tiny_store.build(tmp_path, escapes=True)
    itself = t.remote  # an object whose key is the prefix itself
    s3util.put(itself, b"the prefix, not under it")
    paths = [
        t.inside[0],
        f"{t.inside[0].rsplit('/', 1)[0]}/../../../{t.outside['seg-dotdot'].split('/')[-2]}"
        "/victim.log",
        t.outside["seg-sibling"],
        itself,
        t.inside[1].replace("s3://", "s3://other-", 1),
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(t.remote))
    assert outcomes == [DeleteOutcome.DELETED] + [DeleteOutcome.REFUSED] * 4
    assert errors[0] is None
    assert all("outside the remote store" in e for e in errors[1:])
    assert all(s3util.exists(p) for p in t.outside.values())
    assert s3util.exists(itself)
    assert not s3util.exists(t.inside[0]) and s3util.exists(t.inside[1])


# --- runs -------------------------------------------------------------------------------------


class StoreBackend:
    """A RemoteMetadata whose store root is configured (``root``) and that records calls."""

    root: str = ""
    store: tiny_store.TinyStore | None = None
    calls: list[str] = []

    def __init__(self, cluster):
        self.cluster = cluster

    def remote_root(self):
        if not StoreBackend.root:
            raise RuntimeError(f"cluster {self.cluster}: the remote store's root is not configured")
        return StoreBackend.root

    def export_inputs(self, dest):
        return StoreBackend.store.inventory, StoreBackend.store.partitions

    def publish_log_start_offsets(self, items):
        StoreBackend.calls.append("publish")

    def mark_segments(self, state, segments):
        StoreBackend.calls.append(state)


@pytest.fixture
def backend(settings, tmp_path):
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    settings.SPARK_REMOTE_METADATA = "tests.spark_tasks.test_store_boundary.StoreBackend"
    StoreBackend.store = tiny_store.build(tmp_path / "lab", escapes=True)
    StoreBackend.root = StoreBackend.store.remote
    StoreBackend.calls = []
    return StoreBackend


def _execute(job: str, arguments: dict, *, dry_run: bool) -> SparkJobRun:
    run = SparkJobRun.objects.create(
        job=job, arguments=arguments, dry_run=dry_run, cluster=tiny_store.CLUSTER
    )
    execute_run.apply(args=[run.pk]).get()
    run.refresh_from_db()
    return run


def _plan(path: Path, object_paths: list[str]) -> Path:
    path.mkdir(parents=True)
    rows = [
        {
            "segment_id": f"seg-{i}",
            "cluster": tiny_store.CLUSTER,
            "topic": tiny_store.TOPIC,
            "partition": 0,
            "reason": "purge_disabled",
            "size_bytes": 1,
            "object_path": p,
        }
        for i, p in enumerate(object_paths)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA), path / "part-00000.parquet")
    return path


def test_a_delete_without_a_configured_store_root_fails_before_spark(db, backend, tmp_path):
    backend.root = ""
    plan = _plan(tmp_path / "plan", backend.store.inside)
    with mock.patch("spark_tasks.tasks.spark_submit") as submit:
        run = _execute(SparkJob.DELETE_OBJECTS, {"plan": str(plan)}, dry_run=False)
    submit.assert_not_called()
    assert run.state == SparkRunState.FAILED
    assert "refusing to delete" in run.error and "not configured" in run.error
    assert all(s3util.exists(p) for p in backend.store.inside)


@pytest.mark.integration
def test_a_purge_naming_objects_outside_the_store_deletes_nothing_and_names_them(db, backend):
    """Acceptance: the inventory names two objects outside the store (through ``..`` segments and
    in a sibling prefix sharing the store's characters). Their partition, the only one, is
    quarantined while planning (issue #39): the run names both segments and deletes, publishes
    and marks nothing, outside the store or in it."""
    run = _execute(SparkJob.PURGE, {}, dry_run=False)

    assert run.state == SparkRunState.SUCCEEDED, run.log_tail
    assert run.output_summary["quarantined"]["outside_objects"] == 2
    assert run.output_summary["segments"] == 0
    named = run.output_summary["quarantined_partitions"]
    assert [(p["topic"], p["partition"], p["outside_objects"]) for p in named] == [
        (tiny_store.TOPIC, 0, 2)
    ]
    assert "elsewhere/victim.log" in named[0]["object_path"]
    assert all(s3util.exists(p) for p in backend.store.outside.values())
    assert all(s3util.exists(p) for p in backend.store.inside)  # withheld: nothing deleted
    assert backend.calls == []  # no log start offset published, no segment marked


@pytest.mark.integration
def test_delete_objects_refuses_a_plan_with_one_row_outside_the_store(db, backend, tmp_path):
    """The delete job on its own (as the reviewed-plan workflows run it): one bad row fails the
    whole run before the delete stage, with the row named; the store's objects stay too."""
    victim = backend.store.outside["seg-dotdot"]
    leaf = backend.store.remote.rsplit("/", 1)[-1]
    plan = _plan(
        tmp_path / "reviewed" / "plan",
        [*backend.store.inside, f"{backend.store.remote}/../{leaf}-elsewhere/victim.log"],
    )
    run = _execute(SparkJob.DELETE_OBJECTS, {"plan": str(plan)}, dry_run=False)

    assert run.state == SparkRunState.FAILED, run.log_tail
    assert "delete_objects refused" in run.error and "seg-3" in run.error
    assert "victim.log" in run.error
    assert s3util.exists(victim) and all(s3util.exists(p) for p in backend.store.inside)


# --- a run that deletes names the store: one rule for retention, purge and orphans -------------


@pytest.mark.parametrize(
    ("job", "argv"),
    [
        ("retention", ["--inventory", "i", "--partitions", "p"]),
        ("purge", ["--inventory", "i", "--partitions", "p"]),
        ("orphans", ["--inventory", "i", "--remote-root", "s3://b/r"]),
    ],
)
def test_a_deleting_job_without_store_root_is_a_usage_error_before_spark(job, argv, capsys):
    module = __import__(f"spark_tasks.{job}", fromlist=["main"])
    with mock.patch.object(jobkit, "session") as session, pytest.raises(SystemExit) as exit_:
        module.main([*argv, "--out", "o"])
    assert exit_.value.code == 2
    assert "--store-root is required unless --dry-run" in capsys.readouterr().err
    session.assert_not_called()


def test_the_job_functions_refuse_to_delete_without_store_root_but_plan_a_dry_run():
    from spark_tasks import orphans
    from spark_tasks.plan_job import PlanKind, run_plan_job

    with pytest.raises(ValueError, match="required unless --dry-run"):
        run_plan_job(None, PlanKind.RETENTION, "i", "p", "o", dry_run=False, store_root=None)
    with pytest.raises(ValueError, match="required unless --dry-run"):
        orphans.run(
            None, "i", "s3://b/r", "o", older_than_ms=0, now_ms=None, dry_run=False, store_root=None
        )
    jobkit.require_store_root(True, None)  # a dry run deletes nothing
    jobkit.require_store_root(False, "s3://b/r")
