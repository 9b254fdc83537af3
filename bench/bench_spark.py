"""Spark jobs at scale: retention plan vs a bare scan, driver memory.

Sizes come from the environment so the default ``make bench`` fits its budget and a full run is
one variable away: ``BENCH_SPARK_SEGMENTS`` (default ``1000000,10000000``, ~10 minutes on 2
shared cores), ``BENCH_SPARK_REPEATS`` (medians), ``BENCH_SPARK_MASTER``. The purge figure is
:mod:`bench.bench_s3`'s (the store is S3 only). The load average is printed beside the figures.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

TITLE = "Spark jobs: retention plan, driver memory"

#: The floor: one aggregate that reads every column the retention job reads (the partition key
#: and ``plan_job.SEGMENT_COLUMNS``), no shuffle of rows. Until 2026-11-23 it read five of them
#: (no string but ``state``), a floor of a smaller read than the job's; both are printed.
SCAN_JOB = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
df = spark.read.parquet(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2] == "five-columns":
    aggs = [F.count("*"), F.sum("size_bytes"), F.max("end_offset"),
            F.sum(F.size("segment_leader_epochs")), F.countDistinct("state")]
else:
    aggs = [F.count("*"), F.sum("size_bytes"), F.max("end_offset"), F.min("start_offset"),
            F.max("max_timestamp_ms"), F.max("event_timestamp_ms"), F.max("tiered_epoch"),
            F.sum(F.size("segment_leader_epochs")), F.countDistinct("state"),
            F.max(F.length("cluster")), F.max(F.length("topic")), F.max("partition"),
            F.sum(F.length("segment_id")), F.sum(F.length("object_path"))]
print("SCAN", df.agg(*aggs).collect())
spark.stop()
"""


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _env_sizes(name: str, default: str) -> list[int]:
    raw = os.environ.get(name, default)
    return [int(x) for x in raw.replace("_", "").split(",") if x.strip()]


def _load() -> str:
    try:
        return "load avg " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "load avg ?"


