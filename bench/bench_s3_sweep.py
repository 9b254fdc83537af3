"""Orphan sweep on the S3 store against a bare parallel listing of the same prefix (issue #13).

Method: ``BENCH_SWEEP_OBJECTS`` (default 1,000,000) small objects in the RSM layout,
``<prefix>/t<k>-<topic id>/<partition>/<offset:020d>-<segment id>.log`` (20 topics x 50
partitions), in a SeaweedFS of the bench's own whose data is kept in ``.run/bench-seaweedfs``
(writing a million objects takes a while; a later run finds them and writes nothing) — or the
store ``STRATA_S3_ENDPOINT_URL`` names. An inventory references 90 % of them; the other 10 % are
orphans. The job: ``spark-submit orphans --dry-run`` exactly as the Celery task runs it (its
``seconds``: the driver's wall time from the first listing to the plan and summary written,
JVM start excluded). The **floor**: the same partition prefixes listed by a plain boto3
ListObjectsV2 loop with as many threads as the job has cores (local[2]: 2), every key counted.
Ratio = job seconds / floor seconds; target <= 2. The machine is shared; the load average is
printed beside the figures.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.bench_s3 import _env_int, _load  # the S3 benches' shared knobs

TITLE = "Object store (S3): orphan sweep vs a bare parallel listing"

TOPICS, PARTITIONS = 20, 50
PUT_THREADS = 64
HOUR_MS = 3_600_000


def _layout(n: int) -> list[tuple[str, str, int, str]]:
    """(topic, topic id, partition, key below the prefix) of each of ``n`` objects."""
    out = []
    per = max(1, n // (TOPICS * PARTITIONS))
    for i in range(n):
        t, p, k = (i // per) % TOPICS, (i // (per * TOPICS)) % PARTITIONS, i
        topic, tid = f"t{t:02d}", f"{t:022x}"
        out.append((topic, tid, p, f"{topic}-{tid}/{p}/{k * 100:020d}-{k:032x}.log"))
    return out


def _prefixes(base: str) -> list[str]:
    return [f"{base}/t{t:02d}-{t:022x}/{p}/" for t in range(TOPICS) for p in range(PARTITIONS)]


def _count_listing(client, bucket: str, prefixes: list[str], threads: int) -> tuple[int, float]:
    def one(prefix: str) -> int:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sum(page.get("KeyCount", 0) for page in pages)

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(one, prefixes))
    return total, time.monotonic() - started


def _populate(client, bucket: str, base: str, layout, have: int) -> float:
    """Write the objects not there yet (a previous run's are kept); returns PUTs/s or 0."""
    if have == len(layout):
        return 0.0
    missing = layout  # a PUT of an object already there just replaces it

    def one(item) -> None:
        client.put_object(Bucket=bucket, Key=f"{base}/{item[3]}", Body=b"segment-bytes")

    started = time.monotonic()
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for _ in pool.map(one, missing):
            pass
    return len(missing) / (time.monotonic() - started)


def _inventory(path: Path, bucket: str, base: str, layout) -> int:
    """Every tenth object unreferenced (an orphan); returns the references."""
    from spark_tasks.schema import INVENTORY_SCHEMA

    rows = [item for i, item in enumerate(layout) if i % 10]
    n = len(rows)
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "cluster": ["bench"] * n,
            "topic": [r[0] for r in rows],
            "topic_id": [r[1] for r in rows],
            "partition": [r[2] for r in rows],
            "segment_id": [r[3].rsplit("-", 1)[1][:-4] for r in rows],
            "start_offset": [0] * n,
            "end_offset": [99] * n,
            "max_timestamp_ms": [0] * n,
            "size_bytes": [13] * n,
            "segment_leader_epochs": [[{"epoch": 0, "start_offset": 0}]] * n,
            "tiered_epoch": [0] * n,
            "state": ["COPY_SEGMENT_FINISHED"] * n,
            "object_path": [f"s3://{bucket}/{base}/{r[3]}" for r in rows],
            "event_timestamp_ms": [0] * n,
        },
        schema=INVENTORY_SCHEMA,
    )
    pq.write_table(table, path / "part-0.parquet")
    return n


