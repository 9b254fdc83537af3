"""Per-topic segment counts and bytes by state over a remote-segment inventory.

    spark-submit spark_tasks/inventory_stats.py --inventory P --out DIR
    python -m spark_tasks.inventory_stats --inventory P --out DIR

Writes ``DIR/report/`` (Parquet: cluster, topic, state, segments, bytes) and ``DIR/summary.json``
(totals, and per topic and state). The per-topic rows are few (topics x 4 states), so the driver
collects only those.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from spark_tasks import jobkit

JOB = "inventory_stats"


def run(spark, inventory: str, out: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    out_dir = jobkit.prepare_out(out)
    started = time.monotonic()
    inv = spark.read.parquet(inventory)
    stats = inv.groupBy("cluster", "topic", "state").agg(
        F.count("*").alias("segments"), F.sum("size_bytes").alias("bytes")
    )
    stats.coalesce(1).write.parquet(str(out_dir / "report"))
    rows = spark.read.parquet(str(out_dir / "report")).collect()
    topics: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        by_state = topics.setdefault(row["topic"], {})
        by_state[row["state"]] = {"segments": int(row["segments"]), "bytes": int(row["bytes"] or 0)}
    summary = {
        "job": JOB,
        "segments": sum(v["segments"] for t in topics.values() for v in t.values()),
        "bytes": sum(v["bytes"] for t in topics.values() for v in t.values()),
        "topics": topics,
        "seconds": round(time.monotonic() - started, 3),
    }
    jobkit.write_summary(out_dir, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Segments and bytes per topic and state.")
    parser.add_argument("--inventory", required=True)
    jobkit.add_common_arguments(parser)
    args = parser.parse_args(argv)
    spark = jobkit.session(JOB, args.master)
    try:
        run(spark, args.inventory, args.out)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
