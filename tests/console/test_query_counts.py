"""Issue #17: every GET page and GET API route that reads data makes a pinned, constant number
of SQL queries.

Each URL below is requested at two sizes of data (:data:`SMALL` and :data:`LARGE`: more
brokers, topics, partitions, consumer groups, history rows, workflows and their steps, audit
events, Spark runs, API tokens and registered clusters) and its queries are counted with
``CaptureQueriesContext``. A URL fails when

- its count differs between the two sizes: a query per row (an N+1) crept in, which is a
  product defect to fix with ``select_related`` / ``prefetch_related`` / one aggregate, never
  by pinning two numbers; or
- its count is not the one pinned in :data:`PINNED`: a query was added (or removed). When the
  change is intended, update the number in :data:`PINNED` in the same commit.

Either message names the page and lists the SQL of both sizes. The small world has fewer rows
than a page holds on every paginated list, so a query per row shows as a difference; a list
cut at a few rows whatever the size (the overview's eight newest audit events) shows as many
at both sizes, and only its pinned count guards it. Each request is made twice and the second
one counted (the first warms per-process caches, so the order of the table does not matter).
The signed-in role is a viewer unless the URL says otherwise (``as <role>``): the role that may
see the page.

Both sizes are built once for the module, each in a transaction rolled back after its URLs
were measured: a URL more costs four requests, not a world (the module takes about half a
minute).

Not measured (:data:`SKIPPED`, checked against the URL resolver by
:func:`test_every_get_route_is_measured_or_skipped_with_a_reason`):

- POST-only endpoints (the agents' webhook ``agent-events/``, ``audit/verify/``,
  ``spark/dry-run/``, ``workflows/<pk>/cancel/`` and ``/confirm/``, and the API's POST
  operations): they write; a GET answers 405 without reading anything.
- ``accounts/login/``, ``accounts/logout/``: authentication, no data of Strata.
- ``api/v1/health``: liveness (public, no session), as ``status/`` is measured.
- ``favicon.ico``: a redirect to a static file.
- ``api/v1/``: django-ninja's root, which answers 404 (the API's pages are measured).
- ``admin/...``: Django's own admin (staff only), not a page of Strata's.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import traceback
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from django.utils import timezone

from tests.foundation.test_url_access import CASES

# The marker makes pytest-django set up the test database; the data is the module's own (see
# ``measured``), built before each test's transaction and rolled back.
pytestmark = pytest.mark.django_db

#: Queries per URL (label: as :class:`Url` spells it). Update a number only with the change
#: that explains it.
PINNED: dict[str, int] = {
    "/": 9,
    "/ [htmx clusters-live]": 9,
    # + the health warnings' one query (quarantined partitions in the latest Spark runs, #39)
    "/status/": 8,
    # the cluster (session, user, roles, cluster, its last sync run)
    "/clusters/local/": 5,
    "/topics/": 7,
    "/topics/?sort=-remote_bytes&tiered_state=ENABLED": 7,
    "/topics/?name=t&has_remote_data=false&sort=partitions&page=2&page_size=2": 7,
    "/topics/?cluster=zz-extra-0": 7,
    "/topics/ [htmx topics-live]": 7,
    # the partition spread in one pass (#17); the replicas moving between dirs (here, on the
    # brokers page and in the topic API)
    "/topics/local/t0/": 17,
    "/topics/local/t1/": 18,
    "/topics/local/t1/?key=abc": 18,
    "/topics/local/t1/?page=2": 18,
    "/topics/local/t1/?range=30d": 18,
    "/topics/local/t1/ [htmx topic-live]": 18,
    "/topics/local/t1/?key=abc [htmx key-lookup]": 17,
    # 50 brokers a page (#17): count + page, their dirs, the first offline dirs of the
    # cluster, and the stale brokers of the whole cluster (not only of the page)
    "/brokers/": 14,
    "/brokers/?dir=2:logdir-0": 14,
    "/brokers/?dir=2:logdir-0&page=2&range=24h": 14,
    "/brokers/?dir=1:logdir-1&range=30d": 14,
    "/brokers/ [htmx brokers-live]": 14,
    # the topics' partition sum (page count) and the running sum that finds the page's topic
    "/topology/": 9,
    "/topology/?page=3": 9,
    "/topology/?topic=t1": 9,
    "/topology/?offline_only=true": 8,
    "/topology/?under_replicated_only=true&page=2": 8,
    "/topology/ [htmx topology-live]": 9,
    # clusters (with their topics per tiered state, kept by the sync), brokers, dirs and the
    # capped per-topic series (#17)
    "/metrics": 7,
    "/metrics [bearer token]": 7,
    "/metrics?topics=all": 7,
    "/api/v1/docs": 3,
    "/api/v1/openapi.json": 3,
    "/api/v1/me": 3,
    "/api/v1/clusters": 8,
    "/api/v1/clusters [bearer token]": 8,
    "/api/v1/clusters/local/brokers": 7,
    "/api/v1/clusters/local/topics": 7,
    "/api/v1/clusters/local/topics?sort=-local_bytes&has_remote_data=true&page_size=5": 7,
    "/api/v1/clusters/local/topics/t1": 11,
    "/api/v1/clusters/local/topics/t1?page=2&page_size=2": 11,
    # + the high watermarks of the listed positions (one lookup for the list and the group);
    # the group's positions are counted once, with its lag
    "/api/v1/clusters/local/groups": 9,
    "/api/v1/clusters/local/groups/g1": 8,
    "/api/v1/clusters/local/partition-for-key?topic=t1&key=abc": 5,
    "/api/v1/clusters/local/brokers/2/log-dirs/logdir-0/history": 6,
    "/api/v1/clusters/local/brokers/1/log-dirs/logdir-1/history?range=30d": 6,
    "/api/v1/clusters/local/topics/t1/history": 6,
    "/api/v1/clusters/local/topics/t1/history?range=24h": 6,
    "/workflows/": 6,
    "/workflows/?state=open": 6,
    "/workflows/?state=past&kind=noop_check&page=2": 6,
    "/workflows/ [htmx wf-list]": 6,
    "/workflows/new/ as operator": 3,
    # + the cluster, to show a kind it cannot run as unsupported (console.capabilities)
    "/workflows/new/?kind=disable_tiering&cluster=local&topic=t1 as operator": 11,
    "/workflows/new/?kind=recover_log_dir&cluster=local&broker=2&log_dir=logdir-0&mode=replace as operator": 11,
    "/workflows/running/": 4,
    "/workflows/driver/?cluster=local&topic=t1": 5,
    "/workflows/{wf_done}/": 8,
    "/workflows/{wf_pending}/": 8,
    "/workflows/{wf_gate}/": 8,
    "/workflows/{wf_gate}/live/": 6,
    "/workflows/{wf_done}/live/": 6,
    "/workflows/{wf_pending}/approve/ as approver": 5,
    "/api/v1/workflows": 5,
    "/api/v1/workflows?state=open&limit=5": 5,
    "/api/v1/workflows/kinds": 3,
    "/api/v1/workflows/{wf_done}": 6,
    "/audit/": 7,
    "/audit/?action=test.": 7,
    "/audit/?before={audit_seq}": 7,
    "/audit/?workflow={wf_done}": 8,
    "/audit/?target=topic:t1&cluster=local": 7,
    "/audit/{audit_seq}/": 6,
    "/audit/verify/{verification}/": 4,
    "/audit/export.csv": 4,
    "/audit/export.jsonl": 4,
    "/api/v1/audit": 4,
    "/api/v1/audit?action=test.&outcome=success&limit=500": 4,
    "/api/v1/audit/verify": 4,
    "/spark/": 5,
    "/spark/?job=retention&page=2": 5,
    "/spark/?partial=runs [htmx]": 5,
    "/spark/runs/{spark_run}/": 4,
    "/spark/runs/{spark_run}/ [htmx]": 4,
    "/spark/runs/{spark_run}/plan/": 4,
    "/tokens/ as admin": 5,
    "/tokens/?page=2 as admin": 5,
}


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    brokers: int
    failed_dirs: tuple[int, ...]  # brokers whose logdir-0 is offline
    down: tuple[int, ...]  # brokers whose agent does not answer
    topics: int
    partitions: int
    groups: int
    clusters: int  # registered besides "local"
    workflows: int  # of each state
    steps: int  # pseudo-brokers of each noop_check workflow: its apply steps
    audit_events: int  # besides those the workflows and tokens write
    spark_runs: int
    tokens: int
    history: int  # samples of each log dir and tiered topic, raw and hourly
    workers: int  # worker heartbeats


SMALL = Size(
    "small",
    brokers=3,
    failed_dirs=(2,),
    down=(3,),
    topics=3,
    partitions=4,
    groups=3,
    clusters=1,
    workflows=1,
    steps=2,
    audit_events=5,
    spark_runs=2,
    tokens=2,
    history=3,
    workers=1,
)
LARGE = Size(
    "large",
    brokers=6,
    failed_dirs=(2, 4, 5),
    down=(3, 6),
    topics=30,
    partitions=64,
    groups=30,
    clusters=4,
    workflows=5,
    steps=12,
    audit_events=150,
    spark_runs=30,
    tokens=60,
    history=30,
    workers=4,
)
SIZES = (SMALL, LARGE)


@dataclasses.dataclass(frozen=True)
class Url:
    """A GET request: ``path`` may name objects of the world (``{wf_done}``), filled in per
    size; ``hx`` is the htmx target of a live panel's refresh (``HX-Request`` and
    ``HX-Target``), ``""`` an htmx request with no target."""

    path: str
    role: str = "viewer"
    hx: str | None = None
    bearer: bool = False
    status: int = 200

    @property
    def label(self) -> str:
        out = self.path
        if self.hx is not None:
            out += f" [htmx {self.hx}]" if self.hx else " [htmx]"
        if self.bearer:
            out += " [bearer token]"
        if self.role != "viewer":
            out += f" as {self.role}"
        return out

    def headers(self, world: dict) -> dict[str, str]:
        headers = {}
        if self.hx is not None:
            headers["HX-Request"] = "true"
            if self.hx:
                headers["HX-Target"] = self.hx
        if self.bearer:
            headers["Authorization"] = f"Bearer {world['token']}"
        return headers


URLS = [
    # -- console pages ---------------------------------------------------------------------
    Url("/"),
    Url("/", hx="clusters-live"),
    Url("/status/"),
    Url("/clusters/local/"),
    Url("/topics/"),
    Url("/topics/?sort=-remote_bytes&tiered_state=ENABLED"),
    Url("/topics/?name=t&has_remote_data=false&sort=partitions&page=2&page_size=2"),
    Url("/topics/?cluster=zz-extra-0"),
    Url("/topics/", hx="topics-live"),
    Url("/topics/local/t0/"),
    Url("/topics/local/t1/"),
    Url("/topics/local/t1/?key=abc"),
    Url("/topics/local/t1/?page=2"),
    Url("/topics/local/t1/?range=30d"),
    Url("/topics/local/t1/", hx="topic-live"),
    Url("/topics/local/t1/?key=abc", hx="key-lookup"),
    Url("/brokers/"),
    Url("/brokers/?dir=2:logdir-0"),
    Url("/brokers/?dir=2:logdir-0&page=2&range=24h"),
    Url("/brokers/?dir=1:logdir-1&range=30d"),
    Url("/brokers/", hx="brokers-live"),
    Url("/topology/"),
    Url("/topology/?page=3"),
    Url("/topology/?topic=t1"),
    Url("/topology/?offline_only=true"),
    Url("/topology/?under_replicated_only=true&page=2"),
    Url("/topology/", hx="topology-live"),
    Url("/metrics"),
    Url("/metrics", bearer=True),
    Url("/metrics?topics=all"),
    # -- console API -----------------------------------------------------------------------
    Url("/api/v1/docs"),
    Url("/api/v1/openapi.json"),
    Url("/api/v1/me"),
    Url("/api/v1/clusters"),
    Url("/api/v1/clusters", bearer=True),
    Url("/api/v1/clusters/local/brokers"),
    Url("/api/v1/clusters/local/topics"),
    Url("/api/v1/clusters/local/topics?sort=-local_bytes&has_remote_data=true&page_size=5"),
    Url("/api/v1/clusters/local/topics/t1"),
    Url("/api/v1/clusters/local/topics/t1?page=2&page_size=2"),
    Url("/api/v1/clusters/local/groups"),
    Url("/api/v1/clusters/local/groups/g1"),
    Url("/api/v1/clusters/local/partition-for-key?topic=t1&key=abc"),
    Url("/api/v1/clusters/local/brokers/2/log-dirs/logdir-0/history"),
    Url("/api/v1/clusters/local/brokers/1/log-dirs/logdir-1/history?range=30d"),
    Url("/api/v1/clusters/local/topics/t1/history"),
    Url("/api/v1/clusters/local/topics/t1/history?range=24h"),
    # -- workflows -------------------------------------------------------------------------
    Url("/workflows/"),
    Url("/workflows/?state=open"),
    Url("/workflows/?state=past&kind=noop_check&page=2"),
    Url("/workflows/", hx="wf-list"),
    Url("/workflows/new/", role="operator"),
    Url("/workflows/new/?kind=disable_tiering&cluster=local&topic=t1", role="operator"),
    Url(
        "/workflows/new/?kind=recover_log_dir&cluster=local&broker=2&log_dir=logdir-0&mode=replace",
        role="operator",
    ),
    Url("/workflows/running/"),
    Url("/workflows/driver/?cluster=local&topic=t1"),
    Url("/workflows/{wf_done}/"),
    Url("/workflows/{wf_pending}/"),
    Url("/workflows/{wf_gate}/"),
    Url("/workflows/{wf_gate}/live/"),
    Url("/workflows/{wf_done}/live/", status=286),
    Url("/workflows/{wf_pending}/approve/", role="approver"),
    Url("/api/v1/workflows"),
    Url("/api/v1/workflows?state=open&limit=5"),
    Url("/api/v1/workflows/kinds"),
    Url("/api/v1/workflows/{wf_done}"),
    # -- audit -----------------------------------------------------------------------------
    Url("/audit/"),
    Url("/audit/?action=test."),
    Url("/audit/?before={audit_seq}"),
    Url("/audit/?workflow={wf_done}"),
    Url("/audit/?target=topic:t1&cluster=local"),
    Url("/audit/{audit_seq}/"),
    Url("/audit/verify/{verification}/", status=286),
    Url("/audit/export.csv"),
    Url("/audit/export.jsonl"),
    Url("/api/v1/audit"),
    Url("/api/v1/audit?action=test.&outcome=success&limit=500"),
    Url("/api/v1/audit/verify"),
    # -- Spark runs ------------------------------------------------------------------------
    Url("/spark/"),
    Url("/spark/?job=retention&page=2"),
    Url("/spark/?partial=runs", hx="", status=286),
    Url("/spark/runs/{spark_run}/"),
    Url("/spark/runs/{spark_run}/", hx="", status=286),
    Url("/spark/runs/{spark_run}/plan/"),
    # -- accounts --------------------------------------------------------------------------
    Url("/tokens/", role="admin"),
    Url("/tokens/?page=2", role="admin"),
]

#: GET routes not measured, with the reason (the module docstring says more).
SKIPPED = {
    "agent-events/": "POST only: the agents' webhook",
    "agent-events/<slug:cluster>/": "POST only: the agents' webhook",
    "audit/verify/": "POST only: queues a chain verification",
    "spark/dry-run/": "POST only: queues a dry run",
    "workflows/<int:pk>/cancel/": "POST only",
    "workflows/<int:pk>/confirm/": "POST only",
    "accounts/login/": "authentication, no data",
    "accounts/logout/": "authentication, no data",
    "api/v1/health": "public liveness probe (status/ is measured)",
    "favicon.ico": "a redirect to a static file",
    "api/v1/": "django-ninja's root: answers 404 (its docs, api/v1/docs, are measured)",
}
SKIPPED_NAMESPACES = {"admin": "Django's own admin, not a page of Strata's"}


# -- the world -----------------------------------------------------------------------------


def _users() -> dict:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    users = {}
    for username, role in (
        ("vera-viewer", "viewer"),
        ("otto-operator", "operator"),
        ("anna-approver", "approver"),
        ("bert-approver", "approver"),
        ("ada-admin", "admin"),
    ):
        user = get_user_model().objects.create_user(username=username)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        if role == "admin":
            user.is_staff = user.is_superuser = True
            user.save()
        users[username] = user
    users.update(
        viewer=users["vera-viewer"],
        operator=users["otto-operator"],
        approver=users["anna-approver"],
        admin=users["ada-admin"],
    )
    return users


def _cluster(size: Size):
    """``local``: ``size.topics`` topics (the odd ones tiered), offline log dirs, brokers
    whose agent does not answer, consumer groups; and ``size.clusters`` small others."""
    from broker_agent.contract.models import GroupView
    from console.models import Cluster
    from tests.console.conftest import sync
    from tests.console.factories import ClusterBuilder

    cluster = Cluster.objects.create(
        name="local", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    b = ClusterBuilder(brokers=size.brokers, log_dirs=2)
    for i in range(size.topics):
        tiered = i % 2 == 1
        b.add_topic(
            f"t{i}",
            partitions=size.partitions,
            rf=3,
            tiered=tiered,
            records=1000,
            remote_records=400 if tiered else 0,
        )
    for broker in size.failed_dirs:
        b.fail_log_dir(broker, "logdir-0")
    b.groups = [
        GroupView(
            group_id=f"g{i}",
            generation=1,
            members=[],
            offsets={
                f"t{t}": {p: 10 * p for p in range(size.partitions)}
                for t in range(min(size.topics, 3))
            },
        )
        for i in range(size.groups)
    ]
    sync(cluster, b, down=set(size.down))
    for i in range(size.clusters):
        other = Cluster.objects.create(
            name=f"zz-extra-{i}",
            controller_url="http://127.0.0.1:1",
            secret_ref="env:STRATA_TEST_SECRET",
        )
        ob = ClusterBuilder(brokers=3, log_dirs=1, cluster_id=f"extra-{i}")
        ob.add_topic("x", partitions=2, rf=3)
        sync(other, ob)
    return cluster


def _history(cluster, size: Size) -> None:
    """``size.history`` raw samples in the last hour and hourly rows over the last 30 days, of
    every log dir and tiered topic (besides the one the sync wrote)."""
    from console.choices import LogDirState, TieredState
    from console.models import LogDir, LogDirSample, Topic, TopicSample
    from console.models.history import Resolution

    now = timezone.now()
    times = [(Resolution.RAW, now - timedelta(minutes=2 * (i + 1))) for i in range(size.history)]
    times += [
        (Resolution.HOUR, (now - timedelta(hours=i + 2)).replace(minute=0, second=0))
        for i in range(size.history)
    ]
    LogDirSample.objects.bulk_create(
        LogDirSample(
            log_dir=d,
            resolution=res,
            at=at,
            used_bytes=d.total_bytes - d.usable_bytes,
            total_bytes=d.total_bytes,
            probe_latency_ms=1.5,
            state=LogDirState.ONLINE,
        )
        for d in LogDir.objects.filter(cluster=cluster)
        for res, at in times
    )
    TopicSample.objects.bulk_create(
        TopicSample(
            topic=t,
            resolution=res,
            at=at,
            remote_bytes=t.remote_bytes,
            local_bytes=t.local_bytes,
            fenced_remote_bytes=0,
            remote_copy_lag_bytes=100,
            remote_delete_lag_bytes=0,
        )
        for t in Topic.objects.filter(cluster=cluster).exclude(tiered_state=TieredState.NONE)
        for res, at in times
    )


def _workflows(users: dict, size: Size) -> dict:
    """``size.workflows`` noop_check workflows in each state: planning, pending approval,
    done, rejected, cancelled, and waiting at a human gate. Returns the newest of the kinds
    the pages show."""
    from audit.choices import AuditContext
    from tests.workflows.conftest import approve, request_noop
    from workflows import engine
    from workflows.actions import do_cancel_workflow, do_reject_workflow

    operator, approver = users["operator"], users["approver"]
    out = {}
    for i in range(size.workflows):
        n = {"brokers": size.steps}
        request_noop(operator, f"planning-{i}", plan=False, **n)
        out["wf_done"] = approve(request_noop(operator, f"done-{i}", **n), approver)
        engine.run(out["wf_done"].pk)
        rejected = request_noop(operator, f"rejected-{i}", **n)
        do_reject_workflow(
            rejected.pk,
            actor=users["bert-approver"],
            plan_hash=rejected.plan_hash,
            comment="not now",
            context=AuditContext.CLI,
        )
        cancelled = request_noop(operator, f"cancelled-{i}", **n)
        do_cancel_workflow(cancelled.pk, actor=operator, comment="", context=AuditContext.CLI)
        out["wf_gate"] = approve(request_noop(operator, f"gate-{i}", mode="gate", **n), approver)
        engine.run(out["wf_gate"].pk)
        out["wf_pending"] = request_noop(operator, f"pending-{i}", **n)
    return {k: wf.pk for k, wf in out.items()}


def _audit(users: dict, size: Size, workflow: int) -> dict:
    """``size.audit_events`` events about topics, half of them on a workflow's timeline (the
    audit page reads their workflows' cluster), and a finished chain verification."""
    from audit import targets, trail
    from audit.models import AuditEvent, ChainVerification

    for i in range(size.audit_events):
        trail.record(
            "test.query_counts",
            actor=users["operator"],
            context="cli",
            **targets.topic("local", f"t{i % 3}"),
            workflow=workflow if (i // 3) % 2 == 0 else None,
            after={"i": i},
        )
    verification = ChainVerification.objects.create(
        requested_by=users["admin"],
        state=ChainVerification.State.DONE,
        ok=True,
        finished_at=timezone.now(),
        result={"events": AuditEvent.objects.count()},
    )
    seqs = list(AuditEvent.objects.order_by("-seq").values_list("seq", flat=True)[:60])
    return {"audit_seq": seqs[len(seqs) // 2], "verification": verification.pk}


def _spark(users: dict, size: Size, plan_dir) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState

    (plan_dir / "plan").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"cluster": ["local"] * 2, "topic": ["t0", "t1"], "size_bytes": [4096, 512]}),
        plan_dir / "plan" / "part-0.parquet",
    )
    now = timezone.now()
    runs = [
        SparkJobRun(
            job=SparkJob.RETENTION,
            state=SparkRunState.SUCCEEDED,
            cluster="local",
            requested_by=users["operator" if i % 2 else "admin"],
            created_at=now - timedelta(minutes=5 + i),
            started_at=now - timedelta(minutes=4 + i),
            finished_at=now - timedelta(minutes=1 + i),
            heartbeat_at=now - timedelta(minutes=1 + i),
            exit_code=0,
            output_dir=str(plan_dir),
            plan_rows=2,
            log_tail="INFO retention: 3 topics, 12 segments past retention\n",
            output_summary={"topics": 3, "segments": 12, "bytes": 123456},
            stages_total=4,
            stages_done=4,
            tasks_total=16,
            tasks_done=16,
        )
        for i in range(size.spark_runs)
    ]
    SparkJobRun.objects.bulk_create(runs)
    return {"spark_run": SparkJobRun.objects.order_by("-created_at").first().pk}


