"""What every Spark job module shares: the session, progress reporting, arguments, outputs, deletes.

Runs under ``spark-submit`` (driver and executors), so it imports PySpark and pyarrow only.

Progress: a daemon thread in the driver polls ``SparkContext.statusTracker()`` every second and
writes ``{"stages_total", "stages_done", "tasks_total", "tasks_done", ...}`` atomically to the file
named by ``STRATA_PROGRESS_FILE`` (set by ``spark_tasks.submit``). This works with the Spark UI
off (``spark.ui.enabled=false``: the status store lives without it), needs no port, and does not
depend on log formats; ``submit`` reads the file while the job runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tasks import store

__all__ = [
    "DELETE_RESULT_SCHEMA",
    "ERROR_FILE",
    "REFUSED_OUTSIDE_STORE",
    "OutsideStore",
    "add_common_arguments",
    "add_delete_arguments",
    "add_store_root_argument",
    "check_inside_store",
    "delete_planned_objects",
    "ensure_inside_store",
    "parse_delete_job_arguments",
    "parse_duration_ms",
    "refuse",
    "require_store_root",
    "session",
    "unlink_paths",
    "write_summary",
]

PROGRESS_ENV = "STRATA_PROGRESS_FILE"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``"24h"`` -> 86400000; units ms, s, m, h, d; a bare number is seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90m, 24h, 7d)")
    value, unit = match.groups()
    return int(float(value) * _UNIT_MS[unit or "s"])


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output directory (created; replaced)")
    parser.add_argument("--master", default=None, help="Spark master when run with python -m")


def session(app_name: str, master: str | None = None):
    """The SparkSession; ``master`` only matters under ``python -m`` (spark-submit sets it)."""
    from pyspark.sql import SparkSession

    # Under python -m the Python workers must run this interpreter and find this package.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parent.parent)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in paths if p]])
    builder = SparkSession.builder.appName(app_name)
    if master or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Under python -m no spark-submit launched us (it sets PYSPARK_GATEWAY_PORT) to pass a
        # master: take --master, else $SPARK_MASTER, else local[2].
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[2]"))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _start_progress(spark)
    return spark


def _start_progress(spark) -> None:
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    tracker = spark.sparkContext.statusTracker()

    def snapshot() -> dict[str, Any]:
        stages_total = stages_done = tasks_total = tasks_done = 0
        active: list[str] = []
        for job_id in tracker.getJobIdsForGroup(None):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stages_total += 1
                info = tracker.getStageInfo(stage_id)
                if info is None:
                    stages_done += 1 if job.status == "SUCCEEDED" else 0
                    continue
                tasks_total += info.numTasks
                tasks_done += info.numCompletedTasks
                if info.numTasks and info.numCompletedTasks >= info.numTasks:
                    stages_done += 1
                elif info.numActiveTasks:
                    active.append(
                        f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    )
        return {
            "stages_total": stages_total,
            "stages_done": stages_done,
            "tasks_total": tasks_total,
            "tasks_done": tasks_done,
            "active": active[:5],
            "at_ms": int(time.time() * 1000),
        }

    def loop() -> None:
        target = Path(path)
        tmp = target.with_suffix(".tmp")
        best = -1
        while True:
            try:
                snap = snapshot()
                # Never go backwards: after spark.stop() the status store is empty.
                if snap["stages_total"] >= best:
                    best = snap["stages_total"]
                    tmp.write_text(json.dumps(snap))
                    os.replace(tmp, target)
            except Exception as exc:  # never let progress reporting kill a job
                print(f"progress reporter: {exc}", file=sys.stderr)
            time.sleep(1.0)

    threading.Thread(target=loop, name="strata-progress", daemon=True).start()


def prepare_out(out: str) -> Path:
    """The output directory, emptied: a rerun replaces its outputs instead of mixing with them."""
    path = Path(os.path.normpath(os.path.abspath(out)))
    for sub in (
        "plan",
        "partitions",
        "quarantined",
        "deleted",
        "report",
        "orphans",
        "_staged",
        "_plan_kept",
    ):
        shutil.rmtree(path / sub, ignore_errors=True)
    for name in ("summary.json", ERROR_FILE):
        with contextlib.suppress(FileNotFoundError):
            (path / name).unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str))
    os.replace(tmp, out / "summary.json")
    print("SUMMARY " + json.dumps(summary, sort_keys=True, default=str))


class DeleteOutcome:
    DELETED = "deleted"
    ALREADY_GONE = "already_gone"
    REFUSED = "refused"
    FAILED = "failed"

    DONE = (DELETED, ALREADY_GONE)


DELETE_RESULT_SCHEMA = pa.schema(
    [
        ("segment_id", pa.string()),
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("size_bytes", pa.int64()),
        ("object_path", pa.string()),
        ("outcome", pa.string()),
        ("error", pa.string()),
    ]
)


def unlink_paths(paths: list[str | None], root: str) -> tuple[list[str], list[str | None]]:
    """Delete one batch of plan rows' objects from the S3 store rooted at ``root`` (a
    :func:`spark_tasks.store.store_root` result): (outcome, error) per path, in order. The work
    is :func:`spark_tasks.s3_delete.delete_paths`' (DeleteObjects batches of 1,000, retries,
    every object checked against the store again: one outside is ``refused`` and never sent)."""
    from spark_tasks import s3_delete

    return s3_delete.delete_paths(paths, root)


_PLAN_KEYS = ("segment_id", "cluster", "topic", "partition", "size_bytes", "object_path")
#: Rows below which a plan's row group is not split further between tasks.
MIN_DELETE_CHUNK = 10_000

#: One unit of delete work: (plan file, row group, first row, end row).
DeleteUnit = tuple[str, int, int, int]


def plan_units(plan_dir: Path, parallelism: int) -> list[DeleteUnit]:
    """Split a plan into about ``parallelism`` equal units from Parquet metadata alone (row
    counts per row group; no row is read on the driver)."""
    groups: list[tuple[str, int, int]] = []
    root = Path(plan_dir)
    for path in sorted(root.rglob("*.parquet")):
        if any(part.startswith(("_", ".")) for part in path.relative_to(root).parts):
            continue  # Spark's hidden files and leftovers (_temporary/), as Spark skips them
        meta = pq.ParquetFile(path).metadata
        groups += [
            (str(path), rg, meta.row_group(rg).num_rows)
            for rg in range(meta.num_row_groups)
            if meta.row_group(rg).num_rows
        ]
    total = sum(n for _, _, n in groups)
    chunk = max(MIN_DELETE_CHUNK, -(-total // max(1, parallelism)))
    return [
        (path, rg, first, min(rows, first + chunk))
        for path, rg, rows in groups
        for first in range(0, rows, chunk)
    ]


#: Rows a delete task reads, deletes and writes at a time (see :func:`_delete_units`).
DELETE_BATCH_ROWS = 16_384


def _unit_batches(
    units: Iterator[DeleteUnit], batch_rows: int, columns: tuple[str, ...] = _PLAN_KEYS
) -> Iterator[pa.Table]:
    """The plan rows of ``units``, ``batch_rows`` at a time, read with pyarrow."""
    for path, rg, first, end in units:
        at = 0
        for batch in pq.ParquetFile(path).iter_batches(
            batch_size=batch_rows, row_groups=[rg], columns=list(columns)
        ):
            lo, hi = max(first, at), min(end, at + batch.num_rows)
            if lo < hi:
                yield pa.Table.from_batches([batch.slice(lo - at, hi - lo)])
            at += batch.num_rows
            if at >= end:
                break


def _outcome_table(table: pa.Table, outcomes: list[str], errors: list[str | None]) -> pa.Table:
    return pa.Table.from_arrays(
        [
            *(table.column(n).cast(DELETE_RESULT_SCHEMA.field(n).type) for n in _PLAN_KEYS),
            pa.array(outcomes, pa.string()),
            pa.array(errors, pa.string()),
        ],
        schema=DELETE_RESULT_SCHEMA,
    )


def _delete_units(out_dir: str, root: str, threads: int = 1, batch_rows: int = DELETE_BATCH_ROWS):
    """Executor side: delete the objects of a partition's units that lie inside the store rooted
    at ``root`` (the others are ``refused``), write ``part-<index>.parquet``
    of outcomes (atomically: a retried task replaces it) and yield (outcome, count).

    ``threads`` threads delete, one batch of ``batch_rows`` plan rows each at a time (each batch
    with several DeleteObjects calls in flight, see :mod:`spark_tasks.s3_delete`), while this
    thread reads the next batches and writes the outcomes of finished ones, in plan order (the
    GIL is released while a call waits for S3 and in pyarrow's decoding and encoding). Outcomes
    are written only after their deletes were answered, so ``deleted/`` never claims an object
    that is still there; a task that dies leaves no ``part-`` file and Spark runs it again
    (deleting again is harmless: an object already gone counts as deleted)."""

    def run(index: int, units: Iterator[DeleteUnit]) -> Iterator[tuple[str, int]]:
        target = os.path.join(out_dir, f"part-{index:05d}.parquet")
        tmp = f"{target}.{os.getpid()}.tmp"
        counts: dict[str, int] = {}
        in_flight: deque[tuple[pa.Table, Future]] = deque()
        with (
            pq.ParquetWriter(tmp, DELETE_RESULT_SCHEMA) as writer,
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="strata-delete") as pool,
        ):

            def finish_oldest() -> None:
                table, deleting = in_flight.popleft()
                outcomes, errors = deleting.result()
                for outcome in outcomes:
                    counts[outcome] = counts.get(outcome, 0) + 1
                writer.write_table(_outcome_table(table, outcomes, errors))

            for table in _unit_batches(units, batch_rows):
                paths = table.column("object_path").to_pylist()
                in_flight.append((table, pool.submit(unlink_paths, paths, root)))
                if len(in_flight) > threads:
                    finish_oldest()
            while in_flight:
                finish_oldest()
        os.replace(tmp, target)
        yield from counts.items()

    return run


def delete_planned_objects(
    spark,
    plan_dir: Path,
    out_dir: Path,
    *,
    store_root: str,
    timings: dict[str, float] | None = None,
) -> dict[str, int]:
    """Executors delete the plan's objects and write ``deleted/``; the driver sees only Parquet
    metadata, the outcome counts and at most a few rows outside the store, never the delete set.

    ``store_root`` comes from configuration. One row outside it fails the whole run before anything
    is deleted (:func:`check_inside_store`, then :func:`refuse`): a plan is carried out whole or not
    at all; :func:`unlink_paths` checks every object again. The plan is cut into one unit per delete
    task (:func:`delete_tasks`) so no row goes through the JVM or a shuffle; a no-op warm-up task
    per core runs first so ``timings["delete_seconds"]`` times the delete stage alone. Local mode:
    one task, two threads (``spark.strata.delete.tasks`` / ``.threads`` override), i.e. the
    concurrency ``bench/bench_s3.py`` gives its floor. Plans are read from a locally mounted path.
    """
    sc = spark.sparkContext
    root = store.store_root(store_root)
    parallelism = delete_tasks(sc)
    units = plan_units(plan_dir, parallelism)
    ensure_inside_store(spark, plan_dir, store_root, out_dir, units=units)
    deleted_dir = out_dir / "deleted"
    shutil.rmtree(deleted_dir, ignore_errors=True)
    deleted_dir.mkdir(parents=True)
    if not units:
        pq.write_table(DELETE_RESULT_SCHEMA.empty_table(), deleted_dir / "part-00000.parquet")
        if timings is not None:
            timings["delete_seconds"] = 0.0
        return {}
    sc.parallelize(range(parallelism), parallelism).foreach(_warm_up)
    started = time.monotonic()
    counts: dict[str, int] = {}
    for outcome, n in (
        sc.parallelize(units, min(parallelism, len(units)))
        .mapPartitionsWithIndex(_delete_units(str(deleted_dir), root, delete_threads(sc)))
        .collect()  # at most four (outcome, count) pairs per task
    ):
        counts[outcome] = counts.get(outcome, 0) + int(n)
    if timings is not None:
        timings["delete_seconds"] = round(time.monotonic() - started, 3)
    return counts


#: Exit code of a job that refused a plan naming objects outside the remote store.
REFUSED_OUTSIDE_STORE = 4
#: Written into the job's ``--out`` when it refuses: ``{"error": CODE, "message": ...}``; the
#: Celery task puts the message into the run's error.
ERROR_FILE = "error.json"
#: Offending rows named in a refusal (the count says how many there were).
OUTSIDE_ROWS_NAMED = 10


class OutsideStore:
    """What :func:`check_inside_store` found: how many rows lie outside, and the first few."""

    CODE = "OUTSIDE_REMOTE_STORE"

    def __init__(self, root: str, count: int, rows: list[dict[str, Any]]) -> None:
        self.root = root
        self.count = count
        self.rows = rows

    def message(self) -> str:
        named = "; ".join(_describe_row(r) for r in self.rows)
        more = f" (first {len(self.rows)} named)" if self.count > len(self.rows) else ""
        return (
            f"{self.count} plan row(s) name objects outside the remote store {self.root}; "
            f"nothing was deleted{more}: {named}"
        )


def _describe_row(row: dict[str, Any]) -> str:
    where = f"{row.get('topic')}-{row.get('partition')} " if row.get("topic") else ""
    what = f"segment {row['segment_id']} ({where.strip()})" if row.get("segment_id") else "object"
    return f"{what} at {row.get('object_path')!r}"


_CHECK_COLUMNS = ("segment_id", "topic", "partition", "object_path")


def _check_units(root: str):
    """Executor side: (rows outside the store, the first ``OUTSIDE_ROWS_NAMED`` of them)."""

    def run(units: Iterator[DeleteUnit]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        count = 0
        named: list[dict[str, Any]] = []
        for table in _unit_batches(units, DELETE_BATCH_ROWS, _CHECK_COLUMNS):
            paths = table.column("object_path").to_pylist()
            for i, path in enumerate(paths):
                if store.store_entry(path, root) is None:
                    count += 1
                    if len(named) < OUTSIDE_ROWS_NAMED:
                        named.append(table.slice(i, 1).to_pylist()[0])
        yield count, named

    return run


def check_inside_store(
    spark, plan_dir: Path, store_root: str, *, units: list[DeleteUnit] | None = None
) -> OutsideStore | None:
    """Check every row of ``plan_dir`` against the store rooted at ``store_root`` on the
    executors (no delete; the driver gets a count and at most ``OUTSIDE_ROWS_NAMED`` rows per
    task). None when every object lies inside."""
    sc = spark.sparkContext
    root = store.store_root(store_root)
    if units is None:
        units = plan_units(plan_dir, delete_tasks(sc))
    if not units:
        return None
    count = 0
    named: list[dict[str, Any]] = []
    for n, rows in (
        sc.parallelize(units, min(max(1, sc.defaultParallelism), len(units)))
        .mapPartitions(_check_units(root))
        .collect()
    ):
        count += n
        named += rows[: OUTSIDE_ROWS_NAMED - len(named)]
    return OutsideStore(store_root, count, named) if count else None


def refuse(out_dir: Path, code: str, message: str, exit_code: int) -> None:
    """Fail the job: ``ERROR_FILE`` in ``out_dir`` (read by the Celery task), the message on
    stderr, and ``SystemExit(exit_code)`` (the caller's ``finally`` stops the session)."""
    tmp = out_dir / f"{ERROR_FILE}.tmp"
    tmp.write_text(json.dumps({"error": code, "message": message}, indent=2))
    os.replace(tmp, out_dir / ERROR_FILE)
    print(f"REFUSED {code}: {message}", file=sys.stderr)
    raise SystemExit(exit_code)


def ensure_inside_store(
    spark,
    plan_dir: Path,
    store_root: str,
    out_dir: Path,
    *,
    units: list[DeleteUnit] | None = None,
) -> None:
    """:func:`check_inside_store`, and :func:`refuse` the job (exit ``REFUSED_OUTSIDE_STORE``)
    naming the offending rows when any lies outside."""
    outside = check_inside_store(spark, plan_dir, store_root, units=units)
    if outside is not None:
        refuse(out_dir, OutsideStore.CODE, outside.message(), REFUSED_OUTSIDE_STORE)


def add_store_root_argument(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--store-root",
        required=required,
        default=None,
        help="the remote store's root (s3://BUCKET/PREFIX) from configuration; objects outside "
        "it are never deleted: retention and purge quarantine the partitions of records naming "
        "one (quarantined/) and clean the rest, a plan given to delete_objects or orphans that "
        "names one fails the run before any delete",
    )


def add_delete_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dry-run`` and ``--store-root`` of a job that plans deletes (retention, purge,
    orphans); parse them with :func:`parse_delete_job_arguments`."""
    parser.add_argument("--dry-run", action="store_true")
    add_store_root_argument(parser, required=False)


def require_store_root(dry_run: bool, store_root: str | None) -> None:
    """Deletes stay inside the remote store, so a run that deletes needs the store's root from
    configuration; a dry run deletes nothing and may go without. ``ValueError`` otherwise."""
    if not dry_run and not store_root:
        raise ValueError("--store-root is required unless --dry-run: deletes stay inside the store")


def parse_delete_job_arguments(
    parser: argparse.ArgumentParser, argv: list[str] | None
) -> argparse.Namespace:
    """``parser``'s arguments (see :func:`add_delete_arguments`), refused as a usage error (exit
    2) before any Spark session when :func:`require_store_root` says no."""
    args = parser.parse_args(argv)
    try:
        require_store_root(args.dry_run, args.store_root)
    except ValueError as exc:
        parser.error(str(exc))
    return args


DELETE_TASKS_CONF = "spark.strata.delete.tasks"


def delete_tasks(sc) -> int:
    """How many tasks delete: ``spark.strata.delete.tasks`` if set, else 1 in local mode (its
    threads and calls in flight already keep S3 busy, see :func:`delete_planned_objects`), else
    ``defaultParallelism``."""
    configured = sc.getConf().get(DELETE_TASKS_CONF)
    if configured:
        return max(1, int(configured))
    if (sc.master or "").startswith("local"):
        return 1
    return max(1, sc.defaultParallelism)


DELETE_THREADS_CONF = "spark.strata.delete.threads"
DEFAULT_DELETE_THREADS = 2


def delete_threads(sc) -> int:
    """Threads that delete in each delete task: ``spark.strata.delete.threads``, default 2."""
    configured = sc.getConf().get(DELETE_THREADS_CONF)
    return max(1, int(configured)) if configured else DEFAULT_DELETE_THREADS


def _warm_up(_: int) -> None:
    """Start a Python worker per core with what the delete tasks import."""
    import pyarrow.parquet  # noqa: F401

    import spark_tasks.jobkit  # noqa: F401
