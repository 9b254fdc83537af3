"""Fleet scale (#17): the synthetic 300-broker x 4-dir, 1,000,000-partition cluster.

``run(ctx)`` starts ``sim up --synthetic-fleet`` and measures, in children on the bench database:
``sync`` (first syncs, after a 1% churn, unchanged; peak RSS = the worker's), ``pages`` (every
read page and API route, p50 / p95, queries, the web process's peak RSS), ``history``
(:mod:`bench.scale_history`) and ``workflows`` (:mod:`bench.scale_workflows`). Scale:
``SCALE_BENCH_PARTITIONS`` on ``SCALE_BENCH_BROKERS`` brokers.
"""

from __future__ import annotations

import os

from bench.bench_console import measure, rows_for
from bench.scale_history import history_rows
from bench.scale_workflows import run_scale_workflows

TITLE = "Fleet scale: sync, pages and routes (synthetic 300 brokers x 4 dirs, 1,000,000 partitions)"

LOG_DIRS = 4


def run(ctx) -> list[dict]:
    partitions = int(os.environ.get("SCALE_BENCH_PARTITIONS", "1000000"))
    brokers = int(os.environ.get("SCALE_BENCH_BROKERS", "300"))
    result = measure(
        ctx,
        brokers=brokers,
        log_dirs=LOG_DIRS,
        layout=["--synthetic-fleet", str(partitions)],
        partitions=partitions,
        history=True,
    )
    rows = rows_for(
        result,
        scale=f"{brokers} brokers x {LOG_DIRS} dirs, {partitions:,} partitions in topics of 1 to "
        "10,000 partitions (FLEET_MIX), RF 3",
        brokers=brokers,
        full_target="<= 60 s",
        incremental_target="<= 3 s",
        memory_target="<= 2048 MiB",
    )
    rows.extend(history_rows(result["sync"]["history"]))
    wf = run_scale_workflows(ctx, brokers=brokers, log_dirs=LOG_DIRS, partitions=partitions)
    for key, label, target, topic in (
        ("disable", "disable_tiering (retain)", "<= 15 s", wf["disable_topic"]),
        ("expand", "expand_partitions", "<= 30 s", wf["expand_topic"]),
    ):
        r = wf[key]
        done = r.get("approve_to_end_seconds")
        rows.append(
            {
                "metric": f"{label} end to end",
                "value": f"{done:.1f} s ({r['state']})" if done is not None else r["state"],
                "target": target,
                "method": f"{topic} on the {brokers}-broker fleet cluster (first sync "
                f"{wf['sync_seconds']:.0f} s with manage.py); approval -> {r['state']} through "
                f"one celery worker (prefork, concurrency 2), {r.get('steps', 0)} steps "
                f"({r.get('attempts', 0)} attempts), run alone {r.get('run_seconds', 0):.1f} s; "
                f"pre-flight (request -> planned) {r['plan_seconds']:.1f} s"
                + (f"; error: {r['error']}" if r.get("error") else ""),
            }
        )
    return rows