def _submit_script(script: Path, args: list[str], work: Path, master: str) -> tuple[float, int]:
    """Run an ad-hoc PySpark script with the same spark-submit; (seconds, peak driver RSS)."""
    from spark_tasks import submit

    work.mkdir(parents=True, exist_ok=True)
    env = submit._job_env(work / "progress.json", None)
    cmd = [
        str(submit.find_spark_submit()),
        "--master",
        master,
        "--driver-memory",
        "1g",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.local.dir={work}",
        str(script),
        *args,
    ]
    started = time.monotonic()
    with open(work / "scan.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
        peak = 0
        while proc.poll() is None:
            peak = max(peak, submit._tree_rss(proc.pid).driver)
            time.sleep(0.5)
    if proc.returncode:
        raise RuntimeError(f"scan failed, see {work / 'scan.log'}")
    return time.monotonic() - started, peak


def _retention(gen: Path, out: Path, work: Path, master: str):
    from spark_tasks.generate_inventory import DEFAULT_NOW_MS
    from spark_tasks.submit import spark_submit

    result = spark_submit(
        "retention",
        [
            "--inventory",
            str(gen / "inventory"),
            "--partitions",
            str(gen / "partitions"),
            "--now-ms",
            str(DEFAULT_NOW_MS),
            "--dry-run",
            "--out",
            str(out),
        ],
        work,
        master=master,
        out_dir=out,
        timeout_seconds=7200,
    )
    if not result.ok:
        raise RuntimeError(result.log_tail)
    return result


#: The memory runs' master: Spark's pseudo-cluster, one executor JVM of 2 cores and 1 GB (the
#: resources of local[2] with a 1g driver) in a process of its own, so that the driver's
#: processes hold the driver alone.
MEMORY_MASTER = "local-cluster[1,2,1024]"


def _driver_memory(gen: Path, out: Path, work: Path) -> dict[str, int]:
    """One more retention dry run, untimed, on ``MEMORY_MASTER``: the driver's peaks, in bytes.

    In local mode the driver's JVM is also the executor, so its memory follows the tasks' work,
    not what the driver holds. Here the executor is a JVM of its own, and the figures are the
    driver's: ``rss``, the peak RSS of the driver's processes (launcher, driver JVM, Python
    driver; submit._tree_rss leaves the executor JVM and the Python workers out); ``heap``, the
    driver JVM's live heap, from ``jcmd <pid> GC.class_histogram`` every 2 s, which runs a full
    GC first: what the JVM holds, not the garbage that heap-used and RSS figures include until
    the collector gets to it; ``python``, the Python driver's peak RSS."""
    import threading

    from spark_tasks import submit

    jcmd = Path(submit._java_home() or "/usr") / "bin" / "jcmd"
    mark = str(out).encode()  # on the driver's command lines only, never an executor's
    peaks = {"heap": 0, "python": 0}
    done = threading.Event()

    def processes() -> tuple[int | None, int | None]:
        jvm = py = None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not any(mark in a for a in args):
                continue
            if args[0].endswith(b"java"):
                jvm = int(entry)
            elif any(a.endswith(b"spark_tasks/retention.py") for a in args):
                py = int(entry)
        return jvm, py

    def sample() -> None:
        while not done.wait(2.0):
            jvm, py = processes()
            if py:
                try:
                    rss = int(Path(f"/proc/{py}/statm").read_text().split()[1])
                    peaks["python"] = max(peaks["python"], rss * os.sysconf("SC_PAGE_SIZE"))
                except (OSError, ValueError):
                    pass
            if jvm:
                histo = subprocess.run(
                    [str(jcmd), str(jvm), "GC.class_histogram"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout.strip()
                last = histo.splitlines()[-1].split() if histo else []
                if len(last) >= 3 and last[0] == "Total":
                    peaks["heap"] = max(peaks["heap"], int(last[2]))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        result = _retention(gen, out, work, MEMORY_MASTER)
    finally:
        done.set()
        thread.join()
    return {"rss": result.peak_driver_rss_bytes, "seconds": int(result.seconds), **peaks}


def _retention_rows(work: Path, master: str, sizes: list[int], repeats: int) -> list[dict]:
    from spark_tasks.generate_inventory import generate

    rows: list[dict] = []
    peaks: dict[int, int] = {}
    tree_peaks: dict[int, int] = {}
    driver: dict[int, dict[str, int]] = {}
    scan_script = work / "scan.py"
    scan_script.write_text(SCAN_JOB)
    for n in sizes:
        gen = work / f"gen-{n}"
        t0 = time.monotonic()
        generate(gen, segments=n, topics=max(1, n // 200_000), partitions_per_topic=20, seed=1)
        gen_s = time.monotonic() - t0
        # Plan and scan alternate, so that a change in the machine's load hits both.
        plan_s: list[float] = []
        scan_s_runs: list[float] = []
        five_s_runs: list[float] = []
        peak = scan_peak = tree_peak = 0
        for _ in range(repeats):
            result = _retention(gen, work / f"plan-{n}", work / f"run-{n}", master)
            plan_s.append(result.seconds)
            peak = max(peak, result.peak_driver_rss_bytes)
            tree_peak = max(tree_peak, result.peak_rss_bytes)
            seconds, rss = _submit_script(
                scan_script, [str(gen / "inventory")], work / f"scan-{n}", master
            )
            scan_s_runs.append(seconds)
            scan_peak = max(scan_peak, rss)
            seconds, _rss = _submit_script(
                scan_script,
                [str(gen / "inventory"), "five-columns"],
                work / f"scan5-{n}",
                master,
            )
            five_s_runs.append(seconds)
        driver[n] = _driver_memory(gen, work / f"plan-{n}", work / f"driver-{n}")
        plan_med, scan_s = statistics.median(plan_s), statistics.median(scan_s_runs)
        five_s = statistics.median(five_s_runs)
        runs = f"median of {repeats}, alternating with the scan"
        peaks[n] = peak
        tree_peaks[n] = tree_peak
        plan = result.summary or {}
        rows += [
            {
                "metric": f"retention plan, {n:,} segments ({master})",
                "value": f"{plan_med:.1f} s",
                "target": "",
                "method": "spark-submit retention --dry-run, process wall clock incl. JVM start, "
                f"{runs} (runs {', '.join(f'{x:.1f}' for x in plan_s)}; last "
                f"{plan.get('seconds', 0):.1f} s inside the job); plan "
                f"{plan.get('segments', 0):,} segments; inventory generated in {gen_s:.1f} s; "
                + _load(),
            },
            {
                "metric": f"bare Spark scan, {n:,} segments",
                "value": f"{scan_s:.1f} s",
                "target": "",
                "method": "spark-submit of one aggregate over every column the job reads "
                f"(wall clock incl. JVM start: the floor), {runs} "
                f"(runs {', '.join(f'{x:.1f}' for x in scan_s_runs)})",
            },
            {
                "metric": f"plan / scan ratio, {n:,} segments",
                "value": f"{plan_med / scan_s:.2f}x",
                "target": "<= 3x",
                "method": "the two medians above",
            },
            {
                "metric": f"plan / five-column scan ratio, {n:,} segments",
                "value": f"{plan_med / five_s:.2f}x",
                "target": "",
                "method": f"the earlier floor, an aggregate over five of the columns "
                f"(no string but state): {five_s:.1f} s, {runs} "
                f"(runs {', '.join(f'{x:.1f}' for x in five_s_runs)})",
            },
            {
                "metric": f"peak driver RSS, {n:,} segments",
                "value": f"{peaks[n] / 2**20:.0f} MiB",
                "target": "",
                "method": "max RSS of the driver's processes over the runs, sampled every 0.5 s: "
                "the spark-submit launcher, the JVM and the Python driver, not Spark's Python "
                "workers (the executors' side; submit._tree_rss). In local mode the JVM is also "
                "the executor, so this is an upper bound on the driver's; bare scan "
                f"{scan_peak / 2**20:.0f} MiB",
            },
            {
                "metric": f"peak process-tree RSS, {n:,} segments",
                "value": f"{tree_peaks[n] / 2**20:.0f} MiB",
                "target": "",
                "method": "the same with Spark's Python workers (the executors' side), whose "
                "memory follows the size of a task's shuffle partition",
            },
        ]
        shutil.rmtree(work / f"plan-{n}", ignore_errors=True)
        shutil.rmtree(gen, ignore_errors=True)
    for n in sizes:
        d = driver[n]
        rows.append(
            {
                "metric": f"peak driver memory, {n:,} segments",
                "value": f"{d['rss'] / 2**20:.0f} MiB",
                "target": "flat from 1M to 10M",
                "method": f"RSS of the driver's processes (launcher, driver JVM, Python driver "
                f"{d['python'] / 2**20:.0f} MiB) in one more retention dry run on "
                f"{MEMORY_MASTER}, whose executor is a JVM of its own ({d['seconds']} s, "
                "untimed); the driver JVM's live heap (jcmd GC.class_histogram, after a full GC, "
                f"every 2 s) peaked at {d['heap'] / 2**20:.0f} MiB (bench_spark._driver_memory)",
            }
        )
    if len(sizes) >= 2:
        small, big = min(sizes), max(sizes)
        rows += [
            {
                "metric": f"driver memory ratio {big:,} / {small:,}",
                "value": f"{driver[big]['rss'] / max(driver[small]['rss'], 1):.2f}",
                "target": "~1 (flat)",
                "method": "the two driver peaks above (live heap: "
                f"{driver[big]['heap'] / max(driver[small]['heap'], 1):.2f})",
            },
            {
                "metric": f"local[2] driver RSS ratio {big:,} / {small:,}",
                "value": f"{peaks[big] / max(peaks[small], 1):.2f}",
                "target": "",
                "method": "the two local[2] driver RSS peaks above: in local mode the JVM also "
                "runs the tasks, and its heap grows toward --driver-memory with their "
                "allocation rate, garbage included",
            },
        ]
    return rows


def run(ctx) -> list[dict]:
    master = os.environ.get("BENCH_SPARK_MASTER", "local[2]")
    sizes = _env_sizes("BENCH_SPARK_SEGMENTS", "1000000,10000000")
    repeats = max(1, _env_int("BENCH_SPARK_REPEATS", 3))
    work = Path(ctx.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return _retention_rows(work, master, sizes, repeats)
