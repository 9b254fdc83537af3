"""Workflow engine throughput: 500 queued ``noop_check`` workflows through a real worker.

The workflows are requested and approved through the product's ``do_*`` actions while no worker
runs, then one worker starts; throughput is taken from the rows (first ``started_at`` to last
``finished_at``), so worker boot is not counted, and the audit chain is verified afterwards
(timed). Also ``disable_tiering`` end to end on a simulated cluster and on the synthetic one.
Scratch PostgreSQL (``<name>_bench_workflows``) and Redis databases. Environment:
``BENCH_WF_COUNT``, ``BENCH_WF_CONCURRENCY``, ``BENCH_WF_REDIS_URL``, ``BENCH_WF_TIERING_BROKERS``,
``BENCH_WF_SYN_*``, ``DATABASE_URL``.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

TITLE = "Workflows: throughput of queued workflows through a real worker"

SETUP = r"""
import django, os, sys
django.setup()
from django.contrib.auth.models import Group
from django.contrib.auth import get_user_model
from config.celery import app
from workflows import engine
from workflows.actions import do_approve_workflow, do_request_workflow
from audit.choices import AuditContext
app.control.purge()
User = get_user_model()
def user(name, role):
    u, _ = User.objects.get_or_create(username=name)
    u.groups.add(Group.objects.get_or_create(name=role)[0])
    return u
op, ap = user("bench-operator", "operator"), user("bench-approver", "approver")
n = int(sys.argv[1])
for i in range(n):
    wf = do_request_workflow(actor=op, kind="noop_check", context=AuditContext.CLI,
        params={"cluster": "bench", "label": f"bench-{i}", "brokers": 2, "mode": "plain"})
    engine.run(wf.pk)  # its planning, in-process: no worker runs while the queue is filled
    wf.refresh_from_db()
    do_approve_workflow(wf.pk, actor=ap, plan_hash=wf.plan_hash, context=AuditContext.CLI)
print("queued", n)
"""


TIERING = r"""
import django, json, sys, time
django.setup()
from django.contrib.auth.models import Group
from django.contrib.auth import get_user_model
from console.models import Cluster
from console.sync import do_sync_cluster
from workflows.actions import do_approve_workflow, do_request_workflow
from workflows.choices import WorkflowState
from audit.choices import AuditContext
from workflows.models import Workflow
urls, secret_file, topic = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
User = get_user_model()
def user(name, role):
    u, _ = User.objects.get_or_create(username=name)
    u.groups.add(Group.objects.get_or_create(name=role)[0])
    return u
op, ap = user("bench-operator", "operator"), user("bench-approver", "approver")
cluster, _ = Cluster.objects.get_or_create(
    name="bench-tiering", defaults={"controller_url": urls["controller"], "secret_ref": secret_file})
do_sync_cluster(cluster)
t0 = time.monotonic()
wf = do_request_workflow(actor=op, kind="disable_tiering", context=AuditContext.CLI,
    params={"cluster": "bench-tiering", "topic": topic, "policy": "retain"})
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) == WorkflowState.PLANNING:
    time.sleep(0.05)  # the worker plans it
t_plan = time.monotonic() - t0
wf.refresh_from_db()
do_approve_workflow(wf.pk, actor=ap, plan_hash=wf.plan_hash, context=AuditContext.CLI)
t_approved = time.monotonic()
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) not in WorkflowState.TERMINAL:
    time.sleep(0.1)
wf.refresh_from_db()
print(json.dumps({"state": wf.state, "error": wf.error_message, "plan_seconds": t_plan,
    "approve_to_end_seconds": time.monotonic() - t_approved,
    "run_seconds": (wf.finished_at - wf.started_at).total_seconds(),
    "steps": wf.steps.count(), "brokers": len(wf.plan["brokers"])}))
