"""Consumer groups at fleet size (#17): the coordinator answers the groups changed since a
version as rows, the sync merges only those, and the groups API pages them."""

from __future__ import annotations

import json
import sqlite3

import pytest
from django.db import connection

from broker_agent.contract.client import ControllerClient
from broker_agent.contract.models import GroupView, split_group_tsv
from broker_agent.simulator.groups import GroupCoordinator
from broker_agent.simulator.synthetic import SyntheticCluster
from broker_agent.simulator.synthetic_groups import SyntheticGroups
from console.models import Cluster, ConsumerGroup, GroupOffset
from console.sync import do_sync_cluster
from tests.broker_agent.conftest import run_cli
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


def _coordinator() -> GroupCoordinator:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
    return GroupCoordinator(db, lambda topic: ([0, 1, 2], []))


def _consume(c: GroupCoordinator, group: str, offsets: dict[int, int]) -> None:
    joined = c.join(group, None, ["kv"])
    c.commit(group, joined["member_id"], joined["generation"], {"kv": offsets})


def _answer(body: bytes) -> tuple[dict, list[list[str]]]:
    head, rows = split_group_tsv(body)
    return head, [line.split("\t") for line in bytes(rows).decode().splitlines()]


def test_the_coordinator_answers_changed_groups_since_a_version():
    c = _coordinator()
    _consume(c, "billing", {0: 10, 1: 20})
    _consume(c, "audit", {0: 5})
    head, rows = _answer(c.changes(None))
    assert head["full"] is True
    assert [g[0] for g in head["groups"]] == ["audit", "billing"]
    assert [r[:4] for r in rows] == [
        ["audit", "kv", "0", "5"],
        ["billing", "kv", "0", "10"],
        ["billing", "kv", "1", "20"],
    ]
    since = head["version"]
    head, rows = _answer(c.changes(since))
    assert head == {"version": since, "full": False, "groups": []} and rows == []
    # one commit: that group, whole (every position it holds), and nothing else
    member = c.view("billing")["members"][0]["member_id"]
    c.commit("billing", member, c.view("billing")["generation"], {"kv": {1: 25}})
    head, rows = _answer(c.changes(since))
    assert head["full"] is False and head["version"] > since
    assert [g[0] for g in head["groups"]] == ["billing"]
    assert [r[2:4] for r in rows] == [["0", "10"], ["1", "25"]]
    # a version this coordinator never gave (a previous life, another controller): in full
    assert _answer(c.changes(since - 10**9))[0]["full"] is True
    assert _answer(c.changes(head["version"] + 10**9))[0]["full"] is True


class _CoordinatorSource:
    """A console sync source whose controller is ``coordinator`` (metadata from ``builder``)."""

    def __init__(self, builder, coordinator: GroupCoordinator):
        self.inner = builder.source()
        self.coordinator = coordinator
        self.asked: list[int | None] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def group_changes(self, since):
        self.asked.append(since)
        return self.coordinator.changes(since)


def _positions(cluster) -> dict[tuple[str, int], tuple[int, object]]:
    return {
        (r.group_id, r.partition): (r.committed_offset, r.synced_at)
        for r in GroupOffset.objects.filter(cluster=cluster)
    }


def test_positions_emptied_by_a_crash_are_asked_for_in_full_again(cluster, builder):
    """Positions are UNLOGGED like partitions and replicas (migration 0022): a crash empties
    the three together while the cluster keeps its ``groups_version``. The next sync, though
    not full, asks the coordinator for every group (a delta would restore none of them)."""
    builder.add_topic("kv", partitions=3, rf=3, records=100)
    c = _coordinator()
    _consume(c, "billing", {0: 10, 1: 20})
    _consume(c, "audit", {0: 5})
    source = _CoordinatorSource(builder, c)
    do_sync_cluster(cluster, source=source)
    before = {k: offset for k, (offset, _) in _positions(cluster).items()}
    version = Cluster.objects.get(pk=cluster.pk).groups_version
    with connection.cursor() as cur:  # what a crash leaves
        cur.execute("TRUNCATE console_partition, console_replica, console_groupoffset")
    run = do_sync_cluster(cluster, source=source).run
    assert run.ok and not run.full
    assert source.asked == [None, None]
    assert {k: offset for k, (offset, _) in _positions(cluster).items()} == before
    assert ConsumerGroup.objects.get(cluster=cluster, group_id="billing").positions == 2
    do_sync_cluster(cluster, source=source)  # rebuilt: incremental again
    assert source.asked[-1] == Cluster.objects.get(pk=cluster.pk).groups_version >= version


