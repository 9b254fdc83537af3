"""Storage per topic and tier: bytes, segments, partitions, oldest and newest record timestamps.

    storage_report --inventory P --partitions P --out DIR [--now-ms T]

Writes ``DIR/report/`` (cluster, topic, tier, bytes, segments, partitions, oldest_timestamp_ms,
newest_timestamp_ms) and ``summary.json``; the Celery task loads the rows into
``StorageSnapshot`` (one per day, cluster, topic and tier).

Tiers (decisions, the KIPs define no report):
- ``remote``: COPY_SEGMENT_FINISHED segments (the readable remote log); oldest / newest are the
  smallest / largest ``max_timestamp_ms``.
- ``local``: the bytes not yet tiered (``local_untiered_bytes`` of the partition state, the only
  local figure the contract carries); segments and timestamps are unknown (null).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from broker_agent.contract.choices import RemoteSegmentState
from spark_tasks import jobkit

JOB = "storage_report"
COLUMNS = (
    "cluster",
    "topic",
    "tier",
    "bytes",
    "segments",
    "partitions",
    "oldest_timestamp_ms",
    "newest_timestamp_ms",
)


def run(spark, inventory: str, partitions: str, out: str, now_ms: int | None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out_dir = jobkit.prepare_out(out)
    inv = spark.read.parquet(inventory)
    remote = (
        inv.filter(F.col("state") == RemoteSegmentState.COPY_SEGMENT_FINISHED)
        .groupBy("cluster", "topic")
        .agg(
            F.sum("size_bytes").cast("bigint").alias("bytes"),
            F.count("*").cast("bigint").alias("segments"),
            F.countDistinct("partition").cast("int").alias("partitions"),
            F.min("max_timestamp_ms").alias("oldest_timestamp_ms"),
            F.max("max_timestamp_ms").alias("newest_timestamp_ms"),
        )
        .withColumn("tier", F.lit("remote"))
    )
    local = (
        spark.read.parquet(partitions)
        .groupBy("cluster", "topic")
        .agg(
            F.sum("local_untiered_bytes").cast("bigint").alias("bytes"),
            F.count("*").cast("int").alias("partitions"),
        )
        .withColumn("tier", F.lit("local"))
        .withColumn("segments", F.lit(None).cast("bigint"))
        .withColumn("oldest_timestamp_ms", F.lit(None).cast("bigint"))
        .withColumn("newest_timestamp_ms", F.lit(None).cast("bigint"))
    )
    report = remote.select(*COLUMNS).unionByName(local.select(*COLUMNS))
    report.write.parquet(str(out_dir / "report"))
    totals = {
        row["tier"]: {
            "bytes": int(row["bytes"] or 0),
            "segments": int(row["segments"] or 0),
            "topics": int(row["topics"]),
        }
        for row in spark.read.parquet(str(out_dir / "report"))
        .groupBy("tier")
        .agg(
            F.sum("bytes").alias("bytes"),
            F.sum("segments").alias("segments"),
            F.count("*").alias("topics"),
        )
        .collect()
    }
    summary = {
        "job": JOB,
        "now_ms": now_ms,
        "tiers": totals,
        "seconds": round(time.monotonic() - started, 3),
    }
    jobkit.write_summary(out_dir, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Storage per topic and tier.")
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--partitions", required=True)
    parser.add_argument("--now-ms", type=int, default=None)
    jobkit.add_common_arguments(parser)
    args = parser.parse_args(argv)
    spark = jobkit.session(JOB, args.master)
    try:
        run(spark, args.inventory, args.partitions, args.out, args.now_ms)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
