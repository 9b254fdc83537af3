"""Simulated broker benchmarks: 200,000-partition synthetic snapshot (full and incremental,
gzip) and produce throughput of a real 3-broker simulated cluster (acks=all, RF 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import httpx

TITLE = "Simulated broker: synthetic snapshot and produce throughput"


def _cli(ctx, data, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ctx.root))
    env.pop("STRATA_AGENT_SECRET", None)
    env.pop("STRATA_AGENT_SECRET_FILE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "broker_agent", "sim", args[0], "--data", str(data), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ctx.root,
        check=True,
    )
    return proc.stdout.strip().splitlines()[-1]


def _synthetic(ctx) -> list[dict]:
    from broker_agent.contract.signing import audience_of, sign_headers

    data = ctx.work_dir / "agent-synthetic"
    shutil.rmtree(data, ignore_errors=True)
    rows = []
    try:
        urls = json.loads(
            _cli(
                ctx,
                data,
                "up",
                "--brokers",
                "60",
                "--log-dirs",
                "4",
                "--synthetic-topics",
                "100",
                "--partitions-per-topic",
                "2000",
                "--synthetic-tick-interval",
                "0",
            )
        )
        secret = (data / "secret").read_bytes().strip()
        base = urls["controller"]

        def get(path):
            h = sign_headers(secret, "GET", path, audience=audience_of(base))
            h["Accept-Encoding"] = "gzip"
            with httpx.Client(timeout=120) as c:
                started = time.perf_counter()
                with c.stream("GET", base + path, headers=h) as r:
                    raw = b"".join(r.iter_raw())
                elapsed = time.perf_counter() - started
                return r, raw, elapsed

        r, raw, cold = get("/v1/snapshot")
        uncompressed = int(r.headers.get("x-uncompressed-length", 0))
        _r, _raw, warm = get("/v1/snapshot")
        version = json.loads(__import__("gzip").decompress(raw))["version"]
        with httpx.Client() as c:
            c.post(
                base + "/v1/tick",
                headers=sign_headers(secret, "POST", "/v1/tick", audience=audience_of(base)),
            )
        _ri, rawi, inc = get(f"/v1/snapshot?since={version}")
        method = "GET /v1/snapshot, 60 brokers x 100 topics x 2000 partitions, gzip, loopback"
        rows += [
            {
                "metric": "full snapshot, gzip bytes",
                "value": len(raw),
                "target": "",
                "method": method,
            },
            {
                "metric": "full snapshot, uncompressed bytes",
                "value": uncompressed,
                "target": "",
                "method": method,
            },
            {
                "metric": "full snapshot, first request s",
                "value": round(cold, 3),
                "target": "",
                "method": method + " (serialise + gzip)",
            },
            {
                "metric": "full snapshot, cached s",
                "value": round(warm, 3),
                "target": "",
                "method": method + " (same version)",
            },
            {
                "metric": "incremental snapshot (1% changed), gzip bytes",
                "value": len(rawi),
                "target": "",
                "method": "GET /v1/snapshot?since=<version> after one tick (2,000 partitions changed)",
            },
            {
                "metric": "incremental snapshot (1% changed), s",
                "value": round(inc, 3),
                "target": "",
                "method": "same",
            },
        ]
        rows += _synthetic_metadata(ctx, data, urls, secret, get)
    finally:
        subprocess.run(
            [sys.executable, "-m", "broker_agent", "sim", "down", "--data", str(data)],
            cwd=ctx.root,
            env=dict(os.environ, PYTHONPATH=str(ctx.root)),
            capture_output=True,
        )
    return rows


def _synthetic_metadata(ctx, data, urls, secret, get) -> list[dict]:
    """Controller metadata of the synthetic cluster (what the console's sync pulls), full and
    after a 1% churn as a delta, plus all 60 broker snapshots, timed through the typed clients
    (request + gzip + pydantic parse), as the console uses them."""
    from broker_agent.contract.client import AgentClient, ControllerClient
    from broker_agent.contract.signing import audience_of, sign_headers

    r, raw, cold = get("/v1/metadata")
    _r, _raw, warm = get("/v1/metadata")
    with ControllerClient(urls["controller"], secret, timeout=120) as ctl:
        started = time.perf_counter()
        md = ctl.metadata()
        client_full = time.perf_counter() - started
        partitions = sum(len(t.partitions) for t in md.topics)
        churn = json.loads(_cli(ctx, data, "churn", "--fraction", "0.01", "--seed", "7"))
        _r_d, raw_d, delta_s = get(f"/v1/metadata?since={md.version}&delta=true")
        started = time.perf_counter()
        delta = ctl.metadata(since=md.version, delta=True)
        client_delta = time.perf_counter() - started
        changed = sum(len(t.partitions) for t in delta.topics)
    started = time.perf_counter()
    replicas = 0
    for url in urls["brokers"].values():
        with AgentClient(url, secret, timeout=120) as agent:
            replicas += len(agent.snapshot().replicas)
    snapshots_s = time.perf_counter() - started
    # The same 60 snapshots as the console's sync asks for them (format=tsv), after a tick so
    # that every agent renders cold again; bytes as they arrive uncompressed.
    httpx.post(
        urls["controller"] + "/v1/tick",
        headers=sign_headers(secret, "POST", "/v1/tick", audience=audience_of(urls["controller"])),
        timeout=60,
    ).raise_for_status()
    started = time.perf_counter()
    tsv_bytes = json_bytes = 0
    for url in urls["brokers"].values():
        with AgentClient(url, secret, timeout=120) as agent:
            tsv_bytes += len(agent.snapshot_tsv())
            json_bytes += len(agent.request("GET", "/v1/snapshot", raw=True).content)
    tsv_s = time.perf_counter() - started
    method = (
        f"GET /v1/metadata of the synthetic cluster ({partitions:,} partitions, 60 brokers), "
        "gzip, loopback"
    )
    return [
        {"metric": "metadata full, gzip bytes", "value": len(raw), "target": "", "method": method},
        {
            "metric": "metadata full, uncompressed bytes",
            "value": int(r.headers.get("x-uncompressed-length", 0)),
            "target": "",
            "method": method,
        },
        {
            "metric": "metadata full, first request s",
            "value": round(cold, 3),
            "target": "",
            "method": method + " (render + gzip)",
        },
        {
            "metric": "metadata full, cached s",
            "value": round(warm, 3),
            "target": "",
            "method": method + " (same version)",
        },
        {
            "metric": "metadata full via ControllerClient.metadata(), s",
            "value": round(client_full, 3),
            "target": "console full sync <= 20 s in total",
            "method": "request + gunzip + pydantic ClusterMetadata parse, cached answer",
        },
        {
            "metric": "metadata delta after 1% churn, gzip bytes",
            "value": len(raw_d),
            "target": "",
            "method": f"sim churn --fraction 0.01 ({churn['changed_partitions']} partitions: "
            "leader moves / ISR changes), then GET /v1/metadata?since=V&delta=true",
        },
        {
            "metric": "metadata delta after 1% churn, first request s",
            "value": round(delta_s, 3),
            "target": "",
            "method": "same",
        },
        {
            "metric": "metadata delta via ControllerClient.metadata(delta=True), s",
            "value": round(client_delta, 3),
            "target": "console incremental sync (1% changed) <= 2 s in total",
            "method": f"request + parse, cached answer; {changed} partitions in the delta",
        },
        {
            "metric": "60 full broker snapshots via AgentClient.snapshot(), s",
            "value": round(snapshots_s, 3),
            "target": "",
            "method": f"sequential, first request each (render + gzip + parse); {replicas:,} "
            "replicas",
        },
        {
            "metric": "60 full broker snapshots, format=tsv bytes / JSON bytes",
            "value": f"{tsv_bytes:,} / {json_bytes:,} ({tsv_bytes / max(1, json_bytes):.2f})",
            "target": "",
            "method": "AgentClient.snapshot_tsv() (what the console's sync loads with COPY) and "
            "the JSON answer of the same version, uncompressed",
        },
        {
            "metric": "60 full broker snapshots via AgentClient.snapshot_tsv() + JSON, s",
            "value": round(tsv_s, 3),
            "target": "",
            "method": "sequential, after a tick (cold): the rows (render + gzip, no parse) "
            "and then the same version's JSON bytes (render + gzip, no parse)",
        },
    ]


def _produce(ctx) -> list[dict]:
    data = ctx.work_dir / "agent-produce"
    shutil.rmtree(data, ignore_errors=True)
    try:
        _cli(ctx, data, "up", "--brokers", "3", "--log-dirs", "2")
        _cli(ctx, data, "create-topic", "bench", "--partitions", "6", "--replication-factor", "3")
        out = json.loads(
            _cli(
                ctx,
                data,
                "produce",
                "--topic",
                "bench",
                "--records",
                "200000",
                "--keyed",
                "--batch-size",
                "2000",
                "--value-size",
                "100",
            )
        )
        return [
            {
                "metric": "produce throughput, records/s",
                "value": out["records_per_second"],
                "target": "",
                "method": "sim produce: 200,000 keyed 100-byte records, batches of 2000, acks=all, "
                "idempotent, RF 3, 6 partitions, one client thread",
            }
        ]
    finally:
        subprocess.run(
            [sys.executable, "-m", "broker_agent", "sim", "down", "--data", str(data)],
            cwd=ctx.root,
            env=dict(os.environ, PYTHONPATH=str(ctx.root)),
            capture_output=True,
        )


def run(ctx) -> list[dict]:
    return _synthetic(ctx) + _produce(ctx)