def test_the_sync_merges_only_the_groups_changed_since_it_last_asked(cluster, builder):
    builder.add_topic("kv", partitions=3, rf=3, records=100)
    c = _coordinator()
    _consume(c, "billing", {0: 10, 1: 20})
    _consume(c, "audit", {0: 5})
    source = _CoordinatorSource(builder, c)
    do_sync_cluster(cluster, source=source)
    cluster.refresh_from_db()
    assert source.asked == [None] and cluster.groups_version == c.version
    asked_since = cluster.groups_version
    first = _positions(cluster)
    assert set(first) == {("billing", 0), ("billing", 1), ("audit", 0)}
    groups = {g.group_id: g for g in ConsumerGroup.objects.filter(cluster=cluster)}
    assert groups["billing"].positions == 2 and groups["billing"].members == 1
    # nothing changed: asked since, nothing written
    do_sync_cluster(cluster, source=source)
    assert source.asked == [None, asked_since] and _positions(cluster) == first
    assert Cluster.objects.get(pk=cluster.pk).groups_version == asked_since

    # billing moves one position and drops the other (its member leaves, a new one commits one)
    member = c.view("billing")["members"][0]["member_id"]
    c.commit("billing", member, c.view("billing")["generation"], {"kv": {0: 30}})
    c.groups["billing"]["offsets"]["kv"].pop("1")
    c._save(c.groups["billing"])
    do_sync_cluster(cluster, source=source)
    assert source.asked[-1] == asked_since
    second = _positions(cluster)
    assert set(second) == {("billing", 0), ("audit", 0)}
    assert second[("billing", 0)][0] == 30
    assert second[("audit", 0)] == first[("audit", 0)]  # not in the answer: untouched
    assert ConsumerGroup.objects.get(cluster=cluster, group_id="billing").positions == 1

    # the coordinator fails: the rows and the version stay
    version = Cluster.objects.get(pk=cluster.pk).groups_version

    def failing(since):
        raise ConnectionError("coordinator: connection refused")

    source.group_changes = failing
    run = do_sync_cluster(cluster, source=source).run
    assert "groups" in run.errors and _positions(cluster) == second
    assert Cluster.objects.get(pk=cluster.pk).groups_version == version

    # a full answer (a --full sync) removes the groups it does not list
    del source.group_changes
    c.groups.pop("audit")
    do_sync_cluster(cluster, source=source, full=True)
    assert source.asked[-1] is None
    assert set(_positions(cluster)) == {("billing", 0)}
    assert list(
        ConsumerGroup.objects.filter(cluster=cluster).values_list("group_id", flat=True)
    ) == ["billing"]


def test_synthetic_groups_answer_like_the_coordinator_and_move_with_churn():
    cluster = SyntheticCluster("s", 6, 2, 0, 0, topic_sizes=[3, 1, 5, 2])
    groups = SyntheticGroups(cluster, 6)
    cluster.groups = groups
    head, rows = _answer(groups.changes_body(None))
    assert head["full"] is True and len(head["groups"]) == 6
    # every group holds a position on each partition of its topic, at or behind the log end
    assert len(rows) == sum(cluster.sizes[groups.topic[g]] for g in range(6))
    for _name, topic, p, offset, _gen, _members in rows:
        i = cluster.topic_start[cluster.topic_index(topic)] + int(p)
        assert cluster.lso[i] <= int(offset) <= cluster.leo[i]
    since = head["version"]
    assert _answer(groups.changes_body(since))[0]["groups"] == []
    cluster.churn(0.5, seed=1)  # half the partitions move, and half the groups commit
    head, rows = _answer(groups.changes_body(since))
    assert head["full"] is False and len(head["groups"]) == 3
    assert {r[0] for r in rows} == {g[0] for g in head["groups"]}


