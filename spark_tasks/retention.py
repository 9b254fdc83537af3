"""Remote retention, planned the way Kafka's RemoteLogManager would (rules in ``rules.py``).

    retention --inventory P --partitions P --out DIR [--now-ms T] [--in-flight-ms D]
              [--store-root URI] [--dry-run]

``--dry-run`` plans only; the Celery task runs it, publishes log start offsets and marks
DELETE_SEGMENT_STARTED, then deletes with ``delete_objects`` (Kafka's order, ``spark_tasks.remote``).
``--store-root`` is required unless ``--dry-run``; a partition naming an object outside it is
quarantined before anything is deleted (``spark_tasks.quarantine``).
"""

from __future__ import annotations

import argparse

from spark_tasks import jobkit, rules
from spark_tasks.plan_job import PlanKind, run_plan_job

JOB = "retention"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Plan (and execute) remote retention.")
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--partitions", required=True)
    parser.add_argument("--now-ms", type=int, default=None, help="fix the clock (ms since epoch)")
    parser.add_argument(
        "--in-flight-ms",
        type=int,
        default=rules.DEFAULT_IN_FLIGHT_MS,
        help="COPY_SEGMENT_STARTED younger than this is an upload in flight (default 1 h)",
    )
    jobkit.add_delete_arguments(parser)
    jobkit.add_common_arguments(parser)
    args = jobkit.parse_delete_job_arguments(parser, argv)
    if args.in_flight_ms < 0:
        parser.error("--in-flight-ms must be >= 0")
    spark = jobkit.session(JOB, args.master)
    try:
        run_plan_job(
            spark,
            PlanKind.RETENTION,
            args.inventory,
            args.partitions,
            args.out,
            now_ms=args.now_ms,
            in_flight_ms=args.in_flight_ms,
            dry_run=args.dry_run,
            store_root=args.store_root,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