def _tokens(users: dict, size: Size) -> dict:
    from accounts.actions import do_issue_token

    raw = ""
    for i in range(size.tokens):
        owner = users["viewer"] if i % 2 == 0 else users["operator"]
        _, token = do_issue_token(owner, name=f"tool-{i}", acting_user=users["admin"])
        if i == 0:
            raw = token
    return {"token": raw}


def _heartbeats(size: Size) -> None:
    from console.models import Heartbeat

    now = timezone.now()
    Heartbeat.objects.create(name="beat", beat_at=now)
    for i in range(size.workers):
        Heartbeat.objects.create(name=f"worker:w{i}@test", beat_at=now, hostname="test")


def build_world(size: Size, tmp) -> dict:
    users = _users()
    cluster = _cluster(size)
    _history(cluster, size)
    world: dict = {"users": users}
    world.update(_workflows(users, size))
    world.update(_tokens(users, size))
    world.update(_spark(users, size, tmp))
    world.update(_audit(users, size, world["wf_done"]))
    _heartbeats(size)
    return world


# -- measuring -----------------------------------------------------------------------------


@dataclasses.dataclass
class Measured:
    path: str
    status: int | None = None
    queries: list[str] = dataclasses.field(default_factory=list)
    error: str = ""
    whole_page: bool = False  # the answer is a whole HTML page (not a partial)

    @property
    def count(self) -> int:
        return len(self.queries)