def test_the_groups_api_pages_groups_by_id(client, viewer, cluster, builder):
    builder.add_topic("kv", partitions=3, rf=3, records=100)
    c = _coordinator()
    for name in ("c", "a", "b"):
        _consume(c, name, {0: 10, 2: 100})
    do_sync_cluster(cluster, source=_CoordinatorSource(builder, c))
    client.force_login(viewer)
    first = client.get("/api/v1/clusters/local/groups?page_size=2").json()
    assert (first["count"], first["page"], first["page_size"], first["num_pages"]) == (3, 1, 2, 2)
    assert [g["group_id"] for g in first["groups"]] == ["a", "b"]
    (last,) = client.get("/api/v1/clusters/local/groups?page_size=2&page=2").json()["groups"]
    assert last["group_id"] == "c" and last["members"] == 1 and last["positions_count"] == 2
    assert [(p["partition"], p["committed_offset"], p["lag"]) for p in last["positions"]] == [
        (0, 10, 90),
        (2, 100, 0),
    ]
    assert last["lag"] == 90


def test_a_group_s_positions_are_capped_in_the_list_and_paged_on_its_own_route(
    client, viewer, cluster, builder
):
    builder.add_topic("big", partitions=250, rf=1, records=0)
    builder.groups = [
        GroupView(
            group_id="wide",
            generation=3,
            members=[],
            offsets={"big": {p: 0 for p in range(250)}},
        )
    ]
    for p in (0, 249):
        builder.produce("big", p, 7)
    sync(cluster, builder)
    client.force_login(viewer)
    (g,) = client.get("/api/v1/clusters/local/groups").json()["groups"]
    assert (g["positions_count"], len(g["positions"]), g["lag"]) == (250, 100, 14)
    assert [p["partition"] for p in g["positions"]] == list(range(100))
    one = client.get("/api/v1/clusters/local/groups/wide?page=3&page_size=100").json()
    assert (one["generation"], one["lag"], one["positions_count"]) == (3, 14, 250)
    assert (one["page"], one["num_pages"]) == (3, 3)
    assert [p["partition"] for p in one["positions"]] == list(range(200, 250))
    assert one["positions"][-1]["lag"] == 7
    assert client.get("/api/v1/clusters/local/groups/nope").status_code == 404


def test_a_position_on_a_partition_that_is_gone_has_no_lag(client, viewer, cluster, builder):
    """The list and the group's route look the high watermarks up the same way: a position on
    a partition the cluster no longer has is listed, without a lag."""
    builder.add_topic("kv", partitions=1, rf=1, records=0)
    builder.produce("kv", 0, 4)
    builder.groups = [
        GroupView(group_id="g", generation=1, members=[], offsets={"gone": {0: 5}, "kv": {0: 1}})
    ]
    sync(cluster, builder)
    client.force_login(viewer)
    expected = [("gone", 0, 5, None), ("kv", 0, 1, 3)]

    def rows(positions):
        return [(p["topic"], p["partition"], p["committed_offset"], p["lag"]) for p in positions]

    (g,) = client.get("/api/v1/clusters/local/groups").json()["groups"]
    assert rows(g["positions"]) == expected and g["lag"] == 3
    one = client.get("/api/v1/clusters/local/groups/g").json()
    assert rows(one["positions"]) == expected
    assert (one["positions_count"], one["lag"]) == (2, 3)


def test_the_topic_ordering_is_bounded_in_groups_and_rows(client, viewer, cluster, builder):
    """25 groups on a topic expanded from 2 to 130 partitions: the first 20 groups by id, the
    first 100 of each one's 128 gated partitions (held ones first), and the counts."""
    builder.add_topic("wide", partitions=2, rf=3, records=100)
    builder.alter_partition_count("wide", 130)
    started = {p: 0 for p in range(100, 130)}  # the group has read these new ones' first record
    for p in started:
        builder.produce("wide", p, 5)
    builder.groups = [
        GroupView(
            group_id=f"g{i:02d}",
            generation=1,
            members=[],
            offsets={"wide": {0: 50, 1: 100, **{p: 1 for p in started}}},
        )
        for i in range(25)
    ]
    sync(cluster, builder)
    client.force_login(viewer)
    ordering = client.get("/api/v1/clusters/local/topics/wide").json()["ordering"]
    assert ordering["groups_count"] == 25
    assert [g["group_id"] for g in ordering["groups"]] == [f"g{i:02d}" for i in range(20)]
    g = ordering["groups"][0]
    assert g["partitions_count"] == 128 and len(g["partitions"]) == 100
    statuses = [r["status"] for r in g["partitions"]]
    # held first; one expansion by 6+ doublings: each new partition waits on the one of 0 and 1
    # it descends from, the partitions that existed before it (KIP-253 step 4.2)
    assert statuses == [f"waits on {p % 2}" for p in range(2, 100)] + ["released"] * 2
    assert [r["partition"] for r in g["partitions"][:3]] == [2, 3, 4]
    # lag over every partition: 50 on partition 0, none on 1, 4 on each started new one, none
    # on the empty new ones it has not started
    assert g["lag"] == 50 + 30 * 4 + 0
    html = client.get("/topics/local/wide/").content.decode()
    assert "The first 100 of 128 gated partitions, held ones first." in html
    assert "20 of the 25 groups with positions on this topic" in html


