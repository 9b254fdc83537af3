"""Run every ``bench/bench_*.py`` module and write ``bench/RESULTS.md``.

Usage: ``python -m bench.run [name ...]`` (names filter modules, e.g. ``agent``). Each module has a
``TITLE`` and a ``run(ctx)`` returning rows (dicts). Figures are measured here, on this machine;
nothing in ``make test`` asserts a timing.

Each module's section is kept in ``bench/results/<module>.md`` with the machine and date it was
measured on, and ``RESULTS.md`` is assembled from all of them: running one module refreshes its
section and keeps the others' last figures.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent


@dataclasses.dataclass
class Context:
    work_dir: Path
    root: Path = ROOT


def _machine() -> list[str]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return [
        f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- host: {platform.node()} ({platform.platform()})",
        f"- cpu: {cpu}, {os.cpu_count()} cores; memory: {mem_kb // 1024} MiB",
        f"- python: {sys.version.split()[0]}; java: {java[0] if java else 'not found'}",
    ]


def _table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["(no rows)"]
    cols: list[str] = []
    for row in rows:
        cols.extend(c for c in row if c not in cols)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
    return out


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The figures are measured with the development settings, as before DEBUG defaulted to off
    # (#38); BENCH=load starts make run's production-shaped stack itself.
    os.environ.setdefault("DEBUG", "1")
    modules = sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))
    if argv:
        modules = [m for m in modules if any(a in m for a in argv)]
    work = ROOT / ".run" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    sections = BENCH_DIR / "results"
    sections.mkdir(exist_ok=True)
    machine = _machine()
    failed = 0
    for name in modules:
        mod = importlib.import_module(f"bench.{name}")
        title = getattr(mod, "TITLE", name)
        print(f"== {title}", flush=True)
        started = time.monotonic()
        try:
            rows = mod.run(Context(work_dir=work / name))
            body = _table(rows)
        except Exception:  # a failing benchmark is reported, the others still run
            failed += 1
            body = ["```", traceback.format_exc(), "```"]
        elapsed = time.monotonic() - started
        section = [f"## {title}", "", f"(module `bench/{name}.py`, {elapsed:.1f} s; measured on:)", "",
                   *machine, "", *body, ""]  # fmt: skip
        (sections / f"{name}.md").write_text("\n".join(section) + "\n")
        print("\n".join(body), flush=True)
    assemble()
    print(f"wrote {BENCH_DIR / 'RESULTS.md'}")
    return 1 if failed else 0


def assemble() -> None:
    """Write RESULTS.md from every module's last section in ``bench/results/``."""
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m bench.run`) and, for the chaos table, `make chaos`.",
        "Each section is its module's last run and says when and on which machine it was",
        "measured (kept in `bench/results/`).",
        "",
    ]
    lines += [part.read_text() for part in sorted((BENCH_DIR / "results").glob("bench_*.md"))]
    chaos = BENCH_DIR / "results" / "chaos.md"  # `make chaos` (bench/chaos.py)
    if chaos.exists():
        lines.append(chaos.read_text())
    (BENCH_DIR / "RESULTS.md").write_text("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
