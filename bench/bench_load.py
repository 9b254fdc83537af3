"""Load (#39): 50 signed-in users on ``make run``'s stack, with the synthetic 200,000-partition
cluster registered beside the demo.

Runs ``python -m config.run`` itself (production-shaped, its own port, run dir, scratch
PostgreSQL database and SeaweedFS) plus a synthetic fleet registered as ``synthetic``; once both
have synced, locust (:mod:`bench.load_locustfile`) signs users in through the login form and
measures a ``BENCH_LOAD_SECONDS`` window of browsers polling live panels, API scripts, a
workflow pair and a Prometheus scraper. Times are client side over loopback, with locust on the
same 2 cores as the stack. Environment: ``BENCH_LOAD_USERS``, ``BENCH_LOAD_SECONDS``,
``BENCH_LOAD_TOPICS``, ``BENCH_LOAD_REDIS_URL`` (flushed), ``DATABASE_URL``. Every process is
stopped at the end whatever happened; each wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg
import redis

from bench.bench_console import _sim

TITLE = (
    "Load: 50 signed-in users on make run's stack, with the synthetic 200,000-partition "
    "cluster beside the demo (locust, 3 minutes)"
)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
TARGET_P95_MS = 500.0
#: Bounds of every wait, in seconds (a loaded 2-core machine migrates a fresh database in ~2 min).
UP_SECONDS, SYNC_SECONDS, STOP_SECONDS = 900, 900, 240
WORKFLOWS = [
    {"kind": "disable_tiering", "cluster": "local", "topic": "demo.payments", "policy": "retain"},
    {"kind": "enable_tiering", "cluster": "local", "topic": "demo.payments"},
]


def _free_port() -> int:
    from config.seaweedfs import free_port

    return free_port()


def _sim_down(data: Path) -> None:
    if (data / "cluster.json").exists():
        subprocess.run(
            [sys.executable, "-m", "broker_agent", "sim", "down", "--data", str(data)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )


def _drop_database(base: str, db: str) -> None:
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout


def _api(port: int, token: str, path: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


#: The floor: each of these, asked FLOOR_REPEATS times by one client in a row, before locust.
FLOOR_REPEATS = 20


def _floor(port: int, token: str, paths: dict[str, str]) -> tuple[list, float]:
    """``(rows, seconds)``: each route of ``paths`` (label -> path) timed one request at a time
    by one token-authenticated client, on the same stack just before the users arrive: what a
    route costs with nobody else asking, beside which the loaded figures read."""
    rows: list = []
    started = time.monotonic()
    for label, path in paths.items():
        for _ in range(FLOOR_REPEATS):
            t0 = time.monotonic()
            error = ""
            try:
                _api(port, token, path)
            except (OSError, ValueError) as exc:
                error = str(exc)
            rows.append((label, t0, (time.monotonic() - t0) * 1000, error))
    return rows, time.monotonic() - started


def _wait(what: str, seconds: float, ready) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(2)
    raise RuntimeError(f"{what} not within {seconds:.0f} s")


class Stack:
    """``python -m config.run`` on a run dir, port, database and Redis database of its own."""

    def __init__(self, work: Path, port: int, database_url: str, redis_url: str) -> None:
        self.run_dir = work / "run"
        self.port = port
        self.out, self.err = work / "make-run.out", work / "make-run.err"
        self.env = {
            **os.environ,
            "STRATA_RUN_DIR": str(self.run_dir),
            "PORT": str(port),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DEBUG": "0",
            "STRATA_STOP_GRACE_SECONDS": "30",
            "PYTHONUNBUFFERED": "1",
        }
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "config.run"], cwd=ROOT, env=self.env,
                stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_up(self) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"make run exited ({self.proc.returncode}): {self.terminal()}")
            return "Strata is up" in self.out.read_text()

        _wait("make run up", UP_SECONDS, up)

    def terminal(self) -> str:
        return (self.out.read_text() + self.err.read_text())[-4000:]

    def manage_env(self) -> dict[str, str]:
        """For manage.py beside the stack: its database as the owner, its audit key."""
        return {**self.env, "DEBUG": "1"}

    def stop(self) -> None:
        """Ctrl-C (config.run stops its processes and the demo cluster), bounded."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGINT)  # a second Ctrl-C: no grace
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
        _sim_down(self.run_dir / "sim")