@pytest.mark.integration
def test_a_synthetic_fleet_s_groups_sync_in_full_then_since(tmp_path):
    """The synthetic fleet's coordinator over HTTP: the first sync stores every position, a
    churn moves a tenth of the groups, and the next sync (asked ``since``) leaves the console
    holding exactly what the coordinator holds."""
    data = tmp_path / "syn"
    try:
        out = run_cli(
            data,
            "up",
            "--brokers",
            "6",
            "--log-dirs",
            "2",
            "--synthetic-fleet",
            "3000",
            "--synthetic-groups",
            "40",
            "--synthetic-tick-interval",
            "0",
        )
        urls = json.loads(out.stdout.strip().splitlines()[-1])
        cluster = Cluster.objects.create(
            name="fleet", controller_url=urls["controller"], secret_ref=str(data / "secret")
        )
        secret = (data / "secret").read_bytes().strip()
        with ControllerClient(urls["controller"], secret) as ctl:

            def coordinator() -> dict[tuple[str, str, int], int]:
                _head, rows = _answer(ctl.group_changes_tsv())
                return {(g, t, int(p)): int(o) for g, t, p, o, _gen, _m in rows}

            run = do_sync_cluster(cluster).run
            assert not run.errors, run.errors
            assert ConsumerGroup.objects.filter(cluster=cluster).count() == 40
            assert _stored(cluster) == coordinator()
            first = Cluster.objects.get(pk=cluster.pk).groups_version
            run_cli(data, "churn", "--fraction", "0.1", "--seed", "3")
            moved = coordinator()
            assert moved != _stored(cluster)
            do_sync_cluster(Cluster.objects.get(pk=cluster.pk))
            assert Cluster.objects.get(pk=cluster.pk).groups_version > first
            assert _stored(cluster) == moved
    finally:
        run_cli(data, "down", check=False)


def _stored(cluster) -> dict[tuple[str, str, int], int]:
    return {
        (g, t, p): o
        for g, t, p, o in GroupOffset.objects.filter(cluster=cluster).values_list(
            "group_id", "topic_name", "partition", "committed_offset"
        )
    }


def test_a_sync_that_writes_many_positions_analyses_them(cluster, builder, monkeypatch):
    """The planner's statistics of the positions are refreshed by the sync that bulk-wrote
    them (a server may run without autovacuum, and it waits a minute where it runs); a sync
    that wrote fewer than ANALYZE_AFTER_ROWS leaves them alone."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from console.sync import core

    builder.add_topic("kv", partitions=3, rf=3, records=100)
    c = _coordinator()
    _consume(c, "billing", {0: 10, 1: 20, 2: 30})
    source = _CoordinatorSource(builder, c)

    def analysed() -> list[str]:
        with CaptureQueriesContext(connection) as ctx:
            do_sync_cluster(cluster, source=source)
        return [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("ANALYZE console_")]

    monkeypatch.setattr(core, "ANALYZE_AFTER_ROWS", 3)
    # a first sync: 3 positions written (and its topics, partitions and replicas analysed)
    assert any(s.endswith("console_consumergroup, console_groupoffset") for s in analysed())
    with connection.cursor() as cur:
        cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'console_groupoffset'")
        assert cur.fetchone()[0] == GroupOffset.objects.count() == 3
    member = c.view("billing")["members"][0]["member_id"]
    c.commit("billing", member, c.view("billing")["generation"], {"kv": {0: 11, 1: 21}})
    assert not any("console_groupoffset" in s for s in analysed())  # 2 positions moved
