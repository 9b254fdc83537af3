"""Purge on the S3 store: ``delete_objects`` against a plain DeleteObjects loop (issue #13).

On the tests' store (``STRATA_S3_ENDPOINT_URL``, else a SeaweedFS started here):
``BENCH_S3_OBJECTS`` objects are deleted by ``spark-submit delete_objects`` as the Celery task
runs it (its ``delete_seconds``), then an identical key set by a plain boto3 loop of 1,000-key
batches with the job's parallelism (the floor). Ratio = floor / job seconds, target >= 0.7;
``BENCH_S3_REPEATS`` runs, medians. The load average is printed beside the figures.
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TITLE = "Object store (S3): purge vs a DeleteObjects loop"

PUT_THREADS = 64


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} cores"


def _keys(n: int) -> list[str]:
    return [f"t-{i % 4}/{(i // 4) % 25}/{i:020d}-{i:08x}.log" for i in range(n)]


def _put_all(client, bucket: str, prefix: str, keys: list[str]) -> float:
    def one(key: str) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=b"segment-bytes")

    started = time.monotonic()
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for _ in pool.map(one, keys):
            pass
    return time.monotonic() - started


def _count(client, bucket: str, prefix: str) -> int:
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix + "/"
    ):
        n += page.get("KeyCount", 0)
    return n


def _plan(plan_dir: Path, uris: list[str]) -> None:
    from spark_tasks.schema import PLAN_SCHEMA

    shutil.rmtree(plan_dir, ignore_errors=True)
    plan_dir.mkdir(parents=True)
    n = len(uris)
    table = pa.table(
        {
            "segment_id": [f"{i:032x}" for i in range(n)],
            "cluster": ["bench"] * n,
            "topic": [f"t-{i % 4}" for i in range(n)],
            "partition": [(i // 4) % 25 for i in range(n)],
            "reason": ["purge_disabled"] * n,
            "size_bytes": [13] * n,
            "object_path": uris,
        },
        schema=PLAN_SCHEMA,
    )
    pq.write_table(table, plan_dir / "part-0.parquet")


def _floor(client, bucket: str, prefix: str, keys: list[str], concurrency: int) -> float:
    from spark_tasks.s3_delete import KEYS_PER_CALL

    chunks = [keys[i : i + KEYS_PER_CALL] for i in range(0, len(keys), KEYS_PER_CALL)]

    def one(chunk: list[str]) -> int:
        answer = client.delete_objects(
            Bucket=bucket,
            Delete={"Objects": [{"Key": f"{prefix}/{k}"} for k in chunk], "Quiet": True},
        )
        if answer.get("Errors"):
            raise RuntimeError(f"floor: {answer['Errors'][:3]}")
        return len(chunk)

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        done = sum(pool.map(one, chunks))
    elapsed = time.monotonic() - started
    assert done == len(keys)
    return elapsed


def run(ctx) -> list[dict]:
    from config import seaweedfs

    master = os.environ.get("BENCH_SPARK_MASTER", "local[2]")
    n = _env_int("BENCH_S3_OBJECTS", 100_000)
    repeats = max(1, _env_int("BENCH_S3_REPEATS", 1))
    work = Path(ctx.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    own = not os.environ.get("STRATA_S3_ENDPOINT_URL")
    with seaweedfs.private_store(work, f"bench-{secrets.token_hex(3)}") as config:
        return _measure(config, master, n, repeats, work, own)


def _measure(config, master: str, n: int, repeats: int, work: Path, own: bool) -> list[dict]:
    from spark_tasks import jobkit, s3_delete
    from spark_tasks.submit import spark_submit

    client = config.client(max_pool_connections=PUT_THREADS)
    bucket, base = config.location.bucket, config.location.prefix
    keys = _keys(n)
    # the job's concurrency in this master: delete tasks x threads x calls in flight
    concurrency = 1 * jobkit.DEFAULT_DELETE_THREADS * s3_delete.CALLS_IN_FLIGHT
    if not master.startswith("local"):
        concurrency *= 2
    phase, e2e, floors, puts = [], [], [], []
    for i in range(repeats):
        job_prefix, floor_prefix = f"{base}/job{i}", f"{base}/floor{i}"
        puts.append(_put_all(client, bucket, job_prefix, keys))
        _plan(work / "plan", [f"s3://{bucket}/{job_prefix}/{k}" for k in keys])
        out = work / f"deleted-{i}"
        result = spark_submit(
            "delete_objects",
            ["--plan", str(work / "plan"), "--store-root", f"s3://{bucket}/{job_prefix}",
             "--out", str(out)],
            work / f"delete-run-{i}", master=master, out_dir=out,
        )  # fmt: skip
        if not result.ok:
            raise RuntimeError(result.log_tail)
        summary = result.summary or {}
        if summary.get("deleted", {}).get("deleted") != n or _count(client, bucket, job_prefix):
            raise RuntimeError(f"delete_objects left objects: {summary.get('deleted')}")
        phase.append(float(summary["delete_seconds"]))
        e2e.append(result.seconds)
        puts.append(_put_all(client, bucket, floor_prefix, keys))
        floors.append(_floor(client, bucket, floor_prefix, keys, concurrency))
        if _count(client, bucket, floor_prefix):
            raise RuntimeError("the floor loop left objects")
    phase_s, e2e_s, floor_s = (statistics.median(x) for x in (phase, e2e, floors))
    put_rate = n / statistics.median(puts)
    where = "SeaweedFS 4.48 started by the bench" if own else config.describe()
    runs = f"median of {repeats}"
    return [
        {
            "metric": f"purge {n:,} S3 objects, delete phase",
            "value": f"{n / phase_s:,.0f} deletes/s",
            "target": "",
            "method": f"delete_objects ({master}) on {where}: `delete_seconds` {phase_s:.2f} s "
            f"(runs {', '.join(f'{x:.2f}' for x in phase)}), {runs}; DeleteObjects of 1,000 "
            f"keys, {concurrency} calls in flight; {_load()}",
        },
        {
            "metric": f"purge {n:,} S3 objects, end to end",
            "value": f"{n / e2e_s:,.0f} deletes/s",
            "target": "",
            "method": f"spark-submit wall clock incl. JVM start ({e2e_s:.1f} s), {runs}",
        },
        {
            "metric": "DeleteObjects loop (floor), same keys",
            "value": f"{n / floor_s:,.0f} deletes/s",
            "target": "",
            "method": f"boto3, batches of 1,000, {concurrency} threads ({floor_s:.2f} s), "
            f"an identical key set under another prefix, {runs}",
        },
        {
            "metric": "purge / DeleteObjects floor (delete phase)",
            "value": f"{floor_s / phase_s:.2f}",
            "target": ">= 0.7",
            "method": "deletes/s ratio, the job's delete stage vs the bare loop",
        },
        {
            "metric": "PUT rate while preparing (not a target)",
            "value": f"{put_rate:,.0f} objects/s",
            "target": "",
            "method": f"{PUT_THREADS} threads of put_object, 13-byte bodies",
        },
    ]