def _get(client: Client, path: str, headers: dict[str, str]):
    response = client.get(path, headers=headers)
    if response.streaming:
        b"".join(response.streaming_content)  # a streamed body reads as it is sent
    return response


def measure(clients: dict[str, Client], url: Url, world: dict) -> Measured:
    path = url.path.format(**world)
    out = Measured(path)
    client = clients["token" if url.bearer else url.role]
    try:
        headers = url.headers(world)
        _get(client, path, headers)
        with CaptureQueriesContext(connection) as ctx:
            response = _get(client, path, headers)
        out.status = response.status_code
        out.queries = [q["sql"] for q in ctx.captured_queries]
        out.whole_page = not response.streaming and b"<html" in response.content
    except Exception:  # reported by the URL's own test
        out.error = traceback.format_exc()
    return out


def _rows() -> dict[str, int]:
    """How many rows the listed tables hold (the large world must hold more of each)."""
    from accounts.models import ApiToken
    from audit.models import AuditEvent
    from console.models import (
        Broker,
        Cluster,
        GroupOffset,
        LogDirSample,
        Partition,
        Replica,
        Topic,
        TopicSample,
    )
    from spark_tasks.models import SparkJobRun
    from workflows.models import Workflow, WorkflowStep

    models = (
        Cluster,
        Broker,
        Topic,
        Partition,
        Replica,
        GroupOffset,
        LogDirSample,
        TopicSample,
        Workflow,
        WorkflowStep,
        AuditEvent,
        SparkJobRun,
        ApiToken,
    )
    return {m.__name__: m.objects.count() for m in models}


