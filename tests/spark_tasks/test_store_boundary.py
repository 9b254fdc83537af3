"""Issue #11, "Deletes stay inside the remote store": the store's root comes from configuration,
an object outside it is never deleted, and a plan naming one fails the run, with the row named,
before anything is deleted."""

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
from tests.spark_tasks import tiny_store

# --- the rule ---------------------------------------------------------------------------------


def test_only_paths_strictly_below_the_resolved_root_are_inside(tmp_path):
    remote = tmp_path / "remote"
    (remote / "t-0").mkdir(parents=True)
    (tmp_path / "remote-other").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (remote / "t-0" / "escape").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "alias").symlink_to(remote)
    root = store.store_root(f"file://{remote}/")
    inside = [
        f"{remote}/t-0/seg.log",
        f"file://{remote}/t-0/seg.log",
        f"{remote}/t-0/seg/",  # a directory object
        f"{remote}/t-0/../t-0/seg.log",
        f"{tmp_path}/alias/t-0/seg.log",  # a symlink to the store resolves into it
        f"{remote}/t-0/escape",  # a link inside the store: deleting it removes the link
    ]
    outside = [
        str(remote),  # the root itself
        f"{remote}/",
        f"{remote}/.",
        f"{remote}/t-0/..",
        f"{remote}/../remote-other/seg.log",
        f"{tmp_path}/remote-other/seg.log",  # a sibling sharing the root's prefix
        f"{remote}/t-0/escape/seg.log",  # through a directory symlink
        "/etc/passwd",
        "relative/seg.log",
        "",
        None,
    ]
    assert [p for p in inside if not store.inside_store(p, root)] == []
    assert [p for p in outside if store.inside_store(p, root)] == []


@pytest.mark.parametrize(
    "root",
    ["", "/", "file:///", "relative/remote", "s3://", "s3://Bad_Bucket/p", "s3://b-1/a/../p"],
)
def test_a_root_that_would_bound_nothing_is_refused(root):
    with pytest.raises(ValueError):
        store.store_root(root)


def test_the_delete_loop_leaves_everything_outside_the_store_alone(tmp_path):
    t = tiny_store.build(tmp_path, escapes=True)
    outside_link = t.inside[0].parent / "points-outside.log"
    outside_link.symlink_to(t.outside["seg-dotdot"])
    paths = [
        str(t.inside[0]),
        f"{t.inside[0].parent}/../../../elsewhere/victim.log",
        f"{t.inside[0].parent}/escape/linked.log",
        str(outside_link),
    ]
    outcomes, errors = jobkit.unlink_paths(paths, store.store_root(str(t.remote)))
    assert outcomes == [
        DeleteOutcome.DELETED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.REFUSED,
        DeleteOutcome.DELETED,  # the link itself, inside the store
    ]
    assert "outside the remote store" in errors[1] and "outside the remote store" in errors[2]
    assert all(p.exists() for p in t.outside.values())
    assert not t.inside[0].exists() and not outside_link.is_symlink()


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
    StoreBackend.root = StoreBackend.store.remote.as_uri()
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
    plan = _plan(tmp_path / "plan", [str(p) for p in backend.store.inside])
    with mock.patch("spark_tasks.tasks.spark_submit") as submit:
        run = _execute(SparkJob.DELETE_OBJECTS, {"plan": str(plan)}, dry_run=False)
    submit.assert_not_called()
    assert run.state == SparkRunState.FAILED
    assert "refusing to delete" in run.error and "not configured" in run.error
    assert all(p.exists() for p in backend.store.inside)


@pytest.mark.integration
def test_a_purge_naming_objects_outside_the_store_deletes_nothing_and_names_them(db, backend):
    """Acceptance: the inventory names two objects outside the store (through ``..`` and through
    a directory symlink). The run fails while planning, naming both segments; nothing was
    published, marked or deleted, outside the store or in it."""
    run = _execute(SparkJob.PURGE, {}, dry_run=False)

    assert run.state == SparkRunState.FAILED, run.log_tail
    assert "outside the remote store" in run.error
    assert "seg-dotdot" in run.error and "seg-symlink" in run.error
    assert "elsewhere/victim.log" in run.error
    assert all(p.exists() for p in backend.store.outside.values())
    assert all(p.exists() for p in backend.store.inside)  # refused before any delete
    assert backend.calls == []  # no log start offset published, no segment marked


@pytest.mark.integration
def test_delete_objects_refuses_a_plan_with_one_row_outside_the_store(db, backend, tmp_path):
    """The delete job on its own (as the reviewed-plan workflows run it): one bad row fails the
    whole run before the delete stage, with the row named; the store's objects stay too."""
    victim = backend.store.outside["seg-dotdot"]
    plan = _plan(
        tmp_path / "reviewed" / "plan",
        [
            *(str(p) for p in backend.store.inside),
            f"{backend.store.remote}/../elsewhere/victim.log",
        ],
    )
    run = _execute(SparkJob.DELETE_OBJECTS, {"plan": str(plan)}, dry_run=False)

    assert run.state == SparkRunState.FAILED, run.log_tail
    assert "delete_objects refused" in run.error and "seg-3" in run.error
    assert str(victim.name) in run.error
    assert victim.exists() and all(p.exists() for p in backend.store.inside)
