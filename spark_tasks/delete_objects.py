"""Delete the objects of a reviewed plan, on the executors, in batches.

    delete_objects --plan DIR --store-root URI --out DIR

Reads ``plan/`` (as written by ``retention`` / ``purge`` / ``orphans``), deletes every
``object_path`` batch by batch on the executors (an object already gone counts as deleted) and
writes ``DIR/deleted/`` (the plan's columns + ``outcome``: deleted | already_gone | refused |
failed, and ``error``) and ``summary.json`` with the counts, ``seconds`` (the job after the
session started) and ``delete_seconds`` (the delete stage alone). The driver never holds the
delete set.

``--store-root`` is the remote store's root from configuration (never derived from the plan).
A plan with any row outside it is refused before anything is deleted: the job exits with
``jobkit.REFUSED_OUTSIDE_STORE`` (4) and writes ``DIR/error.json`` naming the offending rows
(see ``jobkit.delete_planned_objects``).
"""

from __future__ import annotations

import argparse
import time

from spark_tasks import jobkit

JOB = "delete_objects"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Delete a plan's objects on the executors.")
    parser.add_argument("--plan", required=True, help="the plan directory (…/plan)")
    jobkit.add_store_root_argument(parser, required=True)
    jobkit.add_common_arguments(parser)
    args = parser.parse_args(argv)
    spark = jobkit.session(JOB, args.master)
    try:
        started = time.monotonic()
        out = jobkit.prepare_out(args.out)
        timings: dict[str, float] = {}
        counts = jobkit.delete_planned_objects(
            spark, jobkit.Path(args.plan), out, store_root=args.store_root, timings=timings
        )
        jobkit.write_summary(
            out,
            {
                "job": JOB,
                "deleted": counts,
                "objects": sum(counts.values()),
                "seconds": round(time.monotonic() - started, 3),
                **timings,
            },
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