@dataclasses.dataclass
class Sized:
    urls: dict[str, Measured]  # by label
    rows: dict[str, int]  # by model


@pytest.fixture(scope="module")
def measured(django_db_setup, django_db_blocker, tmp_path_factory) -> dict[str, Sized]:
    """The URLs measured at each size (by name), each size built in a transaction of its own
    that is rolled back once its URLs were measured."""
    out: dict[str, Sized] = {}
    with django_db_blocker.unblock():
        for size in SIZES:
            with transaction.atomic():
                world = build_world(size, tmp_path_factory.mktemp(f"spark-{size.name}"))
                clients = {"token": Client()}  # no session: the bearer token alone
                for role in {u.role for u in URLS}:
                    clients[role] = Client()
                    clients[role].force_login(world["users"][role])
                urls = {u.label: measure(clients, u, world) for u in URLS}
                out[size.name] = Sized(urls, _rows())
                transaction.set_rollback(True)
    return out


# -- the tests -----------------------------------------------------------------------------

_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+\b")
_LISTS = re.compile(r"\bIN \((?:\?, )*\?\)")


def _shape(sql: str) -> str:
    """A statement with its literals masked: the same query for another row looks the same."""
    return _LISTS.sub("IN (...)", _LITERALS.sub("?", sql))


