"""Purge after a KIP-950 delete-policy disablement (rules in ``rules.plan_purge``).

    purge --inventory P --partitions P --out DIR [--store-root URI] [--dry-run]

For partitions whose ``disable_policy`` is ``delete``: every segment with ``tiered_epoch <
purge_below_tiered_epoch`` not yet DELETE_SEGMENT_FINISHED (reason ``purge_disabled``); the new
log start offset is at least the local log start offset; segments of the current tiered epoch are
never touched. Same outputs as ``retention``, and the same ``--store-root`` rule: a partition
with a record outside the store is quarantined (``quarantined/``), the rest purged.
"""

from __future__ import annotations

import argparse

from spark_tasks import jobkit
from spark_tasks.plan_job import PlanKind, run_plan_job

JOB = "purge"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Purge remote data below a disablement's epoch.")
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--partitions", required=True)
    jobkit.add_delete_arguments(parser)
    jobkit.add_common_arguments(parser)
    args = jobkit.parse_delete_job_arguments(parser, argv)
    spark = jobkit.session(JOB, args.master)
    try:
        run_plan_job(
            spark,
            PlanKind.PURGE,
            args.inventory,
            args.partitions,
            args.out,
            dry_run=args.dry_run,
            store_root=args.store_root,
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
