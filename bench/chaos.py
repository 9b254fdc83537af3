"""``make chaos``: the chaos suite (``tests/chaos``) on a private PostgreSQL and Redis, then its
table of faults by workflow kinds in ``bench/RESULTS.md``.

Usage: ``python -m bench.chaos [pytest args ...]``; a filtered run (e.g. ``-k kafka_cell``)
rewrites the cells it ran and keeps the others' last results, each marked with the run it is from,
so one row can be re-run without an hour for the rest. The suite stops PostgreSQL and kills
Redis, so it starts its own on free ports under ``.run/chaos`` and may run beside another suite. Not part of ``make test``: 70
cells, 30 of them on a ``kafka`` cluster (about 20 min on 2 cores; the 40 agents' cells
about 40 min). Each cell is pass / fail of correctness, never of speed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.run import BENCH_DIR, ROOT, _machine, assemble
from broker_agent.simulator.processes import free_ports
from config import services

KIND_ORDER = (
    "disable_tiering",
    "enable_tiering",
    "recover_log_dir",
    "expand_partitions",
    "shrink_partitions",
    "elect_leaders",
    "remote_purge",
    "orphan_sweep",
    # the same simulated cluster registered as a ``kafka`` cluster (#36): its kinds' rows
    "disable_tiering retain (kafka)",
    "disable_tiering delete (kafka)",
    "enable_tiering (kafka)",
    "recover_log_dir (kafka)",
    "expand_partitions (kafka)",
    "elect_leaders (kafka)",
)
FAULT_ORDER = (
    ("kill_boundaries", "worker SIGKILL at every step boundary"),
    ("kill_mid_step", "worker SIGKILL mid-step"),
    ("redis_restart", "Redis killed and restarted"),
    ("agent_down_30s", "one broker agent down 30 s"),
    ("postgres_down_10s", "PostgreSQL down 10 s"),
)


def _cell_text(row: dict | None) -> str:
    if row is None:
        return "not run"
    if not row["passed"]:
        return f"**FAILED** ({row['phase']}): {row['error'].replace('|', '/')[:160]}"
    kills = f", {row['kills']} kills" if row.get("kills") else ""
    exits = row.get("worker_exits", 0)
    exits_text = f", worker restarted {exits}x" if exits else ", no worker exit"
    return f"exactly once, {row.get('workflow_seconds', row['seconds'])} s{kills}{exits_text}"


def _row_name(row: dict) -> str | None:
    """The table's row of a result: its kind, or a kafka cell's (``test_kafka_cell``'s
    ``kafka_kind``, e.g. ``disable_tiering-retain``) as ``disable_tiering retain (kafka)``."""
    if "kafka_kind" in row:
        return f"{row['kafka_kind'].replace('-', ' ')} (kafka)"
    return row.get("kind")


KEPT = " (from the run of "


def _previous(path: Path) -> tuple[dict[tuple[str, str], str], str]:
    """The cells of the table ``path`` holds, by (kind, fault label), and the run they are from
    (its date and commit lines), so a filtered run keeps what it did not re-run."""
    if not path.exists():
        return {}, ""
    text = path.read_text().splitlines()
    header = next((line for line in text if line.startswith("| kind |")), None)
    if header is None:
        return {}, ""
    labels = [c.strip() for c in header.strip("|").split("|")][1:]
    cells: dict[tuple[str, str], str] = {}
    for line in text:
        if not line.startswith("| ") or line == header:
            continue
        parts = [c.strip() for c in line.strip().strip("|").split(" | ")]
        for label, cell in zip(labels, parts[1:], strict=False):
            cells[(parts[0], label)] = cell
    date = next((x.split(": ", 1)[1] for x in text if x.startswith("- date: ")), "?")
    commit = next((x.split(": ", 1)[1] for x in text if x.startswith("- commit: ")), "")
    return cells, f"{date[:16]}" + (f" at {commit}" if commit else "")


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "?"


def write_section(rows: list[dict], elapsed: float, machine: list[str]) -> Path:
    path = BENCH_DIR / "results" / "chaos.md"
    before, before_run = _previous(path)
    cells = {(_row_name(r), r["fault"]): r for r in rows if _row_name(r) and "fault" in r}
    passed = sum(1 for r in cells.values() if r["passed"])
    total = len(KIND_ORDER) * len(FAULT_ORDER)

    def text(kind: str, fault: str, label: str) -> str:
        if (kind, fault) in cells:
            return _cell_text(cells[(kind, fault)])
        kept = before.get((kind, label), "not run")
        if kept == "not run" or KEPT in kept:
            return kept
        return f"{kept}{KEPT}{before_run})"

    texts = {k: [text(k, f, label) for f, label in FAULT_ORDER] for k in KIND_ORDER}
    kept_count = sum(1 for row in texts.values() for t in row if KEPT in t)
    lines = [
        "## Chaos: every workflow kind under every fault",
        "",
        f"(`make chaos`, `tests/chaos`, {elapsed / 60:.1f} min; "
        + (
            f"{passed} of {len(cells)} cells run passed, {kept_count} of {total} kept from "
            "earlier runs as marked"
            if kept_count
            else f"{passed} of {total} cells passed"
        )
        + "; measured on:)",
        "",
        *machine,
        f"- commit: {_commit()}",
        "",
        "Method: one simulated cluster (3 brokers x 2 log dirs, real processes) under a steady "
        "keyed produce load (acks=all, 25 records/s); per cell a fresh topic, a real Celery "
        "worker with beat, the request planned by the worker and approved through the API, then "
        "the fault. Kills come from the test app's fault injector at the engine's step "
        "boundaries (`before`, `mid` = effect done but not recorded, `after`); for the Spark "
        "kinds the mid-step cell also SIGKILLs the worker while the deleting job's JVM runs. "
        "Redis, agent and PostgreSQL faults are brought in at a pause after the first step. "
        "A cell passes when the workflow succeeded exactly once: one completion per step, one "
        "audit event per effect and target, the kind's effect once on the cluster (one "
        "tiered-epoch increment, one ack per broker, ...), an intact audit chain, no Spark "
        "process left, no acknowledged record lost or duplicated (the workflow's topic and the "
        "load topic), and no worker exit unless the cell killed it. PostgreSQL and Redis are "
        "the suite's own (stopped and killed by the cells); the remote tier is S3 (the suite's "
        "private SeaweedFS), which the Spark kinds delete from with DeleteObjects. The rows "
        "marked (kafka) run the same cells on the same cluster registered as a `kafka` cluster "
        "(its brokers' Kafka listeners, SASL/PLAIN): the effect is read back over Kafka's "
        "protocol (configs, offsets, partition count) and, for tiering, as one tiered-epoch "
        "increment underneath; the agent fault stops one broker's process, its Kafka listener "
        "with it; the log-dir recovery's two manual steps (disk replaced, broker restarted) are "
        "done and confirmed by the test, and it runs with move_replicas (the cell topic's "
        "partitions on the failed dir reassigned to the third broker under a throttle, once).",
        "",
        "| kind | " + " | ".join(label for _, label in FAULT_ORDER) + " |",
        "|---|" + "---|" * len(FAULT_ORDER),
    ]
    for kind in KIND_ORDER:
        lines.append(f"| {kind} | " + " | ".join(texts[kind]) + " |")
    loads = [r["load"] for r in cells.values() if isinstance(r.get("load"), dict)]
    if loads:
        lines += [
            "",
            f"Load: {sum(x['acked'] for x in loads)} records acknowledged during the cells, "
            f"{sum(x['lost'] for x in loads)} lost, {sum(x['duplicated'] for x in loads)} "
            f"duplicated; {sum(x['unacknowledged_sends'] for x in loads)} sends were not "
            "acknowledged (a broker down) and are not counted"
            + (" (the cells of this run)." if kept_count else "."),
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str]) -> int:
    work = ROOT / ".run" / "chaos"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pg_port, redis_port = free_ports(2)  # distinct: chosen while both are bound
    database_url = f"postgres://postgres@127.0.0.1:{pg_port}/strata_chaos"
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    results = work / "results.jsonl"
    machine = _machine()
    started = time.monotonic()
    try:
        print(services.ensure_postgres(database_url, is_default=True, run_dir=work), flush=True)
        print(services.ensure_redis(redis_url, is_default=True, run_dir=work), flush=True)
        pg, rd = services.started("PostgreSQL"), services.started("Redis")
        if pg is None or rd is None:
            raise SystemExit("make chaos needs its own PostgreSQL and Redis; they did not start")
        stop_now = [a if a != "fast" else "immediate" for a in pg.stop]
        env = {
            **os.environ,
            # importing config set config.settings here; the suite needs the test app's
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "STRATA_CHAOS": "1",
            "STRATA_CHAOS_RESULTS": str(results),
            "STRATA_CHAOS_POSTGRES": json.dumps(
                {"start": pg.command("start"), "stop": services._as_user(stop_now, pg.user)}
            ),
            "STRATA_CHAOS_REDIS": json.dumps(
                {"start": rd.command("start"), "pidfile": str(work / "redis" / "redis.pid")}
            ),
        }
        cmd = [sys.executable, "-m", "pytest", "tests/chaos", "-p", "no:cacheprovider", *argv]
        code = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
    finally:
        services.stop_started()
    rows = (
        [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    )
    path = write_section(rows, time.monotonic() - started, machine)
    assemble()
    print(f"wrote {path} and {BENCH_DIR / 'RESULTS.md'}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
