"""Run a job module with pyspark's own ``spark-submit`` and capture what happened.

The ``spark-submit`` inside the installed pyspark runs ``spark_tasks/<job>.py``, so the Spark
that runs a job is the one the code was written against; ``SPARK_MASTER`` decides where. The
package goes along as a ``--py-files`` zip. The environment is rebuilt from a short allow-list,
so Django's secrets never reach the job. Output streams to ``<work>/spark.log``, progress comes
from ``<work>/progress.json``, the Spark UI is off (no port clashes). The job runs under
:mod:`spark_tasks.guard`, so its whole tree stops with the submitting process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from broker_agent.contract import objectstore

__all__ = ["SubmitResult", "find_spark_submit", "spark_submit"]

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
LOG_TAIL_LINES = 80
TIMEOUT_EXIT_CODE = -9
GUARD = PACKAGE_DIR / "guard.py"


@dataclasses.dataclass
class SubmitResult:
    exit_code: int
    log_path: Path
    log_tail: str
    timed_out: bool
    seconds: float
    progress: dict[str, Any]
    #: peak resident memory of the whole process tree (driver, JVM, Python workers)
    peak_rss_bytes: int
    summary: dict[str, Any] | None
    #: peak resident memory of the driver's processes only (see :func:`_tree_rss`)
    peak_driver_rss_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def find_spark_submit() -> Path:
    """pyspark's own ``bin/spark-submit``."""
    from pyspark.find_spark_home import _find_spark_home

    path = Path(_find_spark_home()) / "bin" / "spark-submit"
    if not path.exists():
        raise FileNotFoundError(f"spark-submit not found at {path}")
    return path


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if not java:
        return None
    return str(Path(java).resolve().parent.parent)


def _job_env(progress_file: Path, extra: dict[str, str] | None) -> dict[str, str]:
    env = {
        key: os.environ[key]
        for key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", *objectstore.ENV_NAMES)
        if key in os.environ
    }
    java_home = _java_home()
    if java_home:
        env["JAVA_HOME"] = java_home
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    )
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env["STRATA_PROGRESS_FILE"] = str(progress_file)
    env.update(extra or {})
    return env


def _package_zip(work_dir: Path) -> Path:
    """The pure job modules as a zip for ``--py-files`` (no Django modules are needed there)."""
    target = work_dir / "spark_tasks.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            zf.write(path, f"spark_tasks/{path.name}")
        # the KIP-405 / KIP-950 states (choices), the object store's location rules and client
        # (standard library and boto3 only), and the remote-retention rules the planners share
        # with the agent (standard library only), with their packages' __init__ files (which
        # import nothing)
        for name in (
            "__init__.py",
            "contract/__init__.py",
            "contract/choices.py",
            "contract/objectstore.py",
            "contract/remote_retention.py",
        ):
            zf.write(PACKAGE_DIR.parent / "broker_agent" / name, f"broker_agent/{name}")
    return target


@dataclasses.dataclass(frozen=True)
class TreeRss:
    total: int
    driver: int


#: Command-line marks of the executors' processes: Spark's Python worker daemon (and every worker
#: it forks), and an executor JVM (``local-cluster`` and standalone masters start them).
_EXECUTOR_MARKS = (b"pyspark.daemon", b"CoarseGrainedExecutorBackend")