"""


def _fresh_sim_dir(ctx, data, sim: list[str], sim_env: dict[str, str]) -> None:
    """A previous run's cluster (``sim up`` on its data dir would restart *that* layout, with
    its topics) is stopped and removed, so every run starts from an empty cluster."""
    if data.exists():
        subprocess.run(
            [*sim, "down", "--data", str(data)],
            cwd=ctx.root,
            env=sim_env,
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(data)


def _tiering_bench(ctx, env: dict[str, str]) -> dict:
    """``disable_tiering`` end to end on a real (non-synthetic) simulated cluster (broker
    processes with logs and a remote store); the synthetic scale run is
    :func:`_synthetic_tiering_bench`."""
    import json

    brokers = _env_int("BENCH_WF_TIERING_BROKERS", 12)
    data = ctx.work_dir / "sim-tiering"
    py = sys.executable
    sim = [py, "-m", "broker_agent", "sim"]
    sim_env = {k: v for k, v in env.items() if not k.startswith("STRATA_AGENT_SECRET")}
    _fresh_sim_dir(ctx, data, sim, sim_env)
    try:
        up = subprocess.run(
            [*sim, "up", "--brokers", str(brokers), "--log-dirs", "2", "--data", str(data)],
            cwd=ctx.root,
            env=sim_env,
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        urls = up.stdout.strip().splitlines()[-1]
        topic = "bench.tiering"
        subprocess.run(
            [
                *sim,
                "create-topic",
                topic,
                "--partitions",
                str(2 * brokers),
                "--replication-factor",
                "3",
                "--tiered",
                "--data",
                str(data),
            ],
            cwd=ctx.root,
            env=sim_env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        out = subprocess.run(
            [py, "-c", TIERING, urls, str(data / "secret"), topic],
            cwd=ctx.root,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(
            [*sim, "down", "--data", str(data)],
            cwd=ctx.root,
            env=sim_env,
            capture_output=True,
            timeout=120,
        )
    return result


SYNTHETIC_TIERING = r"""
import django, json, sys, time
django.setup()
from django.contrib.auth.models import Group
from django.contrib.auth import get_user_model
from workflows.actions import do_approve_workflow, do_request_workflow
from workflows.choices import WorkflowState
from audit.choices import AuditContext
from workflows.models import Workflow
cluster, topic = sys.argv[1], sys.argv[2]
User = get_user_model()
def user(name, role):
    u, _ = User.objects.get_or_create(username=name)
    u.groups.add(Group.objects.get_or_create(name=role)[0])
    return u
op, ap = user("bench-operator", "operator"), user("bench-approver", "approver")
t0 = time.monotonic()
wf = do_request_workflow(actor=op, kind="disable_tiering", context=AuditContext.CLI,
    params={"cluster": cluster, "topic": topic, "policy": "retain"})
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) == WorkflowState.PLANNING:
    time.sleep(0.05)  # the worker plans it
t_plan = time.monotonic() - t0
wf.refresh_from_db()
do_approve_workflow(wf.pk, actor=ap, plan_hash=wf.plan_hash, context=AuditContext.CLI)
t_approved = time.monotonic()
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) not in WorkflowState.TERMINAL:
    time.sleep(0.1)
end = time.monotonic()
wf.refresh_from_db()
steps = list(wf.steps.order_by("position").values(
    "name", "state", "attempts", "started_at", "finished_at", "output"))
def span(rows):
    rows = [r for r in rows if r["started_at"] and r["finished_at"]]
    if not rows:
        return None
    return (max(r["finished_at"] for r in rows) - min(r["started_at"] for r in rows)).total_seconds()
by = lambda name: [r for r in steps if r["name"] == name]
complete = by("complete_disablement")
print(json.dumps({"state": wf.state, "error": wf.error_message, "plan_seconds": t_plan,
    "approve_to_end_seconds": end - t_approved,
    "run_seconds": (wf.finished_at - wf.started_at).total_seconds(),
    "start_seconds": span(by("start_disablement")),
    "fanout_seconds": span(by("disable_remote_topic")),
    "complete_seconds": span(complete),
    "final": complete[0]["output"] if complete else None,
    "attempts": sum(r["attempts"] for r in steps),
    "steps": len(steps), "brokers": len(wf.plan["brokers"]),
    "partitions": wf.plan["partitions"], "new_tiered_epoch": wf.plan["new_tiered_epoch"]}))
