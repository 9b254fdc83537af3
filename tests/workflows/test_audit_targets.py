"""One target form in the audit log (#15): a topic, broker or dir is named with its cluster
(``topic:lab/orders``, ``broker:lab/1``, ``log_dir:lab/1:d1``); the filter finds a target as
a user types or links it, in the events written before that form (no cluster, e.g.
``topic:orders``) too, and the events of the workflows that change it; the audit pages link a
target to its page."""

from __future__ import annotations

import contextlib
import types

import pytest
from django.db import transaction

from audit import trail
from audit.choices import AuditContext
from audit.models import AuditEvent
from audit.trail import verify_chain
from workflows import engine
from workflows.choices import AuditAction
from workflows.kinds import commands, disks, tiering_fanout, topology
from workflows.models import Workflow, WorkflowStep

from .conftest import approve, request_noop

pytestmark = pytest.mark.django_db


# --- new events: one form -------------------------------------------------------------------


def _ctx(user, cluster: str, params: dict, plan: dict | None = None, broker: int | None = None):
    """A step context on a real workflow and step row (what ``record_command`` reads)."""
    wf = Workflow.objects.create(
        kind="noop_check",
        cluster=cluster,
        target=f"test:{len(params)}:{broker}",
        requester=user,
        parameters={"cluster": cluster, **params},
        plan=plan or {},
    )
    step = WorkflowStep.objects.create(
        workflow=wf, position=0, name="s", broker=broker, attempts=1, idempotency_key=f"k{wf.pk}"
    )
    return types.SimpleNamespace(
        workflow=wf,
        step=step,
        # the steps read the typed parameters and plan; these tests give the attributes they read
        params=types.SimpleNamespace(**wf.parameters),
        plan=types.SimpleNamespace(**wf.plan),
        idempotency_key=step.idempotency_key,
        log=lambda *a, **k: None,
    )


def _client(**answers):
    """An agent or controller client (a context manager) whose calls answer ``answers``."""

    @contextlib.contextmanager
    def open_client(*args):
        yield types.SimpleNamespace(
            **{name: (lambda v: lambda *a, **k: v)(value) for name, value in answers.items()}
        )

    return open_client


def _target(ctx) -> tuple[str, str]:
    return (
        AuditEvent.objects.filter(workflow=ctx.workflow)
        .values_list("target_type", "target_id")
        .get()
    )


def test_a_dir_command_names_the_dir_with_its_cluster_and_broker(monkeypatch, operator):
    answer = types.SimpleNamespace(model_dump=lambda: {"state": "OFFLINE"})
    monkeypatch.setattr(disks, "agent", _client(log_dirs=[], cordon_log_dir=answer))
    ctx = _ctx(operator, "lab", {"broker": 1, "log_dir": "d1"})
    disks.cordon_log_dir(ctx)
    assert _target(ctx) == ("log_dir", "lab/1:d1")


def test_a_broker_command_names_the_broker_with_its_cluster(monkeypatch, operator):
    monkeypatch.setattr(disks, "agent", _client(incarnation="i1", log_dirs=[]))
    restarted = {"restarted": True, "incarnation": "i2"}
    monkeypatch.setattr(disks, "controller", _client(restart_broker=restarted))
    params = {"broker": 1, "log_dir": "d1", "mode": "remove"}
    ctx = _ctx(operator, "lab", params, plan={"replicas": []})
    disks.restart_broker(ctx)
    targets = AuditEvent.objects.filter(workflow=ctx.workflow).values_list(
        "action", "target_type", "target_id"
    )
    assert sorted(targets) == [
        (disks.DiskAction.RESTART, "broker", "lab/1"),
        (disks.DiskAction.RESTART_SEEN, "broker", "lab/1"),
    ]


def test_a_partition_count_change_names_the_topic_with_its_cluster(monkeypatch, operator):
    topic = types.SimpleNamespace(undeleted_partition_count=4, partitions=[])
    monkeypatch.setattr(topology, "controller", _client(topic=topic, alter_partition_count=topic))
    ctx = _ctx(operator, "lab", {"topic": "orders", "partitions": 4})
    topology.alter_partition_count(ctx)
    assert _target(ctx) == ("topic", "lab/orders")


def test_a_tiering_fan_out_ack_names_the_broker_with_its_cluster(operator):
    plan = {"tiered_epoch": 1, "tiered_state": "ENABLED"}
    ctx = _ctx(operator, "lab", {"topic": "orders"}, plan=plan, broker=2)
    tiering_fanout.audit_ack(ctx, "tiering.test_ack", 2, {"ok": True}, "ack-2")
    assert _target(ctx) == ("broker", "lab/2")


