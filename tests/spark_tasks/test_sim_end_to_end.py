"""Issue 5, acceptance 3: the Spark jobs against the simulated cluster's real processes.

One simulated cluster (3 brokers, ``--expiration external`` so the agents' own expiration stands
aside and these jobs are the retention engine) serves the whole module; each test uses its own
topic. Runs go through the product's path: ``enqueue_run`` -> ``execute_run`` (eagerly, in this
process) -> the agent adapter (``spark_tasks.agent_remote``) -> ``spark-submit`` on local[2].
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from unittest import mock

import pytest

from broker_agent.contract.choices import RemoteSegmentState, TieredState
from console.clusters import do_register_cluster
from spark_tasks import tasks
from spark_tasks.models import SparkJob, SparkRunState
from spark_tasks.schema import PlanReason
from spark_tasks.tasks import RunFailed, enqueue_run, execute_run
from tests import s3util
from tests.broker_agent.conftest import Sim, _kill_all, run_cli, wait_until

pytestmark = pytest.mark.integration

CLUSTER = "sim-e2e"
SEGMENT_BYTES = "4096"
TOPIC_CONFIG = ["--segment-bytes", SEGMENT_BYTES, "--config", "local.retention.bytes=8192"]
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[Sim]:
    data = tmp_path_factory.mktemp("sim") / "data"
    try:
        proc = run_cli(
            data,
            "up",
            "--brokers",
            "3",
            "--log-dirs",
            "1",
            "--expiration",
            "external",
            "--segment-bytes",
            SEGMENT_BYTES,
        )
        cluster = Sim(data, json.loads(proc.stdout.strip().splitlines()[-1]))
    except BaseException:
        _kill_all(data)
        raise
    try:
        yield cluster
    finally:
        cluster.close()
        with contextlib.suppress(Exception):
            run_cli(data, "down", check=False, timeout=60)
        _kill_all(data)


@pytest.fixture
def registered(sim, admin, settings, tmp_path):
    """The cluster registered in console, as an SRE would; runs find it by name."""
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    settings.SPARK_REMOTE_METADATA = "spark_tasks.agent_remote.for_cluster"
    do_register_cluster(
        name=CLUSTER,
        controller_url=sim.urls["controller"],
        secret_ref=str(sim.data / "secret"),
        acting_user=admin,
    )
    return sim


def _tiered_topic(sim: Sim, topic: str, records: int, *configs: str) -> int:
    """A tiered one-partition topic whose closed segments are all in the remote store."""
    extra = [c for kv in configs for c in ("--config", kv)]
    sim.cli(
        "create-topic",
        topic,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--tiered",
        *TOPIC_CONFIG,
        *extra,
    )
    return _produce_and_tier(sim, topic, records)


def _produce_and_tier(sim: Sim, topic: str, records: int) -> int:
    sim.cli("produce", "--topic", topic, "--records", str(records), "--keyed")
    leader = sim.partition(topic).leader
    sim.agent(leader).roll(topic, 0)
    wait_until(
        lambda: (r := sim.replica(leader, topic)).remote_log_end_offset == r.log_end_offset - 1,
        60,
        what=f"{topic} tiered",
    )
    return leader


def _segments(sim: Sim, topic: str) -> list:
    agent = sim.agent(sim.partition(topic).leader)
    return sorted(agent.inventory(topic), key=lambda s: s.start_offset)


def _run(job: str, **arguments) -> object:
    run = enqueue_run(job, arguments, dry_run=False, cluster=CLUSTER)
    state = execute_run.apply(args=[run.pk]).get()
    run.refresh_from_db()
    assert state == SparkRunState.SUCCEEDED, f"{run.error}\n{run.log_tail}"
    return run


def _offsets_are_continuous(sim: Sim, topic: str) -> tuple[int, int]:
    """Read the partition from its log start offset to its end: no gap, no repeat."""
    leader = sim.partition(topic).leader
    r = sim.replica(leader, topic)
    offsets = []
    offset = r.log_start_offset
    while offset < r.log_end_offset:
        fetched = sim.agent(leader).fetch(topic, 0, offset, max_records=500)
        assert fetched.records, f"nothing readable at {offset}"
        offsets += [rec.offset for rec in fetched.records]
        offset = fetched.records[-1].offset + 1
    assert offsets == list(range(r.log_start_offset, r.log_end_offset))
    return r.log_start_offset, r.log_end_offset


def test_purge_after_delete_disablement_removes_every_object_below_the_epoch_only(registered):
    sim = registered
    _tiered_topic(sim, "purged", 2000)
    sim.cli("disable-tiering", "purged", "--policy", "delete")
    sim.cli("enable-tiering", "purged")
    _produce_and_tier(sim, "purged", 600)
    before = _segments(sim, "purged")
    fenced = [s for s in before if s.tiered_epoch == 0]
    current = [s for s in before if s.tiered_epoch == 1]
    assert fenced and current
    assert all(s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED for s in before)

    run = _run(SparkJob.PURGE)

    assert run.output_summary["by_reason"][PlanReason.PURGE_DISABLED]["segments"] == len(fenced)
    after = {s.segment_id: s for s in _segments(sim, "purged")}
    for s in fenced:
        assert after[s.segment_id].state == RemoteSegmentState.DELETE_SEGMENT_FINISHED
        assert not s3util.exists(s.object_path)
    for s in current:
        assert after[s.segment_id].state == RemoteSegmentState.COPY_SEGMENT_FINISHED
        assert s3util.exists(s.object_path)
    assert run.output_summary["execution"]["marked_delete_finished"] == len(fenced)
    _offsets_are_continuous(sim, "purged")  # the re-tiered segments stay readable


def test_retain_disablement_expires_from_remote_log_start_and_a_crash_is_finished_later(
    registered,
):
    """retention.bytes breached: the oldest remote segments go, oldest first; a run that dies
    after marking DELETE_SEGMENT_STARTED (before any object is deleted) is finished by the next
    run as ``delete_retry``; offsets stay continuous from the new log start through a
    re-enable."""
    sim = registered
    leader = _tiered_topic(sim, "kept", 2000, "retention.bytes=20000")
    sim.cli("disable-tiering", "kept", "--policy", "retain")
    assert sim.controller.topic("kept").tiered_state == TieredState.DISABLED
    before = _segments(sim, "kept")
    log_start_before = sim.replica(leader, "kept").log_start_offset

    real_submit = tasks._submit

    def crash_before_deleting(run, job, *args, **kwargs):
        if job == SparkJob.DELETE_OBJECTS:
            raise RunFailed("worker killed between marking and deleting")
        return real_submit(run, job, *args, **kwargs)

    crashed = enqueue_run(SparkJob.RETENTION, {}, dry_run=False, cluster=CLUSTER)
    with mock.patch.object(tasks, "_submit", crash_before_deleting):
        assert execute_run.apply(args=[crashed.pk]).get() == SparkRunState.FAILED
    marked = [
        s for s in _segments(sim, "kept") if s.state == RemoteSegmentState.DELETE_SEGMENT_STARTED
    ]
    assert marked, "the crashed run marked its plan"
    assert all(s3util.exists(s.object_path) for s in marked), "and deleted nothing"
    # Published before marking: the new log start offset is already past the marked segments.
    log_start = sim.replica(leader, "kept").log_start_offset
    assert log_start == max(s.end_offset for s in marked) + 1 > log_start_before
    # Kafka's scan: the deleted ones are the oldest, a prefix of the remote log.
    assert [s.segment_id for s in marked] == [s.segment_id for s in before[: len(marked)]]

    run = _run(SparkJob.RETENTION)

    assert run.output_summary["by_reason"][PlanReason.DELETE_RETRY]["segments"] == len(marked)
    after = {s.segment_id: s for s in _segments(sim, "kept")}
    for s in marked:
        assert after[s.segment_id].state == RemoteSegmentState.DELETE_SEGMENT_FINISHED
        assert not s3util.exists(s.object_path)
    remaining = sorted(
        (s for s in after.values() if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED),
        key=lambda s: s.start_offset,
    )
    assert remaining, "retention.bytes keeps the newest remote segments"
    assert remaining[0].start_offset == sim.replica(leader, "kept").log_start_offset
    _offsets_are_continuous(sim, "kept")

    sim.cli("enable-tiering", "kept")
    _produce_and_tier(sim, "kept", 300)
    rows = _segments(sim, "kept")
    old = [s for s in rows if s.tiered_epoch == 0]
    new = [s for s in rows if s.tiered_epoch == 1]
    assert new and new[0].start_offset == old[-1].end_offset + 1
    _offsets_are_continuous(sim, "kept")


def test_orphans_from_a_killed_upload_are_found_and_nothing_referenced_is_touched(registered):
    sim = registered
    _tiered_topic(sim, "uploads", 800)
    live = [s for s in _segments(sim, "uploads") if s.state != "DELETE_SEGMENT_FINISHED"]
    assert live
    # A killed upload: its object written, its metadata record never. S3 keeps the time an
    # object was written (LastModified, whole seconds), so the sweep's clock is moved instead:
    # the orphan is older than the window, one written two seconds later is not (an upload in
    # flight: kept).
    orphan = s3util.sibling(
        live[0].object_path, "00000000000000000000-0badc0ffee0badc0ffee0badc0ffee00.log"
    )
    s3util.put(orphan, b"x" * 1000)
    time.sleep(2.1)
    young = s3util.sibling(
        live[0].object_path, "00000000000000000000-0badc0ffee0badc0ffee0badc0ffee01.log"
    )
    written_ms = s3util.put(young, b"y" * 10)
    now_ms = written_ms + 24 * HOUR_MS  # cutoff = the young one's LastModified: not older

    run = _run(SparkJob.ORPHANS, now_ms=now_ms, older_than="24h")

    summary = run.output_summary
    assert summary["segments"] == 1 and summary["bytes"] == 1000
    assert summary["unreferenced_younger_than_window"] >= 1
    assert not s3util.exists(orphan) and s3util.exists(young)
    assert all(s3util.exists(s.object_path) for s in live)