"""


def _synthetic_tiering_bench(ctx, env: dict[str, str]) -> dict:
    """``disable_tiering`` end to end on the synthetic scale cluster (one process answering as
    the controller and as every broker, KIP-950 endpoints included): ``sim up`` with the ticker
    off, ``manage.py register_cluster`` + ``manage.py sync_cluster`` (timed: the first, full
    sync), then request + approve through ``workflows.actions`` and wait for the worker that is
    already running. ``synthetic.topic-0000`` (even topics are tiered) has its partitions'
    replicas placed round robin, so with at least as many partitions as brokers it spans them
    all."""
    import json

    brokers = _env_int("BENCH_WF_SYN_BROKERS", 60)
    topics = _env_int("BENCH_WF_SYN_TOPICS", 100)
    ppt = _env_int("BENCH_WF_SYN_PPT", 2000)
    data = ctx.work_dir / "sim-synthetic"
    py = sys.executable
    sim = [py, "-m", "broker_agent", "sim"]
    sim_env = {k: v for k, v in env.items() if not k.startswith("STRATA_AGENT_SECRET")}
    name, topic = "bench-synthetic", "synthetic.topic-0000"
    _fresh_sim_dir(ctx, data, sim, sim_env)
    try:
        up = subprocess.run(
            [
                *sim,
                "up",
                "--brokers",
                str(brokers),
                "--log-dirs",
                "2",
                "--synthetic-topics",
                str(topics),
                "--partitions-per-topic",
                str(ppt),
                "--synthetic-tick-interval",
                "0",
                "--data",
                str(data),
            ],
            cwd=ctx.root,
            env=sim_env,
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        urls = json.loads(up.stdout.strip().splitlines()[-1])
        manage = [py, "manage.py"]
        subprocess.run(
            [
                *manage,
                "register_cluster",
                name,
                "--controller",
                urls["controller"],
                "--secret-file",
                str(data / "secret"),
            ],
            cwd=ctx.root,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        sync_started = time.monotonic()
        subprocess.run(
            [*manage, "sync_cluster", name],
            cwd=ctx.root,
            env=env,
            check=True,
            capture_output=True,
            timeout=1800,
        )
        sync_seconds = time.monotonic() - sync_started
        out = subprocess.run(
            [py, "-c", SYNTHETIC_TIERING, name, topic],
            cwd=ctx.root,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(
            [*sim, "down", "--data", str(data)],
            cwd=ctx.root,
            env=sim_env,
            capture_output=True,
            timeout=120,
        )
    return dict(
        result,
        sync_seconds=sync_seconds,
        cluster_brokers=brokers,
        cluster_partitions=topics * ppt,
    )


def start_worker(ctx, env: dict[str, str], concurrency: int) -> subprocess.Popen:
    """One ``celery worker`` (prefork) in its own session, its output in ``worker.log``."""
    log = (ctx.work_dir / "worker.log").open("w")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "WARNING",
            "--hostname",
            f"bench-wf-{os.getpid()}@%h",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ctx.root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_worker(worker: subprocess.Popen | None) -> None:
    if worker is not None and worker.poll() is None:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def run(ctx) -> list[dict]:
    count = _env_int("BENCH_WF_COUNT", 500)
    concurrency = _env_int("BENCH_WF_CONCURRENCY", 2)
    base_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    redis_url = os.environ.get("BENCH_WF_REDIS_URL", "redis://127.0.0.1:6379/13")
    db_name = f"{urlsplit(base_url).path.lstrip('/') or 'strata'}_bench_workflows"
    db_url = _with_db(base_url, db_name)
    admin_url = _with_db(base_url, "postgres")
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        # the self-test kind noop_check is test-only: it lives in the test app
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "STRATA_RUN_DIR": str(ctx.work_dir),
        "PYTHONUNBUFFERED": "1",
    }

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db_name))
            )

    drop()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db_name)))
    worker = None
    try:
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ctx.root, env=env, check=True)
        started = time.monotonic()
        subprocess.run([py, "-c", SETUP, str(count)], cwd=ctx.root, env=env, check=True)
        request_seconds = time.monotonic() - started
        worker = start_worker(ctx, env, concurrency)
        deadline = time.monotonic() + 900
        with psycopg.connect(db_url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                open_count = conn.execute(
                    "SELECT count(*) FROM workflows_workflow WHERE state NOT IN "
                    "('succeeded','failed','rejected','cancelled')"
                ).fetchone()[0]
                if open_count == 0:
                    break
                if worker.poll() is not None:
                    raise RuntimeError("the worker exited; see worker.log")
                time.sleep(0.5)
            else:
                raise RuntimeError(f"{open_count} workflows still open after 900 s")
            rows = conn.execute(
                "SELECT state, started_at, finished_at FROM workflows_workflow"
            ).fetchall()
            events = conn.execute("SELECT count(*) FROM workflows_auditevent").fetchone()[0]
            steps = conn.execute("SELECT count(*) FROM workflows_workflowstep").fetchone()[0]
        succeeded = [r for r in rows if r[0] == "succeeded"]
        first = min(r[1] for r in succeeded)
        last = max(r[2] for r in succeeded)
        span = (last - first).total_seconds()
        durations = sorted((r[2] - r[1]).total_seconds() for r in succeeded)
        tiering = _tiering_bench(ctx, env)
        synthetic = _synthetic_tiering_bench(ctx, env)
        verify_started = time.monotonic()
        verify = subprocess.run(
            [py, "manage.py", "verify_audit"], cwd=ctx.root, env=env, capture_output=True, text=True
        )
        verify_seconds = time.monotonic() - verify_started
    finally:
        stop_worker(worker)
        drop()
    method = (
        f"{count} noop_check workflows (4 steps each) queued in Redis, then 1 worker "
        f"(prefork, concurrency {concurrency}); times from the rows"
    )
    tiering_rows = [
        {
            "metric": f"disable_tiering end to end, {tiering['brokers']} brokers (s)",
            "value": f"{tiering['approve_to_end_seconds']:.2f} ({tiering['state']})",
            "target": "",
            "method": f"real simulated cluster ({tiering['brokers']} broker processes, "
            f"{2 * tiering['brokers']} partitions RF 3, retain): approval -> succeeded, "
            f"{tiering['steps']} steps, same worker; run alone {tiering['run_seconds']:.2f} s",
        },
        {
            "metric": "disable_tiering pre-flight (plan) (s)",
            "value": round(tiering["plan_seconds"], 3),
            "target": "",
            "method": "do_request_workflow until the worker planned it (synced inventory + hash)",
        },
        {
            "metric": f"disable_tiering end to end, {synthetic['cluster_brokers']}-broker "
            f"synthetic cluster, {synthetic['cluster_partitions']:,} partitions (s)",
            "value": f"{synthetic['approve_to_end_seconds']:.2f} ({synthetic['state']})",
            "target": "≤ 5 (issue #16)",
            "method": f"synthetic scale cluster (one process, KIP-950 endpoints of "
            f"broker_agent/simulator/synthetic_tiering.py), registered + synced with manage.py "
            f"(first sync {synthetic['sync_seconds']:.1f} s); topic of "
            f"{synthetic['partitions']} partitions RF 3 on all {synthetic['brokers']} brokers, "
            f"retain; request + approve via workflows.actions, run by the same celery worker "
            f"(prefork, concurrency {concurrency}): approval -> succeeded, {synthetic['steps']} "
            f"steps ({synthetic['attempts']} attempts); run alone {synthetic['run_seconds']:.2f} s"
            f" = start {synthetic['start_seconds'] or 0:.2f} + DisableRemoteTopic fan-out "
            f"{synthetic['fanout_seconds'] or 0:.2f} + complete and console sync "
            f"{synthetic['complete_seconds'] or 0:.2f}",
        },
        {
            "metric": "disable_tiering pre-flight (plan), synthetic cluster (s)",
            "value": round(synthetic["plan_seconds"], 3),
            "target": "",
            "method": f"do_request_workflow on the synced {synthetic['cluster_partitions']:,}-"
            "partition inventory: pre-flight (disk growth projection) + hash",
        },
    ]
    return [
        *tiering_rows,
        {
            "metric": "workflows succeeded",
            "value": f"{len(succeeded)} / {count}",
            "target": f"{count} / {count}",
            "method": method,
        },
        {
            "metric": "throughput (workflows/s)",
            "value": round(len(succeeded) / span, 1),
            "target": "",
            "method": "succeeded / (last finished_at - first started_at)",
        },
        {
            "metric": "steps/s",
            "value": round(steps / span, 1),
            "target": "",
            "method": "workflow steps completed / same span",
        },
        {
            "metric": "run time per workflow p50 / p95 (s)",
            "value": f"{statistics.median(durations):.3f} / "
            f"{durations[int(0.95 * (len(durations) - 1))]:.3f}",
            "target": "",
            "method": "finished_at - started_at (excludes queueing)",
        },
        {
            "metric": "request + approve (workflows/s)",
            "value": round(count / request_seconds, 1),
            "target": "",
            "method": "do_request_workflow + do_approve_workflow in one process",
        },
        {
            "metric": "audit events written",
            "value": events,
            "target": "",
            "method": "rows in the chain after the run",
        },
        {
            "metric": "verify_audit",
            "value": f"{'ok' if verify.returncode == 0 else 'BROKEN'} in {verify_seconds:.1f} s",
            "target": "ok",
            "method": "manage.py verify_audit over the whole chain",
        },
    ]