def _listing(m: Measured, size: str) -> str:
    lines = [f"-- {size}: {m.count} queries for {m.path}"]
    lines += [f"{i:3}. {sql}" for i, sql in enumerate(m.queries, 1)]
    return "\n".join(lines)


def _repeated(small: Measured, large: Measured) -> str:
    a = collections.Counter(_shape(q) for q in small.queries)
    b = collections.Counter(_shape(q) for q in large.queries)
    lines = [
        f"  {a[s]} -> {b[s]} times: {s[:300]}" for s in sorted(set(a) | set(b)) if a[s] != b[s]
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("url", URLS, ids=[u.label for u in URLS])
def test_queries_are_pinned_and_the_same_at_both_sizes(measured, url):
    small, large = measured[SMALL.name].urls[url.label], measured[LARGE.name].urls[url.label]
    for size, m in ((SMALL, small), (LARGE, large)):
        assert not m.error, f"{url.label} ({size.name}) raised:\n{m.error}"
        assert m.status == url.status, f"{m.path} ({size.name}) answered {m.status}"
        if url.hx is not None:
            assert not m.whole_page, f"{url.label} ({size.name}): a whole page, not the panel"
    sql = f"{_listing(small, SMALL.name)}\n{_listing(large, LARGE.name)}"
    if small.count != large.count:
        pytest.fail(
            f"{url.label}: {small.count} queries at the small size, {large.count} at the "
            f"large one: a query per row (N+1)? Statements whose count changed:\n"
            f"{_repeated(small, large)}\n{sql}"
        )
    pinned = PINNED.get(url.label)
    if small.count != pinned:
        pytest.fail(
            f"{url.label}: {small.count} queries, PINNED says {pinned} "
            f"({small.count - (pinned or 0):+d}). If the change is intended, update PINNED in "
            f"{__name__}.\n{sql}"
        )


def test_the_large_world_has_more_of_every_listed_row(measured):
    """Else a page whose count is the same at both sizes may just show as many rows."""
    small, large = measured[SMALL.name].rows, measured[LARGE.name].rows
    assert all(small.values()), f"the small world lacks some rows: {small}"
    not_more = {m: (small[m], large[m]) for m in small if large[m] <= small[m]}
    assert not not_more, f"not more rows in the large world (small, large): {not_more}"


def _route(path: str) -> str:
    return resolve(re.sub(r"\{\w+\}", "1", path).split("?")[0]).route


def test_every_get_route_is_measured_or_skipped_with_a_reason():
    measured_routes = {_route(u.path) for u in URLS}
    missing = []
    for pattern, method in CASES:
        skipped_namespace = bool(pattern.namespaces) and pattern.namespaces[0] in SKIPPED_NAMESPACES
        if method != "GET" or skipped_namespace:
            continue
        if pattern.route not in measured_routes and pattern.route not in SKIPPED:
            missing.append(f"/{pattern.route} ({pattern.view_name})")
    assert not missing, f"GET routes with no pinned query count (add them to URLS): {missing}"
    assert not set(SKIPPED) & measured_routes, "a skipped route is measured: drop it from SKIPPED"


def test_every_measured_url_has_a_pinned_count_and_every_pin_a_url():
    labels = [u.label for u in URLS]
    assert len(labels) == len(set(labels)), "two URLs with the same label"
    assert set(labels) == set(PINNED), {
        "not pinned": sorted(set(labels) - set(PINNED)),
        "pinned, not measured": sorted(set(PINNED) - set(labels)),
    }