def run(ctx) -> list[dict]:
    from config import seaweedfs

    n = _env_int("BENCH_SWEEP_OBJECTS", 1_000_000)
    repeats = max(1, _env_int("BENCH_SWEEP_REPEATS", 1))
    master = os.environ.get("BENCH_SPARK_MASTER", "local[2]")
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    own = not os.environ.get("STRATA_S3_ENDPOINT_URL")
    home = Path(__file__).resolve().parents[1] / ".run" / "bench-seaweedfs"
    home.mkdir(parents=True, exist_ok=True)
    with seaweedfs.private_store(home, f"bench-sweep-{n}") as config:
        return _measure(config, n, repeats, master, work, own)


def _measure(config, n: int, repeats: int, master: str, work: Path, own: bool) -> list[dict]:
    from spark_tasks.submit import spark_submit

    client = config.client(max_pool_connections=PUT_THREADS)
    bucket, base = config.location.bucket, config.location.prefix
    layout = _layout(n)
    prefixes = _prefixes(base)
    threads = int(master[len("local[") : -1]) if master.startswith("local[") else 2
    have, _ = _count_listing(client, bucket, prefixes, 16)
    put_rate = _populate(client, bucket, base, layout, have)
    refs = _inventory(work / "inventory", bucket, base, layout)
    jobs, floors = [], []
    for i in range(repeats):
        listed, floor_s = _count_listing(client, bucket, prefixes, threads)
        if listed != n:
            raise RuntimeError(f"the floor listed {listed} objects, not {n}")
        floors.append(floor_s)
        out = work / f"sweep-{i}"
        result = spark_submit(
            "orphans",
            ["--inventory", str(work / "inventory"), "--remote-root", config.location.uri,
             "--out", str(out), "--older-than", "1h",
             "--now-ms", str(int(time.time() * 1000) + 2 * HOUR_MS), "--dry-run"],
            work / f"sweep-run-{i}", master=master, out_dir=out,
        )  # fmt: skip
        if not result.ok:
            raise RuntimeError(result.log_tail)
        summary = result.summary or {}
        if summary.get("objects_listed") != n or summary.get("segments") != n - refs:
            raise RuntimeError(f"the sweep found {summary}")
        jobs.append(float(summary["seconds"]))
    job_s, floor_s = statistics.median(jobs), statistics.median(floors)
    where = "SeaweedFS 4.48 started by the bench" if own else config.describe()
    runs = f"median of {repeats}"
    prepared = (
        f"written now at {put_rate:,.0f} PUT/s ({PUT_THREADS} threads)"
        if put_rate
        else "kept from an earlier run"
    )
    return [
        {
            "metric": f"orphan sweep of {n:,} S3 objects ({n - refs:,} orphans), dry run",
            "value": f"{job_s:.1f} s ({n / job_s:,.0f} objects/s)",
            "target": "",
            "method": f"orphans ({master}) on {where}: its `seconds` (runs "
            f"{', '.join(f'{x:.1f}' for x in jobs)}), {runs}; {TOPICS} topics x {PARTITIONS} "
            f"partitions listed on the executors; objects {prepared}; {_load()}",
        },
        {
            "metric": "bare parallel listing (floor), same prefixes",
            "value": f"{floor_s:.1f} s ({n / floor_s:,.0f} keys/s)",
            "target": "",
            "method": f"boto3 ListObjectsV2 paginator per partition prefix, {threads} threads "
            f"(the job's cores), {runs}",
        },
        {
            "metric": "orphan sweep / bare listing",
            "value": f"{job_s / floor_s:.2f}x",
            "target": "<= 2",
            "method": "wall time ratio (listing, anti-join with the inventory, plan written)",
        },
    ]
