"""Console: sync and server times against the synthetic 60-broker, 200,000-partition cluster.

``run(ctx)`` starts ``python -m broker_agent sim up --synthetic-topics ...`` (one process
serving the controller and 60 agents), then measures in child processes on a dedicated database
(``strata_bench``, created when missing) so the dev database is never touched:

- ``sync``: three full syncs (fresh inventory each, the median reported), then incremental syncs after ``sim churn --fraction
  0.01`` (1% of the partitions change leader / ISR / offsets), and one with nothing changed;
  the child's peak RSS (``ru_maxrss``) is the worker's peak memory for a sync of that size.
- ``pages``: every page and API endpoint through Django's test client in-process (server time:
  URL resolution, queries, template rendering; no network), 5 warm-ups then 40 timed requests.

Scale: ``CONSOLE_BENCH_TOPICS`` x 100 partitions (default 2000 -> 200,000) on 60 brokers.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TITLE = "Console: sync and page / API server time (synthetic 60 brokers, 200,000 partitions)"

ROOT = Path(__file__).resolve().parent.parent
BROKERS = 60
LOG_DIRS = 4
PARTITIONS_PER_TOPIC = 100
BENCH_DB = "strata_bench"
#: Full syncs measured (the median is reported: one run varies by ~2 s with PostgreSQL's
#: checkpoints, a full sync writes ~400 MB of WAL).
FULL_SYNC_RUNS = 3


def _bench_db(url: str) -> str:
    """The database the children use: the one ``DATABASE_URL`` names if it is a bench database
    (``strata_bench...``, so parallel checkouts do not share one), else ``strata_bench``."""
    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    return name if name.startswith(BENCH_DB) else BENCH_DB


def _sim(data: Path, *args: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "broker_agent", "sim", *args, "--data", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sim {args[0]} failed: {proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _child(mode: str, info: Path) -> dict:
    env = dict(os.environ)
    base = env.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + _bench_db(base)
    env["LOG_LEVEL"] = "WARNING"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_console", mode, str(info)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"bench child {mode} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(
    ctx,
    *,
    brokers: int,
    log_dirs: int,
    layout: list[str],
    partitions: int,
    history: bool = False,
) -> dict:
    """Start the synthetic cluster (``sim up`` with ``layout``: its ``--synthetic-*`` flags),
    then run the sync child and the pages child against it; ``{"sync": ..., "pages": ...}``.
    Shared by this module (200,000 partitions) and ``bench_scale`` (the 1,000,000 fleet, which
    also measures the history's sample and roll-up: ``history``, :mod:`bench.scale_history`)."""
    data = ctx.work_dir / "sim"
    data.mkdir(parents=True, exist_ok=True)
    _sim(data, "down", timeout=60) if (data / "cluster.json").exists() else None
    out = _sim(
        data,
        "up",
        "--brokers",
        str(brokers),
        "--log-dirs",
        str(log_dirs),
        *layout,
        "--synthetic-tick-interval",
        "0",
    )
    urls = json.loads(out.strip().splitlines()[-1])
    controller = urls["controller"]
    controller = controller["url"] if isinstance(controller, dict) else controller
    info = ctx.work_dir / "sim.json"
    info.write_text(
        json.dumps(
            {
                "controller": controller,
                "secret_file": urls.get("secret_file") or str(data / "secret"),
                "data": str(data),
                "partitions": partitions,
                "history": history,
            }
        )
    )
    try:
        return {"sync": _child("sync", info), "pages": _child("pages", info)}
    finally:
        _sim(data, "down", timeout=120)


def rows_for(
    result: dict,
    *,
    scale: str,
    brokers: int,
    full_target: str,
    incremental_target: str,
    memory_target: str = "",
) -> list[dict]:
    """The report rows of :func:`measure`'s result (``scale`` names the cluster)."""
    sync, pages = result["sync"], result["pages"]
    rows = [
        {
            "metric": "full sync",
            "value": f"{sync['full_s']:.1f} s (median of {len(sync['full_runs'])}: "
            f"{', '.join(f'{x:.1f}' for x in sync['full_runs'])})",
            "target": full_target,
            "method": f"{scale}; a newly registered cluster's first sync (emptied tables), "
            f"metadata + {brokers} agent snapshots (format=tsv), COPY + merge, incl. the "
            f"ANALYZE after it; {sync['full_replicas']:,} replicas"
            + (
                f", {sync['groups']:,} consumer groups with {sync['positions']:,} committed "
                "positions (the coordinator's answer as rows)"
                if sync.get("groups")
                else ""
            )
            + ". Every run's agents render "
            f"their answers cold (a `sim churn --fraction 0.001` between runs), and all "
            f"{brokers} agents and the controller are one process on the same cores as "
            f"PostgreSQL",
        },
        {
            "metric": "incremental sync, 1% changed",
            "value": f"{statistics.median(sync['incremental_s']):.2f} s (median of "
            f"{len(sync['incremental_s'])}: {', '.join(f'{x:.2f}' for x in sync['incremental_s'])})",
            "target": incremental_target,
            "method": "`sim churn --fraction 0.01` (leader / ISR / offsets of "
            f"{sync['churned']:,} partitions"
            + (", and commits of 1% of the consumer groups" if sync.get("groups") else "")
            + ") then one sync (metadata delta + snapshots since"
            + (" + groups since" if sync.get("groups") else "")
            + ")",
        },
        {
            "metric": "sync, nothing changed",
            "value": f"{sync['idle_s']:.2f} s",
            "target": "",
            "method": f"metadata since + {brokers} snapshots since, nothing to write",
        },
        {
            "metric": "worker peak memory (syncs)",
            "value": f"{sync['peak_rss_mb']:.0f} MiB",
            "target": memory_target,
            "method": "ru_maxrss of the process that ran every sync above (Django + sync only)",
        },
    ]
    if "peak_rss_mb" in pages:
        rows.append(
            {
                "metric": "web process peak memory (pages)",
                "value": f"{pages.pop('peak_rss_mb'):.0f} MiB",
                "target": "",
                "method": "ru_maxrss of the process that served every page and route below",
            }
        )
    for name, r in pages.items():
        if "error" in r:
            rows.append({"metric": f"GET {name}", "value": r["error"], "target": "200"})
            continue
        rows.append(
            {
                "metric": f"GET {name}",
                "value": f"p50 {r['p50']:.1f} ms / p95 {r['p95']:.1f} ms",
                "target": "p95 <= 150 ms",
                "method": f"server time in-process (Django test client), {r['n']} requests, "
                f"{r['queries']} SQL queries",
            }
        )
    return rows


def run(ctx) -> list[dict]:
    topics = int(os.environ.get("CONSOLE_BENCH_TOPICS", "2000"))
    n = topics * PARTITIONS_PER_TOPIC
    layout = [
        "--synthetic-topics",
        str(topics),
        "--partitions-per-topic",
        str(PARTITIONS_PER_TOPIC),
    ]
    result = measure(ctx, brokers=BROKERS, log_dirs=LOG_DIRS, layout=layout, partitions=n)
    return rows_for(
        result,
        scale=f"{BROKERS} brokers, {n:,} partitions, RF 3",
        brokers=BROKERS,
        full_target="<= 20 s",
        incremental_target="<= 2 s",
    )


# -- child processes ---------------------------------------------------------------------------


def _setup(info: dict):
    import psycopg

    url = os.environ["DATABASE_URL"]
    base, db = url.rsplit("/", 1)[0], _bench_db(url)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db}"')
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _child_sync(info: dict) -> dict:
    import resource

    _setup(info)
    from django.db import connection

    from console.models import Cluster, ConsumerGroup, GroupOffset, Replica
    from console.sync import do_sync_cluster

    full_runs = []
    for i in range(FULL_SYNC_RUNS):
        if i:  # a new version: the agents render their answers cold again, as on the first run
            _sim(Path(info["data"]), "churn", "--fraction", "0.001", "--seed", str(100 + i))
        with connection.cursor() as cur:
            # Partitions, replicas and group positions have no FK constraints (sync-owned), so
            # CASCADE does not reach them: they are named.
            cur.execute(
                "TRUNCATE console_cluster, console_partition, console_replica, "
                "console_groupoffset CASCADE"
            )
        cluster = Cluster.objects.create(
            name="bench", controller_url=info["controller"], secret_ref=info["secret_file"]
        )
        started = time.perf_counter()
        run = do_sync_cluster(cluster, full=True).run
        full_runs.append(time.perf_counter() - started)
        if run.errors:
            raise RuntimeError(f"full sync errors: {run.errors}")
    full_s = statistics.median(full_runs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    full_replicas = Replica.objects.filter(cluster=cluster).count()
    groups = ConsumerGroup.objects.filter(cluster=cluster).count()
    positions = GroupOffset.objects.filter(cluster=cluster).count()
    incremental, churned = [], 0
    for seed in range(3):
        out = _sim(Path(info["data"]), "churn", "--fraction", "0.01", "--seed", str(seed))
        churned = json.loads(out.strip().splitlines()[-1]).get("changed_partitions", 0)
        started = time.perf_counter()
        run = do_sync_cluster(cluster).run
        incremental.append(time.perf_counter() - started)
        if run.errors:
            raise RuntimeError(f"incremental sync errors: {run.errors}")
    started = time.perf_counter()
    do_sync_cluster(cluster)
    idle_s = time.perf_counter() - started
    peak = max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    extra = {}
    if info.get("history"):  # after the peak: its generated worst-case hour is not a sync's
        from bench.scale_history import measure_history

        extra["history"] = measure_history(cluster)
    return {
        **extra,
        "full_s": full_s,
        "full_runs": full_runs,
        "full_replicas": full_replicas,
        "groups": groups,
        "positions": positions,
        "incremental_s": incremental,
        "churned": churned,
        "idle_s": idle_s,
        "peak_rss_mb": peak,
    }


def _child_pages(info: dict) -> dict:
    _setup(info)
    import resource

    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.db.models import Count
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from console.models import GroupOffset, Topic

    # the web process as gunicorn runs it: its WSGI module loaded (which freezes what the
    # loaded application holds out of the collector's full passes)
    importlib.import_module("config.wsgi")

    # admin: every page answers (the status page, the request form); the queries a page makes
    # do not depend on the role beyond the session's one group lookup
    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name="viewer"), Group.objects.get(name="admin"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    topic = (
        Topic.objects.filter(cluster__name="bench")
        .order_by("name")
        .values_list("name", flat=True)[1]
    )
    urls = {
        "/ (overview)": "/",
        "/topics/": "/topics/",
        "/topics/ filtered, sorted by remote bytes": "/topics/?tiered_state=ENABLED&sort=-remote_bytes",
        "/topics/ page 30": "/topics/?page=30",
        "/topics/<cluster>/<topic>/": f"/topics/bench/{topic}/",
        "/topics/<cluster>/<topic>/?key=": f"/topics/bench/{topic}/?key=customer-42",
        "/brokers/": "/brokers/",
        "/topology/": "/topology/",
        "/topology/ page 2000": "/topology/?page=2000",
        "/topology/?offline_only": "/topology/?offline_only=true",
        "htmx refresh of /brokers/ live panel": (
            "/brokers/",
            {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "brokers-live"},
        ),
        "/api/v1/clusters": "/api/v1/clusters",
        "/api/v1/clusters/{name}/brokers": "/api/v1/clusters/bench/brokers",
        "/api/v1/clusters/{name}/topics": "/api/v1/clusters/bench/topics?page=7",
        "/api/v1/clusters/{name}/topics/{topic}": f"/api/v1/clusters/bench/topics/{topic}",
        "/api/v1/clusters/{name}/partition-for-key": f"/api/v1/clusters/bench/partition-for-key?topic={topic}&key=k1",
        "/metrics": "/metrics",
        # the rest of the read pages and routes (#17: every page and route at fleet size)
        "/status/": "/status/",
        "/topics/ last page": "/topics/?page=100000",
        "/topics/<cluster>/<topic>/ page 20": f"/topics/bench/{topic}/?page=20",
        "/brokers/?dir= (one dir's replicas)": "/brokers/?dir=1:logdir-0",
        "/workflows/": "/workflows/",
        f"/workflows/new/ (disable_tiering of {topic})": (
            f"/workflows/new/?kind=disable_tiering&cluster=bench&topic={topic}"
        ),
        "/audit/": "/audit/",
        "/spark/": "/spark/",
        "/api/v1/clusters/{name}/groups": "/api/v1/clusters/bench/groups",
        "/api/v1/clusters/{name}/topics/{topic}/history": (
            f"/api/v1/clusters/bench/topics/{topic}/history?range=24h"
        ),
        "/api/v1/clusters/{name}/brokers/{b}/log-dirs/{d}/history": (
            "/api/v1/clusters/bench/brokers/1/log-dirs/logdir-0/history?range=24h"
        ),
        "/api/v1/clusters/{name}/groups last page": "/api/v1/clusters/bench/groups?page=100000",
        "/api/v1/workflows": "/api/v1/workflows",
        "/api/v1/audit": "/api/v1/audit",
    }
    busiest = (  # the topic whose consumer groups hold the most positions (#17's fleet)
        GroupOffset.objects.filter(cluster__name="bench")
        .values("topic_name")
        .annotate(n=Count("partition"))
        .order_by("-n")
        .values_list("topic_name", flat=True)
        .first()
    )
    if busiest:
        urls["/topics/<cluster>/<topic>/ (most group positions)"] = f"/topics/bench/{busiest}/"
        urls["/api/v1/clusters/{name}/topics/{topic} (most group positions)"] = (
            f"/api/v1/clusters/bench/topics/{busiest}"
        )
    out = {}
    for name, spec in urls.items():
        url, headers = spec if isinstance(spec, tuple) else (spec, {})
        status = client.get(url, **headers).status_code
        if status != 200:  # reported in its row; the other pages are still measured
            out[name] = {"error": f"HTTP {status}"}
            continue
        for _ in range(4):
            client.get(url, **headers)
        times = []
        for _ in range(40):
            started = time.perf_counter()
            response = client.get(url, **headers)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        with CaptureQueriesContext(connection) as ctx:
            client.get(url, **headers)
        times.sort()
        out[name] = {
            "p50": statistics.median(times),
            "p95": times[int(0.95 * len(times)) - 1],
            "n": len(times),
            "queries": len(ctx.captured_queries),
        }
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    info = json.loads(Path(path).read_text())
    result = _child_sync(info) if mode == "sync" else _child_pages(info)
    print(json.dumps(result))