def _cluster_info(port: int, token: str, name: str) -> dict:
    """The names the users pick from: a sample of topics (several pages) and every log dir."""
    first = _api(port, token, f"/api/v1/clusters/{name}/topics")
    topics = [t["name"] for t in first["results"]]
    for page in sorted({max(1, first["num_pages"] * k // 5) for k in range(1, 5)} - {1}):
        topics += [
            t["name"]
            for t in _api(port, token, f"/api/v1/clusters/{name}/topics?page={page}")["results"]
        ]
    brokers = _api(port, token, f"/api/v1/clusters/{name}/brokers")["brokers"]
    dirs = [f"{b['id']}:{d['name']}" for b in brokers for d in b["log_dirs"]]
    return {"name": name, "topics": topics, "dirs": dirs, "topic_count": first["count"]}


def _locust(work: Path, stack: Stack, config: dict, users: int, seconds: int) -> dict:
    results = work / "locust-results.json"
    results.unlink(missing_ok=True)
    config = {**config, "results": str(results), "window_seconds": seconds}
    path = work / "locust-config.json"
    path.write_text(json.dumps(config))
    os.chmod(path, 0o600)  # the demo passwords
    bound = 300 + seconds  # the ramp (sign-ins at 2 a second) and the stop, with room
    cmd = [
        sys.executable, "-m", "locust", "-f", str(BENCH_DIR / "load_locustfile.py"),
        "--headless", "--users", str(users + 1), "--spawn-rate", "2",
        "--run-time", f"{bound}s", "--stop-timeout", "10", "--host", stack.url,
        "--csv", str(work / "locust"), "--only-summary", "--loglevel", "WARNING",
    ]  # fmt: skip
    with (work / "locust.log").open("w") as log:
        subprocess.run(
            cmd, cwd=ROOT, env={**os.environ, "BENCH_LOAD_CONFIG": str(path)},
            stdout=log, stderr=subprocess.STDOUT, timeout=bound + 120, check=False,
        )  # fmt: skip
    if not results.exists():
        raise RuntimeError(f"locust wrote no results: {(work / 'locust.log').read_text()[-3000:]}")
    return json.loads(results.read_text())


def _percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, -(-len(sorted_ms) * q // 100))
    return sorted_ms[int(rank) - 1]


def _route_row(route: str, rows: list, window: float, target: str) -> dict:
    times = sorted(r[2] for r in rows)
    errors = [r[3] for r in rows if r[3]]
    p95 = _percentile(times, 95)
    met = not errors and (p95 <= TARGET_P95_MS or not target.startswith("0 errors, p95"))
    return {
        "route": route,
        "requests": len(rows),
        "req/s": f"{len(rows) / window:.2f}",
        "p50 ms": f"{_percentile(times, 50):.0f}",
        "p95 ms": f"{p95:.0f}",
        "p99 ms": f"{_percentile(times, 99):.0f}",
        "errors": f"{len(errors)}" + (f" ({errors[0][:80]})" if errors else ""),
        "target": target,
        "met": "yes" if met else "NO",
    }


def rows_for(result: dict, *, users: int, synthetic: dict, started_utc: str) -> list[dict]:
    start, end = result["window"]
    if start is None:
        raise RuntimeError("locust never finished spawning the users (no measured window)")
    window = end - start
    inside = [r for r in result["requests"] if start <= r[1] <= end]
    before = [r for r in result["requests"] if r[1] < start and r[3]]
    target = f"0 errors, p95 <= {TARGET_P95_MS:.0f} ms"
    by_route: dict[str, list] = {}
    for r in inside:
        by_route.setdefault(r[0], []).append(r)
    routes = [_route_row(name, rows, window, target) for name, rows in sorted(by_route.items())]
    everything = _route_row("all routes", inside, window, target)
    everything["method"] = (
        f"{users} signed-in users + 1 machine, {window:.0f} s window from {started_utc} UTC; "
        f"see `bench/bench_load.py` (make run's stack; synthetic cluster: "
        f"{synthetic['topic_count']:,} topics, {len(synthetic['dirs'])} log dirs); "
        f"{len(before)} errors before the window; 1-minute load average "
        f"{result['load'][0]:.1f} before locust, {result['load'][1]:.1f} at the end "
        f"({os.cpu_count()} cores)"
    )
    rows = [everything]
    if result["sign_ins"]:
        rows.append(
            _route_row(
                "sign-in (login form GET + POST, during the ramp, before the window)",
                result["sign_ins"],
                max(1.0, start - min(r[1] for r in result["sign_ins"])),
                "0 errors (PBKDF2 by design)",
            )
        )
    for wf in result["workflows"]:
        rows.append(
            {
                "route": f"workflow #{wf.get('id', '?')} {wf['kind']} {wf['topic']}",
                "requests": "request + approve (web forms)",
                "errors": "0" if wf["state"] == "succeeded" else wf["state"],
                "target": "succeeded",
                "met": "yes" if wf["state"] == "succeeded" else "NO",
                "method": f"request -> planned {wf.get('planned_seconds', '?')} s, "
                f"approve -> {wf['state']} {wf.get('approve_to_end_seconds', '?')} s",
            }
        )
    if not result["workflows"]:
        rows.append({"route": "workflow", "errors": "none requested", "met": "NO"})
    floor_rows, floor_seconds = result.get("floor", ([], 0.0))
    floor = {}
    for r in floor_rows:
        floor.setdefault(r[0], []).append(r)
    for label, rs in floor.items():
        row = _route_row(
            f"floor: {label}, one client, {FLOOR_REPEATS} in a row before the users",
            rs,
            max(floor_seconds, 1e-3),
            "the floor (no target)",
        )
        row["req/s"] = ""
        rows.append(row)
    return rows + routes


def run(ctx) -> list[dict]:
    users = int(os.environ.get("BENCH_LOAD_USERS", "50"))
    seconds = int(os.environ.get("BENCH_LOAD_SECONDS", "180"))
    topics = int(os.environ.get("BENCH_LOAD_TOPICS", "2000"))
    redis_url = os.environ.get("BENCH_LOAD_REDIS_URL", "redis://127.0.0.1:6379/12")
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    base, name = server.rsplit("/", 1)
    db = f"{name.split('?')[0]}_bench_load"
    work = ctx.work_dir
    work.mkdir(parents=True, exist_ok=True)
    syn_dir = work / "synthetic"
    for data in (syn_dir, work / "run" / "sim"):  # an interrupted run's leftovers
        _sim_down(data)
    shutil.rmtree(work / "run", ignore_errors=True)
    shutil.rmtree(syn_dir, ignore_errors=True)
    _drop_database(base, db)
    redis.Redis.from_url(redis_url).flushdb()

    from config import seaweedfs

    with seaweedfs.private_store(work / "s3", "bench-load"):
        stack = None
        try:
            out = _sim(
                syn_dir, "up", "--brokers", "60", "--log-dirs", "4",
                "--synthetic-topics", str(topics), "--partitions-per-topic", "100",
            )  # fmt: skip
            urls = json.loads(out.strip().splitlines()[-1])
            stack = Stack(work, _free_port(), f"{base}/{db}", redis_url)
            stack.wait_up()
            env = stack.manage_env()
            _manage(env, "register_cluster", "synthetic", "--controller", urls["controller"],
                    "--secret-file", urls.get("secret_file") or str(syn_dir / "secret"))  # fmt: skip
            token = _manage(env, "issue_token", "viewer", "--label", "bench-load", "--days", "1")
            token = token.strip().splitlines()[-1]

            def synced() -> bool:
                clusters = _api(stack.port, token, "/api/v1/clusters")["clusters"]
                done = {c["name"] for c in clusters if c["synced_at"]}
                return {"local", "synthetic"} <= done

            _wait("the first sync of both clusters", SYNC_SECONDS, synced)
            passwords = json.loads((stack.run_dir / "demo-users.json").read_text())
            config = {
                "passwords": passwords,
                "reader_logins": ["viewer", "operator", "approver"],
                "metrics_token": token,
                "clusters": {
                    "big": _cluster_info(stack.port, token, "synthetic"),
                    "demo": _cluster_info(stack.port, token, "local"),
                },
                "workflows": WORKFLOWS,
                "workflow_first_after": 30,
                "workflow_interval": 1800,
            }
            big = config["clusters"]["big"]
            floor = _floor(
                stack.port,
                token,
                {
                    "/api/v1/health": "/api/v1/health",
                    "/api/v1/clusters/{name}/brokers (synthetic)": "/api/v1/clusters/synthetic/brokers",
                    "/api/v1/clusters/{name}/topics/{topic} (synthetic)": (
                        f"/api/v1/clusters/synthetic/topics/{big['topics'][0]}"
                    ),
                },
            )
            started_utc = time.strftime("%H:%M:%S", time.gmtime())
            load_before = os.getloadavg()[0]
            result = _locust(work, stack, config, users, seconds)
            result["load"] = (load_before, os.getloadavg()[0])
            result["floor"] = floor
        finally:
            if stack is not None:
                stack.stop()
            _sim_down(syn_dir)
            _drop_database(base, db)
            redis.Redis.from_url(redis_url).flushdb()
    print(stack.terminal() if stack else "", flush=True)
    return rows_for(
        result, users=users, synthetic=config["clusters"]["big"], started_utc=started_utc
    )
