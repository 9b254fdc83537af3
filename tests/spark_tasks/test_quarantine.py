"""Issue #39, "One bad metadata record stops all cleanup": a remote-log metadata record naming an
object outside the store root quarantines its partition (all of that partition's cleanup is
refused: nothing of it is published, marked or deleted, and the outside object is untouched)
while every other partition of the cluster is retained or purged as usual. The quarantine is
reported in the run's summary, on its page, in one audit event and as a health warning."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.utils import timezone

from audit.models import AuditEvent
from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks.audit import SparkAuditAction
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.quarantine_report import QuarantineAction
from spark_tasks.schema import PARTITION_STATE_SCHEMA
from spark_tasks.tasks import execute_run
from tests import s3util
from tests.spark_tasks import tiny_store


class RecordingBackend:
    """A RemoteMetadata over a tiny store whose calls are recorded with their arguments."""

    store: tiny_store.TinyStore | None = None
    published: list = []
    marked: dict[str, list] = {}

    def __init__(self, cluster):
        self.cluster = cluster

    def remote_root(self):
        return RecordingBackend.store.remote

    def export_inputs(self, dest):
        return RecordingBackend.store.inventory, RecordingBackend.store.partitions

    def publish_log_start_offsets(self, items):
        RecordingBackend.published += [(i.topic, i.partition, i.log_start_offset) for i in items]

    def mark_segments(self, state, segments):
        RecordingBackend.marked.setdefault(state, []).extend(s.segment_id for s in segments)


@pytest.fixture
def lab(settings, tmp_path):
    """Partition 0 holds three segments inside the store and two records naming objects outside
    it (through ``..``, and in a sibling prefix); partitions 1 and 2 are clean. All fenced by a
    delete-policy disablement."""
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    settings.SPARK_REMOTE_METADATA = "tests.spark_tasks.test_quarantine.RecordingBackend"
    RecordingBackend.store = tiny_store.build(tmp_path / "q", escapes=True, clean_partitions=2)
    RecordingBackend.published = []
    RecordingBackend.marked = {}
    return RecordingBackend.store


def _execute(job: str, arguments: dict | None = None, *, dry_run: bool) -> SparkJobRun:
    run = SparkJobRun.objects.create(
        job=job, arguments=arguments or {}, dry_run=dry_run, cluster=tiny_store.CLUSTER
    )
    execute_run.apply(args=[run.pk]).get()
    run.refresh_from_db()
    return run


def _clean_segment_ids() -> set[str]:
    return {f"p{p}-seg-{i}" for p in (1, 2) for i in range(3)}


@pytest.mark.integration
def test_one_bad_record_quarantines_its_partition_and_the_rest_of_the_cluster_is_purged(
    db, lab, client, viewer
):
    """Acceptance: the purge of a delete-policy disablement succeeds. Partition 0 (with the
    records outside the store) is quarantined: its log start offset is not published, none of its
    segments is marked, its objects inside the store and the objects outside are all still
    there. Partitions 1 and 2 are purged: published, marked, objects gone."""
    run = _execute(SparkJob.PURGE, dry_run=False)

    assert run.state == SparkRunState.SUCCEEDED, (run.error, run.log_tail)
    # partition 0: nothing of it touched, inside or outside the store
    assert all(s3util.exists(p) for p in lab.inside)
    assert all(s3util.exists(p) for p in lab.outside.values())
    # partitions 1 and 2: purged in Kafka's order
    assert not any(s3util.exists(p) for objs in lab.clean.values() for p in objs)
    assert sorted(RecordingBackend.published) == [
        (tiny_store.TOPIC, 1, 300),
        (tiny_store.TOPIC, 2, 300),
    ]
    started = set(RecordingBackend.marked[RemoteSegmentState.DELETE_SEGMENT_STARTED])
    finished = set(RecordingBackend.marked[RemoteSegmentState.DELETE_SEGMENT_FINISHED])
    assert started == finished == _clean_segment_ids()

    summary = run.output_summary
    assert summary["quarantined"] == {
        "partitions": 1,
        "segments": 5,
        "bytes": sum(1000 + i for i in range(5)),
        "outside_objects": 2,
    }
    assert summary["segments"] == 6 and summary["partitions"] == 2
    assert summary["execution"]["deleted"] == {"deleted": 6}
    (named,) = summary["quarantined_partitions"]
    assert (named["topic"], named["partition"]) == (tiny_store.TOPIC, 0)
    assert (named["outside_objects"], named["segments"]) == (2, 5)

    # quarantined/: every planned row of partition 0, each with why
    quarantined = pq.read_table(Path(run.output_dir) / "quarantined").to_pylist()
    reasons = {r["segment_id"]: r["reason"] for r in quarantined}
    assert reasons == {
        "seg-0": "partition_quarantined",
        "seg-1": "partition_quarantined",
        "seg-2": "partition_quarantined",
        "seg-dotdot": "object_outside_store",
        "seg-sibling": "object_outside_store",
    }
    assert {r["partition"] for r in quarantined} == {0}

    # one audit event naming the partition, in the transaction that marked the run succeeded
    events = list(
        AuditEvent.objects.filter(target_type="spark_run", target_id=str(run.pk)).order_by("seq")
    )
    assert [e.action for e in events][-2:] == [
        SparkAuditAction.SUCCEEDED,
        QuarantineAction.QUARANTINED,
    ]
    event = events[-1]
    assert event.after["partitions"][0]["topic"] == tiny_store.TOPIC
    assert event.after["partitions"][0]["partition"] == 0
    assert event.after["quarantined"]["partitions"] == 1

    # the run's page names the partition and why
    client.force_login(viewer)
    html = client.get(f"/spark/runs/{run.pk}/").content.decode()
    card = html[html.index('data-testid="quarantined-partitions"') :]
    assert "1 partition:" in card and "outside the remote store" in card
    assert f"<td>{tiny_store.TOPIC}</td><td>0</td><td>2</td><td>5</td>" in card

    # and /api/v1/health warns, without counting it in status
    body = client.get("/api/v1/health").json()
    assert any(
        w.startswith("quarantined_partitions: 1 partition in 1 cluster") for w in body["warnings"]
    )


def _as_retention(store: tiny_store.TinyStore, *, drop: tuple[str, ...]) -> None:
    """Turn the tiny store's partitions into tiering ENABLED ones with a 1 min time retention
    (every segment is an hour old), without the inventory rows ``drop``."""
    inventory = pq.read_table(store.inventory)
    rows = [r for r in inventory.to_pylist() if r["segment_id"] not in drop]
    pq.write_table(
        inventory.from_pylist(rows, schema=inventory.schema),
        store.inventory / "part-00000.parquet",
    )
    states = pq.read_table(store.partitions).to_pylist()
    for state in states:
        state.update(
            retention_ms=60_000,
            tiered_state="ENABLED",
            tiered_epoch=0,
            disable_policy=None,
            purge_below_tiered_epoch=None,
        )
    pq.write_table(
        pq.read_table(store.partitions).from_pylist(states, schema=PARTITION_STATE_SCHEMA),
        store.partitions / "part-00000.parquet",
    )


@pytest.mark.integration
def test_retention_quarantines_the_partition_of_one_bad_record_and_expires_the_others(db, lab):
    """Retention, one record outside the store (``..`` out of the prefix): a dry run withholds
    that partition from plan/ and partitions/ and reports it; every other partition's expired
    segments stay planned and its log start offset moves."""
    _as_retention(lab, drop=("seg-sibling",))
    run = _execute(SparkJob.RETENTION, {"now_ms": tiny_store.NOW}, dry_run=True)

    assert run.state == SparkRunState.SUCCEEDED, (run.error, run.log_tail)
    out = Path(run.output_dir)
    plan = pq.read_table(out / "plan").to_pylist()
    assert {r["segment_id"] for r in plan} == _clean_segment_ids()
    assert {r["reason"] for r in plan} == {"retention_time"}
    partitions = pq.read_table(out / "partitions").to_pylist()
    assert sorted((r["partition"], r["new_log_start_offset"]) for r in partitions) == [
        (1, 300),
        (2, 300),
    ]
    summary = run.output_summary
    assert summary["quarantined"]["partitions"] == 1
    assert summary["quarantined"]["outside_objects"] == 1
    assert summary["quarantined"]["segments"] == 4
    assert summary["by_reason"] == {
        "retention_time": {"segments": 6, "bytes": 2 * sum(1000 + i for i in range(3))}
    }
    assert summary["partitions"] == 2 and summary["log_start_offsets_moved"] == 2
    assert run.plan_rows == 6  # the digest an approval names covers the kept plan only
    assert [p["partition"] for p in summary["quarantined_partitions"]] == [0]
    # a dry run deletes nothing, and published nothing
    assert RecordingBackend.published == [] and RecordingBackend.marked == {}
    assert all(s3util.exists(p) for p in lab.inside)


@pytest.mark.integration
def test_a_plan_inside_the_store_quarantines_nothing_and_writes_an_empty_output(db, lab):
    """Only partitions 1 and 2 (no record outside): nothing withheld, quarantined/ empty, no
    quarantine event."""
    inventory = pq.read_table(lab.inventory)
    rows = [r for r in inventory.to_pylist() if r["partition"] != 0]
    pq.write_table(
        inventory.from_pylist(rows, schema=inventory.schema), lab.inventory / "part-00000.parquet"
    )
    run = _execute(SparkJob.PURGE, dry_run=True)

    assert run.state == SparkRunState.SUCCEEDED, (run.error, run.log_tail)
    assert run.output_summary["quarantined"]["partitions"] == 0
    assert run.output_summary["quarantined_partitions"] == []
    assert pq.read_table(Path(run.output_dir) / "quarantined").num_rows == 0
    assert run.plan_rows == 6
    assert not AuditEvent.objects.filter(
        action=QuarantineAction.QUARANTINED, target_id=str(run.pk)
    ).exists()


# --- the health warning -----------------------------------------------------------------------


def _finished(job: str, cluster: str, quarantined: int, minutes_ago: int) -> SparkJobRun:
    return SparkJobRun.objects.create(
        job=job,
        cluster=cluster,
        state=SparkRunState.SUCCEEDED,
        finished_at=timezone.now() - dt.timedelta(minutes=minutes_ago),
        output_summary={"segments": 0, "quarantined": {"partitions": quarantined}},
    )


def test_health_warns_while_a_clusters_latest_run_has_quarantined_partitions(db, client):
    _finished(SparkJob.RETENTION, "east", 3, minutes_ago=30)
    _finished(SparkJob.PURGE, "west", 1, minutes_ago=10)
    before = client.get("/api/v1/health")
    assert before.json()["warnings"] == [
        "quarantined_partitions: 4 partitions in 2 clusters with remote-log metadata naming "
        "objects outside the remote store; their retention and purge are refused (Spark jobs "
        "page)"
    ]
    # a warning is not counted in status: the same status as without it
    status = before.json()["status"]
    # east's next retention run finds the record fixed; west's purge has not run again
    _finished(SparkJob.RETENTION, "east", 0, minutes_ago=1)
    after = client.get("/api/v1/health").json()
    assert after["warnings"] == [
        "quarantined_partitions: 1 partition in 1 cluster with remote-log metadata naming "
        "objects outside the remote store; their retention and purge are refused (Spark jobs "
        "page)"
    ]
    assert after["status"] == status
    _finished(SparkJob.PURGE, "west", 0, minutes_ago=0)
    assert client.get("/api/v1/health").json()["warnings"] == []


def test_a_failed_run_does_not_clear_the_warning(db, client):
    _finished(SparkJob.PURGE, "west", 2, minutes_ago=10)
    SparkJobRun.objects.create(
        job=SparkJob.PURGE, cluster="west", state=SparkRunState.FAILED, finished_at=timezone.now()
    )
    assert (
        client.get("/api/v1/health")
        .json()["warnings"][0]
        .startswith("quarantined_partitions: 2 partitions in 1 cluster")
    )


def test_a_run_older_than_the_warning_window_says_nothing_about_now(db, client):
    """The warning reads the runs of the last week (bounded whatever the history's length):
    retention runs hourly, so a cluster whose latest run is older has stopped being cleaned,
    which is not what this warning says."""
    old = _finished(SparkJob.RETENTION, "east", 3, minutes_ago=8 * 24 * 60)
    SparkJobRun.objects.filter(pk=old.pk).update(created_at=old.finished_at)
    assert client.get("/api/v1/health").json()["warnings"] == []