def test_fan_out_acks_recorded_together_are_each_audited_once_per_key(operator):
    """A batch of acknowledgements (record_successes): one event per key, none for a key
    already recorded (by an earlier batch or the step itself), a chain that still verifies."""
    plan = {"tiered_epoch": 1, "tiered_state": "ENABLED"}
    ctx = _ctx(operator, "lab", {"topic": "orders"}, plan=plan, broker=1)
    tiering_fanout.audit_ack(ctx, "tiering.test_ack", 2, {"ok": True}, "ack-2")
    acks = [tiering_fanout._ack_event(ctx, b, {"ok": True}, f"ack-{b}") for b in (2, 3, 4, 3)]
    assert commands.record_successes(ctx, "tiering.test_ack", acks) == 2  # 3 and 4
    assert commands.record_successes(ctx, "tiering.test_ack", acks) == 0
    events = AuditEvent.objects.filter(workflow=ctx.workflow).order_by("seq")
    assert [(e.target_id, e.extra["idempotency_key"]) for e in events] == [
        ("lab/2", "ack-2"),
        ("lab/3", "ack-3"),
        ("lab/4", "ack-4"),
    ]
    assert verify_chain().ok


def test_a_per_broker_step_succeeds_on_the_broker_with_its_cluster(operator, approver):
    wf = approve(request_noop(operator, brokers=2, cluster="lab"), approver)
    engine.run(wf.pk)
    succeeded = AuditEvent.objects.filter(workflow=wf, action=AuditAction.STEP_SUCCEEDED)
    assert set(succeeded.filter(target_type="broker").values_list("target_id", flat=True)) == {
        "lab/0",
        "lab/1",
    }


# --- the filter: old and new forms, workflows on the target --------------------------------


def _event(action="test.target", *, workflow=None, **kw) -> AuditEvent:
    with transaction.atomic():
        return trail.record(action, context=AuditContext.CLI, actor=None, workflow=workflow, **kw)


def _workflow(user, cluster: str, target: str, **params) -> Workflow:
    return Workflow.objects.create(
        kind="noop_check",
        cluster=cluster,
        target=target,
        requester=user,
        parameters={"cluster": cluster, **params},
    )


@pytest.fixture
def history(operator):
    """Events on topic ``orders``, broker 1 and its dir ``d1`` in clusters ``lab`` and
    ``other``, in the old form (no cluster: the workflow says it) and the new one."""
    lab = _workflow(operator, "lab", "noop:a")
    other = _workflow(operator, "other", "noop:b")
    on_topic = _workflow(operator, "lab", "topic:orders")
    on_broker = _workflow(operator, "lab", "broker:1", log_dir="d1")
    e = {
        "topic_old": _event(target_type="topic", target_id="orders", workflow=lab),
        "topic_new": _event(target_type="topic", target_id="lab/orders"),
        "topic_other_old": _event(target_type="topic", target_id="orders", workflow=other),
        "topic_other": _event(target_type="topic", target_id="other/orders"),
        "topic_wf": _event(target_type="workflow", target_id=on_topic.pk, workflow=on_topic),
        "ack_old": _event(target_type="broker", target_id="1", workflow=on_topic),
        "broker_old": _event(target_type="broker", target_id="1", workflow=lab),
        "broker_new": _event(target_type="broker", target_id="lab/1"),
        "broker_12": _event(target_type="broker", target_id="lab/12"),
        "broker_other": _event(target_type="broker", target_id="other/1"),
        "dir_old": _event(target_type="log_dir", target_id="1:d1", workflow=lab),
        "dir_new": _event(target_type="log_dir", target_id="lab/1:d1"),
        "dir_d2": _event(target_type="log_dir", target_id="lab/1:d2"),
        "dir_wf": _event(target_type="workflow", target_id=on_broker.pk, workflow=on_broker),
        "cluster": _event(target_type="cluster", target_id="lab"),
        "spark": _event(target_type="spark_run", target_id="7"),
    }
    return {v.seq: k for k, v in e.items()}


def _found(api, user, history, **params) -> set[str]:
    response = api(user).get("/audit", action="test.", limit=500, **params)
    assert response.status_code == 200, response.json()
    return {history[i["seq"]] for i in response.json()["items"] if i["seq"] in history}


