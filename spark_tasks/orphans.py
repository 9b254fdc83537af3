"""Objects in the remote store (S3) that no metadata record references.

    orphans --inventory P --remote-root s3://BUCKET/PREFIX --out DIR [--older-than 24h]
            [--now-ms T] [--store-root s3://BUCKET/PREFIX] [--dry-run]

The window may not be under 1 h (exit 2): an upload writes its object before its
COPY_SEGMENT_FINISHED record. Listing runs on the executors; ``__remote_log_metadata/`` is
never listed and records are never orphans (found by ``make chaos``: sweeping them made live
segments unreadable). An object is referenced when it, or a prefix above it, is the
``object_path`` of a record not DELETE_SEGMENT_FINISHED. An inventory with no reference while
the store holds objects is refused (exit 3). ``--store-root`` bounds deletes
(``jobkit.REFUSED_OUTSIDE_STORE``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks import jobkit, store
from spark_tasks.schema import PLAN_SCHEMA, PlanReason

JOB = "orphans"
MIN_WINDOW_MS = 3_600_000
#: a metadata record of the store: ``.../<partition>/<32 hex segment id>.json``
METADATA_RECORD = r"/[0-9]+/[0-9a-f]{32}\.json$"
DEFAULT_WINDOW = "24h"
REFUSED_EMPTY_INVENTORY = 3


def _first_level(root: str) -> list[tuple[str, bool]]:
    from spark_tasks import s3_listing

    return s3_listing.children(root)


def _second_level(uri_and_prefix: tuple[str, bool]) -> list[str]:
    uri, is_prefix = uri_and_prefix
    if not is_prefix:
        return [uri]
    from spark_tasks import s3_listing

    return [u for u, _ in s3_listing.children(uri)]


def _list_all(uri: str) -> Iterator[tuple[str, int, int]]:
    """Every object at or under ``uri`` (a partition prefix, or a stray object)."""
    from spark_tasks import s3_listing

    return s3_listing.walk(uri)


def _ancestors(uri: str, root: str) -> list[str]:
    """``uri`` and each prefix above it, up to (excluding) the remote root."""
    out = [uri]
    parent = uri.rpartition("/")[0]
    while parent.startswith(root + "/"):
        out.append(parent)
        parent = parent.rpartition("/")[0]
    return out


def run(
    spark,
    inventory: str,
    remote_root: str,
    out: str,
    *,
    older_than_ms: int,
    now_ms: int | None,
    dry_run: bool,
    store_root: str | None = None,
) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    jobkit.require_store_root(dry_run, store_root)
    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    root = store.store_root(remote_root)
    out_dir = jobkit.prepare_out(out)
    sc = spark.sparkContext

    first = _first_level(root)  # the only listing on the driver: the root's direct entries
    slices = max(1, min(len(first), sc.defaultParallelism * 4))
    second = sc.parallelize(first, slices).flatMap(_second_level)
    objects_rdd = (
        second.repartition(max(sc.defaultParallelism * 4, 1))
        .flatMap(_list_all)
        .map(lambda f: (f[0], f[1], f[2], _ancestors(f[0], root)))
    )
    schema = StructType(
        [
            StructField("path", StringType()),
            StructField("size_bytes", LongType()),
            StructField("mtime_ms", LongType()),
            StructField("keys", ArrayType(StringType())),
        ]
    )
    objects = spark.createDataFrame(objects_rdd, schema)
    staged_dir = out_dir / "_staged"
    objects.write.parquet(str(staged_dir))
    objects = spark.read.parquet(str(staged_dir))

    refs = (
        spark.read.parquet(inventory)
        .filter(F.col("state") != RemoteSegmentState.DELETE_SEGMENT_FINISHED)
        .filter(F.col("object_path").isNotNull())
        .select(F.col("object_path").alias("key"))
        .distinct()
    )
    ref_count = refs.count()
    object_count = objects.count()
    if ref_count == 0 and object_count > 0:
        print(
            f"refusing: the inventory references no object but {root} holds {object_count} objects",
            file=sys.stderr,
        )
        raise SystemExit(REFUSED_EMPTY_INVENTORY)

    referenced = (
        objects.select("path", F.explode("keys").alias("key"))
        .join(refs, "key", "left_semi")
        .select("path")
        .distinct()
    )
    unreferenced = objects.join(referenced, "path", "left_anti").filter(
        ~F.col("path").rlike(METADATA_RECORD)
    )
    cutoff = now_ms - older_than_ms
    orphans = unreferenced.filter(F.col("mtime_ms") < cutoff)
    plan = orphans.select(
        F.lit(None).cast("string").alias("segment_id"),
        F.lit(None).cast("string").alias("cluster"),
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(PlanReason.ORPHAN).alias("reason"),
        F.col("size_bytes"),
        F.col("path").alias("object_path"),
    ).select(*PLAN_SCHEMA.names)
    plan.write.parquet(str(out_dir / "plan"))
    counts = (
        spark.read.parquet(str(out_dir / "plan"))
        .agg(F.count("*").alias("n"), F.sum("size_bytes").alias("b"))
        .collect()[0]
    )
    young = unreferenced.filter(F.col("mtime_ms") >= cutoff).count()
    summary: dict[str, Any] = {
        "job": JOB,
        "dry_run": dry_run,
        "now_ms": now_ms,
        "remote_root": root,
        "older_than_ms": older_than_ms,
        "objects_listed": object_count,
        "references": ref_count,
        "segments": int(counts["n"]),
        "bytes": int(counts["b"] or 0),
        "by_reason": {
            PlanReason.ORPHAN: {"segments": int(counts["n"]), "bytes": int(counts["b"] or 0)}
        },
        "unreferenced_younger_than_window": young,
    }
    jobkit.shutil.rmtree(staged_dir, ignore_errors=True)
    if dry_run and store_root:
        jobkit.ensure_inside_store(spark, out_dir / "plan", store_root, out_dir)
    if not dry_run:
        timings: dict[str, float] = {}
        summary["deleted"] = jobkit.delete_planned_objects(
            spark, out_dir / "plan", out_dir, store_root=store_root, timings=timings
        )
        summary.update(timings)
    summary["seconds"] = round(time.monotonic() - started, 3)
    jobkit.write_summary(out_dir, summary)
    return summary


def _window_ms(text: str) -> int:
    """``--older-than``: a duration of at least 1h (younger objects may be uploads in flight)."""
    window = jobkit.parse_duration_ms(text)
    if window < MIN_WINDOW_MS:
        raise argparse.ArgumentTypeError(
            "must be at least 1h: younger objects may be uploads in flight"
        )
    return window


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Find (and delete) unreferenced remote objects.")
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--remote-root", required=True)
    parser.add_argument("--older-than", type=_window_ms, default=DEFAULT_WINDOW)
    parser.add_argument("--now-ms", type=int, default=None)
    jobkit.add_delete_arguments(parser)
    jobkit.add_common_arguments(parser)
    args = jobkit.parse_delete_job_arguments(parser, argv)
    spark = jobkit.session(JOB, args.master)
    try:
        run(
            spark,
            args.inventory,
            args.remote_root,
            args.out,
            older_than_ms=args.older_than,
            now_ms=args.now_ms,
            dry_run=args.dry_run,
            store_root=args.store_root,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
