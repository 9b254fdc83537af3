"""Delete the objects of a reviewed plan, on the executors, in batches.

    delete_objects --plan DIR --store-root URI --out DIR

Reads ``plan/`` (of ``retention`` / ``purge`` / ``orphans``), deletes every ``object_path``
(already gone counts as deleted) and writes ``deleted/`` (``outcome``: deleted | already_gone |
refused | failed, ``error``) and ``summary.json``. The driver never holds the delete set. A plan
with any row outside ``--store-root`` (from configuration) is refused before anything is deleted:
exit ``jobkit.REFUSED_OUTSIDE_STORE`` (4) and ``error.json`` naming the rows.
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
