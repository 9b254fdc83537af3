"""SparkJobRun records, the Celery task that executes them, and the Spark jobs page."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
from django.urls import reverse
from django.utils import timezone

from spark_tasks import remote
from spark_tasks.generate_inventory import generate
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState, StorageSnapshot
from spark_tasks.tasks import enqueue_run, execute_run, reap_stale_runs
from tests import s3util
from tests.spark_tasks.tiny_store import store_prefix

NOW = 1_700_000_000_000


class FakeBackend:
    """An in-memory RemoteMetadata that records the order of calls (module-level log)."""

    calls: list[tuple[str, int]] = []
    marked: dict[str, list[remote.SegmentRef]] = {}
    inputs: Path | None = None
    root: str = ""

    def __init__(self, cluster):
        self.cluster = cluster

    def remote_root(self):
        return self.root

    def export_inputs(self, dest):
        return self.inputs / "inventory", self.inputs / "partitions"

    def publish_log_start_offsets(self, items):
        FakeBackend.calls.append(("publish", len(items)))

    def mark_segments(self, state, segments):
        FakeBackend.calls.append((state, len(segments)))
        FakeBackend.marked.setdefault(state, []).extend(segments)


def test_enqueue_creates_a_queued_run_and_enqueues_on_commit(
    db, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(execute_run, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        run = enqueue_run(SparkJob.RETENTION, {"now_ms": 5}, cluster="sim")
    assert run.state == SparkRunState.QUEUED and run.dry_run
    delay.assert_called_once_with(run.pk)


def test_enqueue_refuses_unknown_arguments(db):
    with pytest.raises(ValueError):
        enqueue_run(SparkJob.PURGE, {"remote_root": "s3://strata-remote/x"})


def test_a_run_claimed_by_a_live_worker_is_not_run_twice(db):
    run = SparkJobRun.objects.create(
        job=SparkJob.INVENTORY_STATS, state=SparkRunState.RUNNING, heartbeat_at=timezone.now()
    )
    with mock.patch("spark_tasks.tasks.spark_submit") as submit:
        assert execute_run.apply(args=[run.pk]).get() == SparkRunState.RUNNING
    submit.assert_not_called()


def test_a_finished_run_is_not_run_again(db):
    run = SparkJobRun.objects.create(job=SparkJob.INVENTORY_STATS, state=SparkRunState.SUCCEEDED)
    with mock.patch("spark_tasks.tasks.spark_submit") as submit:
        assert execute_run.apply(args=[run.pk]).get() == SparkRunState.SUCCEEDED
    submit.assert_not_called()


def test_stale_running_runs_are_reaped(db):
    old = timezone.now() - dt.timedelta(days=1)
    stale = SparkJobRun.objects.create(
        job="retention", state=SparkRunState.RUNNING, heartbeat_at=old
    )
    live = SparkJobRun.objects.create(
        job="retention", state=SparkRunState.RUNNING, heartbeat_at=timezone.now()
    )
    assert reap_stale_runs() == 1
    stale.refresh_from_db()
    live.refresh_from_db()
    assert stale.state == SparkRunState.FAILED and live.state == SparkRunState.RUNNING


def test_non_dry_run_without_a_backend_fails_with_a_clear_error(db, settings, tmp_path):
    settings.SPARK_WORK_DIR = tmp_path
    settings.SPARK_REMOTE_METADATA = ""
    run = SparkJobRun.objects.create(job=SparkJob.RETENTION, dry_run=False, cluster="sim")
    assert execute_run.apply(args=[run.pk]).get() == SparkRunState.FAILED
    run.refresh_from_db()
    assert "SPARK_REMOTE_METADATA" in run.error


@pytest.fixture(scope="module")
def small_inventory(tmp_path_factory):
    root = tmp_path_factory.mktemp("inv")
    store_root = store_prefix("runs").uri
    counts = generate(
        root,
        segments=1200,
        topics=4,
        partitions_per_topic=2,
        seed=3,
        now_ms=NOW,
        remote_root=store_root,
        write_objects=True,
    )
    return root, counts, store_root


@pytest.mark.integration
def test_execute_run_storage_report_loads_daily_snapshots(db, settings, tmp_path, small_inventory):
    """The Celery task executes a real spark-submit run by primary key and loads its output."""
    settings.SPARK_WORK_DIR = tmp_path
    root, counts, _ = small_inventory
    run = SparkJobRun.objects.create(
        job=SparkJob.STORAGE_REPORT,
        arguments={
            "inventory": str(root / "inventory"),
            "partitions": str(root / "partitions"),
            "now_ms": NOW,
        },
    )
    assert execute_run.apply(args=[run.pk]).get() == SparkRunState.SUCCEEDED
    run.refresh_from_db()
    assert run.exit_code == 0 and run.finished_at and run.tasks_total >= 1
    assert run.output_summary["snapshots_loaded"] == 8  # 4 topics x 2 tiers
    remote_bytes = sum(t["COPY_SEGMENT_FINISHED"]["bytes"] for t in counts["topics"].values())
    snaps = StorageSnapshot.objects.filter(tier="remote", day=dt.date(2023, 11, 14))
    assert sum(s.bytes for s in snaps) == remote_bytes
    # A second report the same day replaces the day's rows.
    again = SparkJobRun.objects.create(job=SparkJob.STORAGE_REPORT, arguments=run.arguments)
    assert execute_run.apply(args=[again.pk]).get() == SparkRunState.SUCCEEDED
    assert StorageSnapshot.objects.count() == 8


@pytest.mark.integration
def test_executed_retention_publishes_then_marks_then_deletes(
    db, settings, tmp_path, small_inventory
):
    """Kafka's order: log start offsets published, segments DELETE_SEGMENT_STARTED, objects
    deleted on the executors, then DELETE_SEGMENT_FINISHED."""
    settings.SPARK_WORK_DIR = tmp_path
    settings.SPARK_REMOTE_METADATA = "tests.spark_tasks.test_runs.FakeBackend"
    root, _, store_root = small_inventory
    FakeBackend.inputs, FakeBackend.calls, FakeBackend.marked = root, [], {}
    FakeBackend.root = store_root
    run = SparkJobRun.objects.create(
        job=SparkJob.RETENTION, dry_run=False, cluster="sim", arguments={"now_ms": NOW}
    )
    assert execute_run.apply(args=[run.pk]).get() == SparkRunState.SUCCEEDED, run.error
    run.refresh_from_db()
    kinds = [c[0] for c in FakeBackend.calls]
    assert kinds.index("publish") < kinds.index("DELETE_SEGMENT_STARTED")
    assert kinds.index("DELETE_SEGMENT_STARTED") < kinds.index("DELETE_SEGMENT_FINISHED")
    started = {s.segment_id for s in FakeBackend.marked["DELETE_SEGMENT_STARTED"]}
    finished = {s.segment_id for s in FakeBackend.marked["DELETE_SEGMENT_FINISHED"]}
    assert started and started == finished
    plan = pq.read_table(Path(run.output_dir) / "plan").to_pylist()
    bucket = store_root.removeprefix("s3://").partition("/")[0]
    stored = {f"s3://{bucket}/{key}" for key in s3util.keys(store_root)}
    assert plan and stored  # the plan deleted some objects, others are kept
    assert [r["object_path"] for r in plan if r["object_path"] in stored] == []
    assert run.output_summary["execution"]["marked_delete_finished"] == len(plan)


# --- the page -------------------------------------------------------------------------------


@pytest.fixture
def finished_run(db):
    return SparkJobRun.objects.create(
        job=SparkJob.RETENTION,
        state=SparkRunState.SUCCEEDED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        output_summary={"segments": 3, "bytes": 30, "by_reason": {}},
    )


def test_list_shows_runs_to_a_viewer_without_the_form(client, viewer, finished_run):
    client.force_login(viewer)
    response = client.get(reverse("spark_tasks:run-list"))
    assert response.status_code == 200
    assert f"#{finished_run.pk}" in response.content.decode()
    assert "Start dry run" not in response.content.decode()


def test_bad_page_numbers_do_not_fail(client, viewer, finished_run):
    client.force_login(viewer)
    for page in ("abc", "-1", "99999"):
        assert client.get(reverse("spark_tasks:run-list"), {"page": page}).status_code == 200
        url = reverse("spark_tasks:run-plan", args=[finished_run.pk])
        assert client.get(url, {"page": page}).status_code == 200
    assert client.get(reverse("spark_tasks:run-detail", args=[999999])).status_code == 404


def test_the_list_filters_by_job_and_an_unknown_job_filters_nothing(client, viewer):
    purge = SparkJobRun.objects.create(job=SparkJob.PURGE)
    orphans = SparkJobRun.objects.create(job=SparkJob.ORPHANS)
    client.force_login(viewer)

    def listed(**params: str) -> set[int]:
        response = client.get(reverse("spark_tasks:run-list"), params)
        assert response.status_code == 200
        return {run.pk for run in response.context["runs"]}

    assert listed(job=SparkJob.PURGE) == {purge.pk}
    assert listed() == listed(job="") == listed(job="no_such_job") == {purge.pk, orphans.pk}


def test_polling_stops_with_286_when_the_run_is_terminal(client, viewer, finished_run):
    client.force_login(viewer)
    url = reverse("spark_tasks:run-detail", args=[finished_run.pk])
    assert client.get(url, headers={"HX-Request": "true"}).status_code == 286
    SparkJobRun.objects.filter(pk=finished_run.pk).update(state=SparkRunState.RUNNING)
    response = client.get(url, headers={"HX-Request": "true"})
    assert response.status_code == 200 and 'hx-trigger="every 2s"' in response.content.decode()


def test_viewer_cannot_start_a_dry_run(client, viewer):
    client.force_login(viewer)
    response = client.post(reverse("spark_tasks:start-dry-run"), {"job": "retention"})
    assert response.status_code == 403
    assert not SparkJobRun.objects.exists()


def test_operator_starts_a_dry_run_on_a_registered_cluster(
    client, operator, django_capture_on_commit_callbacks
):
    from console.models import Cluster

    Cluster.objects.create(name="sim", controller_url="http://127.0.0.1:1", secret_ref="env:NONE")
    client.force_login(operator)
    with mock.patch.object(execute_run, "delay"), django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("spark_tasks:start-dry-run"), {"job": "retention", "cluster": "sim"}
        )
    run = SparkJobRun.objects.get()
    assert response.status_code == 302 and run.dry_run and run.requested_by == operator
    assert run.cluster == "sim"
    bad = client.post(reverse("spark_tasks:start-dry-run"), {"job": "rm -rf", "cluster": "sim"})
    unknown = client.post(
        reverse("spark_tasks:start-dry-run"), {"job": "retention", "cluster": "nope"}
    )
    assert bad.status_code == unknown.status_code == 302
    assert SparkJobRun.objects.count() == 1


def test_plan_page_sums_segments_and_bytes_per_topic(client, viewer, finished_run, tmp_path):
    import pyarrow as pa

    from spark_tasks.schema import PLAN_SCHEMA

    (tmp_path / "plan").mkdir()
    rows = [
        {
            "segment_id": f"s{i}",
            "cluster": "sim",
            "topic": f"t{i % 2}",
            "partition": 0,
            "reason": "retention_time",
            "size_bytes": 10,
            "object_path": "/x",
        }
        for i in range(5)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA), tmp_path / "plan" / "p.parquet")
    SparkJobRun.objects.filter(pk=finished_run.pk).update(output_dir=str(tmp_path))
    client.force_login(viewer)
    body = client.get(reverse("spark_tasks:run-plan", args=[finished_run.pk])).content.decode()
    assert "<td>t0</td><td>3</td>" in body and "<td>t1</td><td>2</td>" in body


def test_old_finished_runs_lose_their_files_but_keep_their_rows(
    db, settings, tmp_path, client, viewer
):
    settings.SPARK_WORK_DIR = tmp_path
    settings.SPARK_RUN_FILES_DAYS = 14
    now = timezone.now()
    old = now - dt.timedelta(days=15)
    runs = {
        "old_done": SparkJobRun.objects.create(
            job="retention", state=SparkRunState.SUCCEEDED, finished_at=old
        ),
        "old_failed": SparkJobRun.objects.create(
            job="retention", state=SparkRunState.FAILED, finished_at=old
        ),
        "recent": SparkJobRun.objects.create(
            job="retention", state=SparkRunState.SUCCEEDED, finished_at=now
        ),
        "running": SparkJobRun.objects.create(
            job="retention", state=SparkRunState.RUNNING, started_at=old, heartbeat_at=now
        ),
    }
    for run in runs.values():
        plan = tmp_path / f"run-{run.pk}" / "out" / "plan"
        plan.mkdir(parents=True)
        (plan / "part-0.parquet").write_bytes(b"x")
        SparkJobRun.objects.filter(pk=run.pk).update(output_dir=str(plan.parent))

    from spark_tasks.tasks import prune_run_files

    assert prune_run_files() == 2
    assert prune_run_files() == 0  # nothing left to remove
    left = {name for name, run in runs.items() if (tmp_path / f"run-{run.pk}").exists()}
    assert left == {"recent", "running"}
    assert SparkJobRun.objects.count() == 4

    client.force_login(viewer)
    page = client.get(reverse("spark_tasks:run-plan", args=[runs["old_done"].pk]))
    assert page.status_code == 200
    assert "removed 14 days after it finished" in page.content.decode()


def test_a_succeeded_run_reads_done_with_its_skipped_stages_not_8_of_10(client, viewer):
    run = SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        state=SparkRunState.SUCCEEDED,
        stages_total=10,
        stages_done=8,
        tasks_total=10,
        tasks_done=8,
        heartbeat_at=timezone.now() - dt.timedelta(minutes=9),
        log_tail="first line\nlast line",
    )
    assert run.stages_skipped == 2 and run.task_percent == 100
    client.force_login(viewer)
    html = client.get(reverse("spark_tasks:run-detail", args=[run.pk])).content.decode()
    assert "done: 8 stages and 8 tasks ran; 2 skipped" in html
    assert "8/10 stages" not in html and "last heartbeat" not in html  # finished: no heartbeat
    running = SparkJobRun.objects.create(
        job=SparkJob.PURGE, state=SparkRunState.RUNNING, stages_total=10, stages_done=8
    )
    assert running.stages_skipped == 0


def test_a_succeeded_dry_run_with_a_plan_offers_to_execute_it_as_a_workflow(client, viewer):
    run = SparkJobRun.objects.create(
        job=SparkJob.PURGE,
        cluster="lab",
        dry_run=True,
        state=SparkRunState.SUCCEEDED,
        plan_rows=7,
    )
    client.force_login(viewer)
    html = client.get(reverse("spark_tasks:run-detail", args=[run.pk])).content.decode()
    assert f"/workflows/new/?kind=remote_purge&amp;cluster=lab&amp;spark_run={run.pk}" in html
    for other in (
        {"dry_run": False, "plan_rows": 7},  # a deleting run: nothing left to execute
        {"dry_run": True, "plan_rows": 0},  # planned nothing
    ):
        done = SparkJobRun.objects.create(
            job=SparkJob.PURGE, cluster="lab", state=SparkRunState.SUCCEEDED, **other
        )
        page = client.get(reverse("spark_tasks:run-detail", args=[done.pk])).content.decode()
        assert 'data-testid="execute-plan"' not in page


def test_a_run_a_workflow_queued_names_it_with_a_link(
    client, viewer, django_capture_on_commit_callbacks
):
    """A run queued by a workflow step had no "by" (issue #15): the run page and the list name
    the workflow and link to it; a run a user queued names the user."""
    with mock.patch("spark_tasks.tasks.execute_run.delay"):
        by_workflow = enqueue_run(SparkJob.PURGE, {}, dry_run=True, workflow_id=42)
        by_user = enqueue_run(SparkJob.PURGE, {}, dry_run=True, requested_by=viewer)
    client.force_login(viewer)
    link = '<a href="/workflows/42/" data-testid="run-workflow">workflow #42</a>'
    assert (
        link
        in client.get(reverse("spark_tasks:run-detail", args=[by_workflow.pk])).content.decode()
    )
    detail = client.get(reverse("spark_tasks:run-detail", args=[by_user.pk])).content.decode()
    assert f"by {viewer.get_username()}" in detail and "workflow #" not in detail
    listed = client.get(reverse("spark_tasks:run-list")).content.decode()
    assert '<a href="/workflows/42/">workflow #42</a>' in listed