def _tree_rss(pid: int, *, skip_root: bool = False) -> TreeRss:
    """Resident memory of a process and its descendants (Linux /proc), in bytes: ``total``, and
    ``driver``, the same without the executors' subtrees (``_EXECUTOR_MARKS``).

    Under spark-submit the tree is the launcher, the JVM and the Python driver, plus the Python
    workers that the executors start (``python -m pyspark.daemon``, which forks one worker per
    task slot) and, under a ``local-cluster`` master, the executor JVMs. Those are the
    executors' side: on a cluster they run on the executor hosts, so ``driver`` leaves them out.
    In local mode the JVM is driver and executor at once, so ``driver`` still counts the
    executors' JVM memory: an upper bound on the driver's. ``skip_root`` leaves ``pid`` itself
    out (the guard that supervises the job)."""
    total = driver = 0
    page = os.sysconf("SC_PAGE_SIZE")
    stack = [(pid, False)]
    seen: set[int] = set()
    while stack:
        current, in_executor = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/statm") as fh:
                rss = int(fh.read().split()[1]) * page
            if not in_executor:
                with open(f"/proc/{current}/cmdline", "rb") as fh:
                    cmdline = fh.read()
                in_executor = any(mark in cmdline for mark in _EXECUTOR_MARKS)
            children: list[int] = []
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    children.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
        if skip_root and current == pid:
            rss = 0
        total += rss
        if not in_executor:
            driver += rss
        stack.extend((child, in_executor) for child in children)
    return TreeRss(total, driver)


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    # Spark's console progress bar rewrites one line with \r: keep the last state of each line.
    cleaned = [line.rsplit("\r", 1)[-1] for line in data.splitlines()]
    return "\n".join(deque((line for line in cleaned if line.strip()), maxlen=lines))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def spark_submit(
    job: str,
    args: Sequence[str],
    work_dir: str | os.PathLike,
    *,
    master: str | None = None,
    driver_memory: str | None = None,
    timeout_seconds: float | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    progress_interval: float = 2.0,
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    out_dir: str | os.PathLike | None = None,
) -> SubmitResult:
    """Run ``spark_tasks/<job>.py`` with ``args`` and wait for it.

    ``master``, ``driver_memory`` and ``timeout_seconds`` default to the Django settings when
    Django is configured, else to ``local[2]``, ``1g`` and no timeout. ``out_dir`` (the job's
    ``--out``) is where ``summary.json`` is read from afterwards.
    """
    script = PACKAGE_DIR / f"{job}.py"
    if not job.isidentifier() or not script.exists():
        raise ValueError(f"unknown Spark job {job!r}")
    defaults = _settings_defaults()
    master = master or defaults["master"]
    driver_memory = driver_memory or defaults["driver_memory"]
    if timeout_seconds is None:
        timeout_seconds = defaults["timeout"]
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "spark.log"
    progress_file = work / "progress.json"
    progress_file.unlink(missing_ok=True)
    local_dir = work / "tmp"
    local_dir.mkdir(exist_ok=True)
    spark_conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(local_dir),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={local_dir} {defaults['java_options']}".strip(),
        **(conf or {}),
    }
    cmd = [
        str(find_spark_submit()),
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--name",
        f"strata-{job}",
        "--py-files",
        str(_package_zip(work)),
    ]
    for key, value in spark_conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [str(script), *args]

    started = time.monotonic()
    timed_out = False
    peak = peak_driver = 0
    progress: dict[str, Any] = {}
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, str(GUARD), str(os.getpid()), "--", *cmd],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_job_env(progress_file, env),
            cwd=str(work),
            start_new_session=True,
        )
        last_report = 0.0
        try:
            while True:
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                rss = _tree_rss(proc.pid, skip_root=True)  # the guard is not the job
                peak, peak_driver = max(peak, rss.total), max(peak_driver, rss.driver)
                now = time.monotonic()
                if timeout_seconds and now - started > timeout_seconds:
                    timed_out = True
                    _kill_group(proc)
                    break
                if now - last_report >= progress_interval:
                    last_report = now
                    snapshot = _read_json(progress_file)
                    if snapshot:
                        progress = snapshot
                    if on_progress:  # also a heartbeat while the JVM starts
                        on_progress(progress)
        except BaseException:
            _kill_group(proc)  # a Celery soft time limit or a signal: leave no JVM behind
            raise
    exit_code = TIMEOUT_EXIT_CODE if timed_out else proc.returncode
    final = _read_json(progress_file)
    # After spark.stop() the status store is empty: keep the last snapshot that saw the stages.
    if final and final.get("stages_total", 0) >= progress.get("stages_total", 0):
        progress = final
    summary = _read_json(Path(out_dir) / "summary.json") if out_dir else None
    tail = _tail(log_path, LOG_TAIL_LINES)
    if timed_out:
        tail += f"\n[strata] killed after {timeout_seconds:.0f} s (SPARK_JOB_TIMEOUT_SECONDS)"
    return SubmitResult(
        exit_code=exit_code,
        log_path=log_path,
        log_tail=tail,
        timed_out=timed_out,
        seconds=time.monotonic() - started,
        progress=progress,
        peak_rss_bytes=peak,
        summary=summary if exit_code == 0 else None,
        peak_driver_rss_bytes=peak_driver,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def _settings_defaults() -> dict[str, Any]:
    try:
        from django.conf import settings

        return {
            "master": settings.SPARK_MASTER,
            "driver_memory": settings.SPARK_DRIVER_MEMORY,
            "timeout": float(settings.SPARK_JOB_TIMEOUT_SECONDS),
            "java_options": settings.SPARK_DRIVER_JAVA_OPTIONS,
        }
    except Exception:  # Django not configured: used from the bench or a shell
        return {
            "master": os.environ.get("SPARK_MASTER", "local[2]"),
            "driver_memory": os.environ.get("SPARK_DRIVER_MEMORY", "1g"),
            "timeout": 0.0,
            "java_options": os.environ.get("SPARK_DRIVER_JAVA_OPTIONS", ""),
        }