ON_LAB_ORDERS = {"topic_old", "topic_new", "topic_wf", "ack_old"}
ON_LAB_BROKER_1 = {"broker_old", "broker_new", "ack_old", "dir_old", "dir_new", "dir_d2", "dir_wf"}


@pytest.mark.parametrize(
    "params",
    [
        {"target": "topic:lab/orders"},
        {"cluster": "lab", "topic": "orders"},
        {"cluster": "lab", "target": "topic:orders"},  # the workflow list's form, and its cluster
    ],
)
def test_a_topic_matches_its_old_and_new_events_and_its_workflows(api, viewer, history, params):
    assert _found(api, viewer, history, **params) == ON_LAB_ORDERS


def test_a_topic_without_its_cluster_matches_it_in_every_cluster(api, viewer, history):
    found = _found(api, viewer, history, target="topic:orders")
    assert found == ON_LAB_ORDERS | {"topic_other_old", "topic_other"}


@pytest.mark.parametrize("params", [{"target": "broker:lab/1"}, {"cluster": "lab", "broker": "1"}])
def test_a_broker_matches_its_events_its_dirs_and_its_workflows(api, viewer, history, params):
    found = _found(api, viewer, history, **params)
    assert found == ON_LAB_BROKER_1, "not broker 12, not broker 1 of another cluster"


@pytest.mark.parametrize(
    "params", [{"target": "log_dir:lab/1:d1"}, {"cluster": "lab", "log_dir": "1:d1"}]
)
def test_a_dir_matches_its_events_and_its_recovery_not_the_other_dir(api, viewer, history, params):
    assert _found(api, viewer, history, **params) == {"dir_old", "dir_new", "dir_wf"}


def test_a_cluster_alone_matches_everything_about_it(api, viewer, history):
    found = _found(api, viewer, history, cluster="lab")
    assert found == set(history.values()) - {
        "topic_other_old",
        "topic_other",
        "broker_other",
        "spark",
    }


def test_other_targets_match_exactly_as_before(api, viewer, history):
    assert _found(api, viewer, history, target="spark_run:7") == {"spark"}
    assert _found(api, viewer, history, target="cluster:lab") == {"cluster"}


@pytest.mark.parametrize("params", [{"log_dir": "d1"}, {"broker": "one"}, {"broker": "-1"}])
def test_a_bad_broker_or_dir_is_400(api, viewer, params):
    response = api(viewer).get("/audit", **params)
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"


def test_the_page_and_the_export_filter_alike(client, viewer, history):
    client.force_login(viewer)
    html = client.get("/audit/?target=topic:lab/orders").content.decode()
    shown = {name for seq, name in history.items() if f'href="/audit/{seq}/"' in html}
    assert shown == ON_LAB_ORDERS
    assert '<a href="/topics/lab/orders/">topic:lab/orders</a></h1>' in html
    body = b"".join(client.get("/audit/export.jsonl?cluster=lab&topic=orders").streaming_content)
    assert body.count(b"\n") == len(ON_LAB_ORDERS)


def test_filtering_rewrites_no_event(history):
    assert verify_chain().ok


# --- links ----------------------------------------------------------------------------------


def test_each_target_links_to_its_page(client, viewer, operator):
    lab = _workflow(operator, "lab", "noop:a")
    events = {
        "/topics/lab/orders/": _event(target_type="topic", target_id="lab/orders"),
        "/topics/lab/payments/": _event(target_type="topic", target_id="payments", workflow=lab),
        "/brokers/?cluster=lab": _event(target_type="broker", target_id="lab/1"),
        "/brokers/?cluster=lab&amp;dir=1:d1#incident": _event(
            target_type="log_dir", target_id="lab/1:d1"
        ),
        f"/workflows/{lab.pk}/": _event(target_type="workflow", target_id=lab.pk, workflow=lab),
        "/spark/runs/7/": _event(target_type="spark_run", target_id="7"),
        "/topics/?cluster=lab": _event(target_type="cluster", target_id="lab"),
    }
    client.force_login(viewer)
    html = client.get("/audit/?action=test.").content.decode()
    for url, e in events.items():
        assert f'<a href="{url}">{e.target_label}</a>' in html, url
        detail = client.get(f"/audit/{e.seq}/").content.decode()
        assert f'<a href="{url}">{e.target_label}</a>' in detail, url
    # an event of a workflow on another target links to both
    assert f'<a href="/workflows/{lab.pk}/">workflow #{lab.pk}</a>' in html
