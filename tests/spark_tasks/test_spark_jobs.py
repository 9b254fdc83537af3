"""Real ``spark-submit`` runs (local[2]) of the jobs over one generated inventory.

Spark costs ~10 s a submission, so the Kafka cases ride along in the same retention run as the
generated partitions (one partition per case), and the second run of acceptance 2 reuses it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks import rules
from spark_tasks.generate_inventory import generate
from spark_tasks.plan_job import partition_from_row, segments_from_table
from spark_tasks.schema import INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA
from spark_tasks.submit import spark_submit
from tests import s3util
from tests.spark_tasks.kafka_cases import CASES, NOW
from tests.spark_tasks.tiny_store import store_prefix

pytestmark = pytest.mark.integration

CLUSTER = "sim"


def _epochs(entries):
    return [{"epoch": e, "start_offset": o} for e, o in entries]


def _case_tables(root: str):
    inv, parts = [], []
    for i, case in enumerate(CASES):
        topic = f"kafka-{case.name}"
        p = case.partition
        parts.append(
            {
                "cluster": CLUSTER,
                "topic": topic,
                "topic_id": f"case-{i}",
                "partition": 0,
                "retention_ms": p.retention_ms,
                "retention_bytes": p.retention_bytes,
                "log_start_offset": p.log_start_offset,
                "local_log_start_offset": p.local_log_start_offset,
                "log_end_offset": p.log_end_offset,
                "local_untiered_bytes": p.local_untiered_bytes,
                "leader_epochs": _epochs(p.leader_epochs),
                "tiered_state": "ENABLED",
                "tiered_epoch": 0,
                "disable_policy": None,
                "purge_below_tiered_epoch": None,
            }
        )
        for s in case.segments:
            inv.append(
                {
                    "cluster": CLUSTER,
                    "topic": topic,
                    "topic_id": f"case-{i}",
                    "partition": 0,
                    "segment_id": s.segment_id,
                    "start_offset": s.start_offset,
                    "end_offset": s.end_offset,
                    "max_timestamp_ms": s.max_timestamp_ms,
                    "size_bytes": s.size_bytes,
                    "segment_leader_epochs": _epochs(s.leader_epochs),
                    "tiered_epoch": 0,
                    "state": s.state,
                    "object_path": f"{root}/{topic}-case-{i}/0/{s.segment_id}.log",
                    "event_timestamp_ms": s.event_timestamp_ms,
                }
            )
    # A partition no live leader reports: segments, no state row. Retention finishes its started
    # delete (delete_retry) and judges nothing else of it.
    for j, state in enumerate(
        (RemoteSegmentState.DELETE_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED)
    ):
        inv.append(
            {
                "cluster": CLUSTER,
                "topic": LEADERLESS[0],
                "topic_id": "leaderless",
                "partition": LEADERLESS[1],
                "segment_id": f"leaderless-{j}",
                "start_offset": 100 * j,
                "end_offset": 100 * j + 99,
                "max_timestamp_ms": NOW - 30 * 86_400_000,  # old enough for any retention
                "size_bytes": 1000,
                "segment_leader_epochs": [{"epoch": 0, "start_offset": 0}],
                "tiered_epoch": 0,
                "state": state,
                "object_path": f"{root}/leaderless-topic-leaderless/2/{j}.log",
                "event_timestamp_ms": NOW - 86_400_000,
            }
        )
    return (
        pa.Table.from_pylist(inv, schema=INVENTORY_SCHEMA),
        pa.Table.from_pylist(parts, schema=PARTITION_STATE_SCHEMA),
    )


LEADERLESS = ("leaderless-topic", 2)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("spark")


@pytest.fixture(scope="module")
def generated(workspace):
    """A generated inventory (with its own counts), plus the Kafka cases as extra partitions."""
    root = store_prefix("spark-jobs").uri
    counts = generate(
        workspace / "gen",
        segments=6000,
        topics=8,
        partitions_per_topic=3,
        seed=7,
        now_ms=NOW,
        remote_root=root,
        write_objects=True,
    )
    inv_cases, parts_cases = _case_tables(root)
    pq.write_table(inv_cases, workspace / "gen" / "inventory" / "part-00001.parquet")
    pq.write_table(parts_cases, workspace / "gen" / "partitions" / "part-00001.parquet")
    return {"dir": workspace / "gen", "counts": counts, "remote": root}


def _stored(root: str) -> set[str]:
    """The URIs of every object under ``root`` (one listing, not a HEAD per object)."""
    bucket = root.removeprefix("s3://").partition("/")[0]
    return {f"s3://{bucket}/{key}" for key in s3util.keys(root)}


def _submit(job, args, workspace, name):
    out = workspace / name
    result = spark_submit(
        job,
        [*args, "--out", str(out)],
        workspace / f"work-{name}",
        out_dir=out,
        master="local[2]",
        timeout_seconds=600,
    )
    assert result.ok, result.log_tail
    return out, result


def _plan_of(out: Path) -> dict[tuple[str, int], dict[str, str]]:
    table = pq.read_table(out / "plan")
    plans: dict[tuple[str, int], dict[str, str]] = {}
    for row in table.to_pylist():
        plans.setdefault((row["topic"], row["partition"]), {})[row["segment_id"]] = row["reason"]
    return plans


def _lso_of(out: Path) -> dict[tuple[str, int], int]:
    return {
        (r["topic"], r["partition"]): r["new_log_start_offset"]
        for r in pq.read_table(out / "partitions").to_pylist()
    }


def _python_plans(gen_dir: Path, planner, *, retry_without_state: bool = False):
    """The plans of the pure planner, per partition with a state row; with
    ``retry_without_state``, also the started deletes of the partitions without one (retention's
    rule for them, see plan_retention._retry_without_state)."""
    inv = pq.read_table(gen_dir / "inventory")
    parts = pq.read_table(gen_dir / "partitions").to_pylist()
    plans, lsos = {}, {}
    if retry_without_state:
        with_state = {(r["cluster"], r["topic"], r["partition"]) for r in parts}
        for r in inv.to_pylist():
            key = (r["cluster"], r["topic"], r["partition"])
            if key not in with_state and r["state"] == RemoteSegmentState.DELETE_SEGMENT_STARTED:
                plans.setdefault(key[1:], {})[r["segment_id"]] = "delete_retry"
    for row in parts:
        key = (row["topic"], row["partition"])
        mask = pc.and_(
            pc.equal(inv["topic"], row["topic"]), pc.equal(inv["partition"], row["partition"])
        )
        segs = segments_from_table(inv.filter(mask))
        plan = planner(partition_from_row(row), segs)
        if plan.deletions:
            plans[key] = {d.segment.segment_id: d.reason for d in plan.deletions}
        if plan.deletions or plan.new_log_start_offset != row["log_start_offset"]:
            lsos[key] = plan.new_log_start_offset
    return plans, lsos


def test_inventory_stats_totals_match_the_generator(generated, workspace):
    """Issue 2, acceptance 2: the job's totals equal the generator's own counts."""
    _out, result = _submit(
        "inventory_stats", ["--inventory", str(generated["dir"] / "inventory")], workspace, "stats"
    )
    summary = result.summary
    counts = generated["counts"]
    for topic, by_state in counts["topics"].items():
        assert summary["topics"][topic] == by_state
    gen_topics = {t: v for t, v in summary["topics"].items() if t in counts["topics"]}
    assert sum(v["segments"] for s in gen_topics.values() for v in s.values()) == counts["segments"]
    assert sum(v["bytes"] for s in gen_topics.values() for v in s.values()) == counts["bytes"]
    assert result.progress.get("stages_total", 0) >= 1


@pytest.fixture(scope="module")
def retention_first(generated, workspace):
    gen = generated["dir"]
    return _submit(
        "retention",
        [
            "--inventory",
            str(gen / "inventory"),
            "--partitions",
            str(gen / "partitions"),
            "--now-ms",
            str(NOW),
            "--dry-run",
        ],
        workspace,
        "retention1",
    )[0]


def test_retention_dry_run_agrees_with_kafka_cases(retention_first):
    """Acceptance 1 against ``retention --dry-run``: every Kafka case, planned by Spark."""
    plans, lsos = _plan_of(retention_first), _lso_of(retention_first)
    for case in CASES:
        key = (f"kafka-{case.name}", 0)
        assert plans.get(key, {}) == case.expected, case.mirrors
        moved = bool(case.expected) or case.expected_lso != case.partition.log_start_offset
        assert lsos.get(key) == (case.expected_lso if moved else None), case.mirrors


def test_retention_spark_plan_equals_pure_planner(generated, retention_first):
    plans, lsos = _python_plans(
        generated["dir"], lambda p, s: rules.plan_retention(p, s, NOW), retry_without_state=True
    )
    assert _plan_of(retention_first) == plans
    assert _lso_of(retention_first) == lsos
    reasons = {r for plan in plans.values() for r in plan.values()}
    assert {"retention_time", "retention_size", "delete_retry"} <= reasons


def test_retention_finishes_started_deletes_of_partitions_without_state(retention_first):
    """A partition without a live leader: its DELETE_SEGMENT_STARTED segment is planned again,
    its old COPY_SEGMENT_FINISHED one is not judged (no lineage, no retention setting)."""
    assert _plan_of(retention_first)[LEADERLESS] == {"leaderless-0": "delete_retry"}
    assert LEADERLESS not in _lso_of(retention_first)
    summary = json.loads((retention_first / "summary.json").read_text())
    assert summary["segments_without_partition_state"] == 2


def test_dry_run_deletes_nothing(generated, retention_first):
    assert not (retention_first / "deleted").exists()
    objects = len(_stored(generated["remote"]))
    live = sum(
        v["segments"]
        for t in generated["counts"]["topics"].values()
        for s, v in t.items()
        if s != RemoteSegmentState.DELETE_SEGMENT_FINISHED
    )
    assert objects == live


def test_second_run_deletes_nothing(generated, retention_first, workspace):
    """Acceptance 2: apply the first plan (DELETE_SEGMENT_FINISHED + published log start
    offsets), run the job again: nothing more for the generated partitions."""
    gen = generated["dir"]
    planned = set(
        pq.read_table(retention_first / "plan", columns=["segment_id"])["segment_id"].to_pylist()
    )
    lsos = _lso_of(retention_first)
    inv = pq.read_table(gen / "inventory")
    state = pc.if_else(
        pc.is_in(inv["segment_id"], pa.array(sorted(planned))),
        pa.scalar(RemoteSegmentState.DELETE_SEGMENT_FINISHED),
        inv["state"],
    )
    inv = inv.set_column(inv.schema.get_field_index("state"), "state", state)
    parts = pq.read_table(gen / "partitions").to_pylist()
    for row in parts:
        row["log_start_offset"] = lsos.get(
            (row["topic"], row["partition"]), row["log_start_offset"]
        )
    after = workspace / "after"
    (after / "inventory").mkdir(parents=True)
    (after / "partitions").mkdir(parents=True)
    pq.write_table(inv, after / "inventory" / "part-0.parquet")
    pq.write_table(
        pa.Table.from_pylist(parts, schema=PARTITION_STATE_SCHEMA),
        after / "partitions" / "part-0.parquet",
    )
    out, _result = _submit(
        "retention",
        [
            "--inventory",
            str(after / "inventory"),
            "--partitions",
            str(after / "partitions"),
            "--now-ms",
            str(NOW),
            "--dry-run",
        ],
        workspace,
        "retention2",
    )
    second = {k: v for k, v in _plan_of(out).items() if not k[0].startswith("kafka-")}
    assert second == {}
    assert len(planned) > 0


def test_purge_plans_below_the_epoch_and_deletes_the_objects(generated, workspace):
    gen = generated["dir"]
    out, _result = _submit(
        "purge",
        [
            "--inventory",
            str(gen / "inventory"),
            "--partitions",
            str(gen / "partitions"),
            "--store-root",
            generated["remote"],
        ],
        workspace,
        "purge",
    )
    plans, lsos = _python_plans(gen, rules.plan_purge)
    assert _plan_of(out) == plans and plans
    assert _lso_of(out) == lsos
    deleted = pq.read_table(out / "deleted").to_pylist()
    assert {r["outcome"] for r in deleted} <= {"deleted", "already_gone"}
    assert len(deleted) == sum(len(p) for p in plans.values())
    stored = _stored(generated["remote"])
    assert [r["object_path"] for r in deleted if r["object_path"] in stored] == []
    inv = pq.read_table(gen / "inventory").to_pylist()
    kept = [
        r
        for r in inv
        if r["tiered_epoch"] >= 1
        and r["state"] != RemoteSegmentState.DELETE_SEGMENT_FINISHED
        and not r["topic"].startswith(("kafka-", "leaderless"))  # cases: no objects written
    ]
    assert kept and all(r["object_path"] in stored for r in kept)


def test_orphans_finds_only_old_unreferenced_objects(generated, workspace):
    remote = generated["remote"]
    inv = pq.read_table(generated["dir"] / "inventory").to_pylist()
    beside = next(
        r["object_path"]
        for r in inv
        if r["topic"] == "topic-0000" and r["state"] == RemoteSegmentState.COPY_SEGMENT_FINISHED
    )
    # A killed upload: its object written, its metadata record never. S3 keeps the time an
    # object was written (LastModified, whole seconds) and cannot be told another, so the
    # sweep's clock is moved instead: the orphan is older than the window, one written two
    # seconds later is not (an upload in flight: kept).
    orphan = s3util.sibling(beside, "killed-upload.log")
    s3util.put(orphan, b"x" * 10)
    # a metadata record beside its segment is never an orphan, however old
    record = s3util.sibling(beside, f"{'ab' * 16}.json")
    s3util.put(record, b"{}")
    time.sleep(2.1)
    young = s3util.sibling(beside, "upload-in-flight.log")
    written_ms = s3util.put(young, b"y")
    now_ms = written_ms + 24 * 3_600_000  # cutoff = the young one's LastModified: not older
    out, result = _submit(
        "orphans",
        [
            "--inventory",
            str(generated["dir"] / "inventory"),
            "--remote-root",
            remote,
            "--older-than",
            "24h",
            "--now-ms",
            str(now_ms),
            "--dry-run",
        ],
        workspace,
        "orphans",
    )
    paths = pq.read_table(out / "plan")["object_path"].to_pylist()
    assert orphan in paths
    assert young not in paths
    assert record not in paths
    assert beside not in paths  # referenced, and older than the window
    assert result.summary["unreferenced_younger_than_window"] >= 1
    assert s3util.exists(orphan)  # dry run


def test_orphans_refuses_a_window_under_an_hour(generated, workspace):
    result = spark_submit(
        "orphans",
        [
            "--inventory",
            str(generated["dir"] / "inventory"),
            "--remote-root",
            generated["remote"],
            "--older-than",
            "59m",
            "--out",
            str(workspace / "refused"),
        ],
        workspace / "work-refused",
        master="local[2]",
    )
    assert result.exit_code == 2
    assert "at least 1h" in result.log_tail
