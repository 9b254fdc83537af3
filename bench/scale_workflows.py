"""The two workflows of the fleet-scale bench (#17), on the synthetic 1,000,000-partition cluster.

Used by :mod:`bench.bench_scale`. On a scratch database with one real worker, requested and
approved through ``workflows.actions``: ``disable_tiering`` (retain) of the 10,000-partition
``synthetic.topic-0000`` (300 DisableRemoteTopic commands), and ``expand_partitions`` of a
5,000-partition topic to 10,000 until every new partition has a leader and a full ISR. Times:
request -> planned and approval -> succeeded from this process; the run's span from the row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from bench.bench_workflows import _fresh_sim_dir, _with_db, start_worker, stop_worker
from broker_agent.simulator.synthetic import fleet_topic_sizes

__all__ = ["run_scale_workflows"]

WORKFLOW = r"""
import django, json, sys, time
django.setup()
from django.contrib.auth.models import Group
from django.contrib.auth import get_user_model
from workflows.actions import do_approve_workflow, do_request_workflow
from workflows.choices import WorkflowState
from audit.choices import AuditContext
from workflows.models import Workflow
kind, params = sys.argv[1], json.loads(sys.argv[2])
User = get_user_model()
def user(name, role):
    u, _ = User.objects.get_or_create(username=name)
    u.groups.add(Group.objects.get_or_create(name=role)[0])
    return u
op, ap = user("bench-operator", "operator"), user("bench-approver", "approver")
t0 = time.monotonic()
wf = do_request_workflow(actor=op, kind=kind, context=AuditContext.CLI, params=params)
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) == WorkflowState.PLANNING:
    time.sleep(0.05)  # the worker plans it
t_plan = time.monotonic() - t0
wf.refresh_from_db()
if wf.state != WorkflowState.PENDING_APPROVAL:
    print(json.dumps({"state": wf.state, "error": wf.error_message, "plan_seconds": t_plan}))
    sys.exit(0)
do_approve_workflow(wf.pk, actor=ap, plan_hash=wf.plan_hash, context=AuditContext.CLI)
t_approved = time.monotonic()
while Workflow.objects.values_list("state", flat=True).get(pk=wf.pk) not in WorkflowState.TERMINAL:
    time.sleep(0.1)
end = time.monotonic()
wf.refresh_from_db()
steps = wf.steps.all()
print(json.dumps({"state": wf.state, "error": wf.error_message, "plan_seconds": t_plan,
    "approve_to_end_seconds": end - t_approved,
    "run_seconds": (wf.finished_at - wf.started_at).total_seconds(),
    "steps": len(steps), "attempts": sum(s.attempts for s in steps)}))
"""


def _run(ctx, env, args: list[str], timeout: float) -> str:
    proc = subprocess.run(
        args, cwd=ctx.root, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:4]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_scale_workflows(ctx, *, brokers: int, log_dirs: int, partitions: int) -> dict:
    """Both workflows on a fresh fleet cluster; ``{"sync_seconds", "disable", "expand",
    "disable_topic", "expand_topic"}`` (each workflow: the WORKFLOW script's answer)."""
    base_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    db_name = f"{urlsplit(base_url).path.lstrip('/') or 'strata'}_bench_scale"
    admin_url = _with_db(base_url, "postgres")
    work = ctx.work_dir / "workflows"
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": _with_db(base_url, db_name),
        "REDIS_URL": os.environ.get("BENCH_SCALE_REDIS_URL", "redis://127.0.0.1:6379/12"),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "STRATA_RUN_DIR": str(work),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    sim_env = {k: v for k, v in env.items() if not k.startswith("STRATA_AGENT_SECRET")}

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db_name))
            )

    sizes = fleet_topic_sizes(partitions)
    disable_topic = "synthetic.topic-0000"  # the largest (10,000 at 1,000,000), tiered
    expand_at = next((t for t, n in enumerate(sizes) if n <= sizes[0] // 2), len(sizes) - 1)
    expand_topic, expand_from = f"synthetic.topic-{expand_at:04d}", sizes[expand_at]
    py, data = sys.executable, work / "sim"
    sim = [py, "-m", "broker_agent", "sim"]
    drop()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db_name)))
    worker = None
    _fresh_sim_dir(ctx, data, sim, sim_env)
    try:
        _run(ctx, env, [py, "manage.py", "migrate", "-v0"], 600)
        up = _run(
            ctx,
            sim_env,
            [
                *sim,
                "up",
                "--brokers",
                str(brokers),
                "--log-dirs",
                str(log_dirs),
                "--synthetic-fleet",
                str(partitions),
                "--synthetic-tick-interval",
                "0",
                "--data",
                str(data),
            ],
            600,
        )
        urls = json.loads(up.strip().splitlines()[-1])
        _run(
            ctx,
            env,
            [
                py,
                "manage.py",
                "register_cluster",
                "fleet",
                "--controller",
                urls["controller"],
                "--secret-file",
                str(data / "secret"),
            ],
            120,
        )
        started = time.monotonic()
        _run(ctx, env, [py, "manage.py", "sync_cluster", "fleet"], 1800)
        sync_seconds = time.monotonic() - started
        worker = start_worker(ctx, env, 2)

        def workflow(kind: str, params: dict) -> dict:
            out = _run(ctx, env, [py, "-c", WORKFLOW, kind, json.dumps(params)], 1800)
            return json.loads(out.strip().splitlines()[-1])

        disable = workflow(
            "disable_tiering", {"cluster": "fleet", "topic": disable_topic, "policy": "retain"}
        )
        expand = workflow(
            "expand_partitions",
            {"cluster": "fleet", "topic": expand_topic, "partitions": 2 * expand_from},
        )
    finally:
        stop_worker(worker)
        subprocess.run(
            [*sim, "down", "--data", str(data)],
            cwd=ctx.root,
            env=sim_env,
            capture_output=True,
            timeout=120,
        )
        drop()
    return {
        "sync_seconds": sync_seconds,
        "disable": disable,
        "expand": expand,
        "disable_topic": f"{disable_topic} ({sizes[0]:,} partitions)",
        "expand_topic": f"{expand_topic} ({expand_from:,} -> {2 * expand_from:,} partitions)",
    }
