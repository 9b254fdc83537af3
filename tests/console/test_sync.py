"""Sync: controller metadata and agent snapshots land in PostgreSQL, in bulk, incrementally."""

from __future__ import annotations

import pytest
from django.db import connection

from broker_agent.contract.models import GroupView, snapshot_tsv
from console.choices import BrokerState, LogDirState, TieredState
from console.models import (
    Broker,
    Cluster,
    GroupOffset,
    LogDir,
    Partition,
    Replica,
    SyncRun,
    Topic,
)
from console.sync import do_sync_cluster
from tests.console.conftest import sync
from tests.console.factories import BuilderSource, ClusterBuilder

pytestmark = pytest.mark.django_db


def test_full_sync_builds_the_inventory(cluster, builder):
    run = sync(cluster, builder)
    assert run.ok and run.metadata_changed and run.brokers_synced == 3
    assert Broker.objects.filter(cluster=cluster, state=BrokerState.ONLINE).count() == 3
    assert LogDir.objects.filter(broker__cluster=cluster).count() == 6
    assert Topic.objects.filter(cluster=cluster).count() == 3
    assert Partition.objects.filter(cluster=cluster).count() == 10
    assert Replica.objects.filter(cluster=cluster).count() == 6 * 3 + 3 * 3 + 1
    cluster.refresh_from_db()
    assert cluster.partition_count == 10 and cluster.topic_count == 3
    assert cluster.synced_at is not None and cluster.controller_error == ""


def test_a_first_sync_stores_a_topics_partitions_and_replicas_side_by_side(cluster, builder):
    """#17: partitions are stored in (topic, partition) order and replicas in partition order
    (as after CLUSTER on their keys), not in the order the agents answered: a later sync
    rewrites a partition's replicas on one page, not one per broker, and a topic page reads
    its partitions from neighbouring pages."""
    sync(cluster, builder)

    def stored(columns: str, table: str) -> list[tuple]:
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT {columns} FROM {table} WHERE cluster_id = %s ORDER BY ctid",  # noqa: S608
                [cluster.pk],
            )
            return cur.fetchall()

    replicas = stored("partition_id, broker_id", "console_replica")
    partitions = stored("topic_name, partition", "console_partition")
    assert len(replicas) == 28 and replicas == sorted(replicas)
    assert len(partitions) == 10 and partitions == sorted(partitions)


def test_partition_offsets_are_the_leaders_remote_and_local_ranges(synced, builder):
    """KIP-950: remote Rx..Ry and local Lx..log end, from the partition leader's replica."""
    p = Partition.objects.get(cluster=synced, topic_name="orders", partition=0)
    assert (p.remote_log_start_offset, p.remote_log_end_offset) == (0, 399)
    assert (p.local_log_start_offset, p.log_end_offset) == (200, 1000)
    topic = Topic.objects.get(cluster=synced, name="orders")
    assert topic.tiered_state == TieredState.ENABLED
    assert topic.remote_bytes == 6 * 400 * 100
    assert topic.log_end_offset == 6 * 1000  # topic totals are sums over partitions


def test_nothing_changed_means_nothing_rewritten(synced, builder):
    run = sync(synced, builder)
    assert not run.metadata_changed
    assert run.partitions_upserted == 0 and run.replicas_upserted == 0


def test_agents_are_asked_incrementally_from_the_version_applied(synced, builder):
    builder.produce("orders", 2, 50)
    source = builder.source()
    from console.sync import do_sync_cluster

    run = do_sync_cluster(synced, source=source).run
    since = {bid: s for kind, bid, s in source.requests if kind == "snapshot"}
    assert all(s is not None for s in since.values())
    assert run.replicas_upserted == 3  # the three replicas of orders-2, nothing else
    assert Partition.objects.get(topic_name="orders", partition=2).log_end_offset == 1050


def test_a_cordoned_dir_shows_cordoned_but_online_and_is_not_an_offline_dir(
    synced, builder, client, viewer
):
    """KIP-1066: a cordon only stops new replicas on the dir; its replicas keep serving, and
    KIP-112's OfflineLogDirectoryCount counts only failed dirs."""
    builder.cordon_log_dir(2, "logdir-0")
    assert sync(synced, builder).ok
    d = LogDir.objects.get(broker__broker_id=2, name="logdir-0")
    assert d.cordoned and d.state == LogDirState.ONLINE and d.offline_replica_count == 0
    broker = Broker.objects.get(cluster=synced, broker_id=2)
    assert broker.state == BrokerState.ONLINE
    assert broker.offline_log_directory_count == broker.offline_replica_count == 0
    client.force_login(viewer)
    page = client.get(f"/brokers/?cluster={synced.name}").content.decode()
    cell = page.split('data-dir="2:logdir-0"', 1)[1].split("</td>", 1)[0]
    assert 'data-state="ONLINE"' in cell and "data-cordoned" in cell
    assert "data-cordoned" not in page.split('data-dir="2:logdir-1"', 1)[1].split("</td>", 1)[0]
    # the dir's own panel says so too, beside its ONLINE state
    panel = client.get(f"/brokers/?cluster={synced.name}&dir=2:logdir-0").content.decode()
    heading = panel.split('id="incident-h"', 1)[1].split("</h2>", 1)[0]
    assert "ONLINE" in heading and "data-cordoned" in heading and "Incident" not in heading


def test_log_dir_failure_shows_offline_dir_and_kip112_counts(synced, builder):
    builder.fail_log_dir(2, "logdir-0")
    run = sync(synced, builder)
    assert run.ok
    d = LogDir.objects.get(broker__broker_id=2, name="logdir-0")
    assert d.state == LogDirState.OFFLINE and d.error == "Permission denied"
    assert d.state_changed_at is not None
    broker = Broker.objects.get(cluster=synced, broker_id=2)
    offline = Replica.objects.filter(log_dir=d).count()
    assert broker.state == BrokerState.DEGRADED
    assert broker.offline_log_directory_count == 1
    assert broker.offline_replica_count == offline == d.offline_replica_count > 0
    moved = Partition.objects.filter(previous_leader=2, leader_changed_at__isnull=False)
    assert moved.exists() and not moved.filter(leader=2).exists()
    synced.refresh_from_db()
    assert synced.offline_replica_count == offline

    builder.heal_log_dir(2, "logdir-0")
    sync(synced, builder)
    broker.refresh_from_db()
    assert broker.state == BrokerState.ONLINE and broker.offline_replica_count == 0
    assert broker.offline_log_directory_count == 0


def test_a_failing_agent_is_stale_with_its_last_good_time_and_others_keep_syncing(synced, builder):
    good_before = Broker.objects.get(cluster=synced, broker_id=3).last_good_at
    builder.produce("orders", 0, 10)  # replicas on brokers 1, 2, 3
    run = sync(synced, builder, down={3})
    assert run.brokers_failed == 1 and "broker 3" in run.errors
    b3 = Broker.objects.get(cluster=synced, broker_id=3)
    assert b3.stale and "connection refused" in b3.error
    assert b3.last_good_at == good_before
    b1 = Broker.objects.get(cluster=synced, broker_id=1)
    assert not b1.stale and b1.last_good_at > good_before
    assert Partition.objects.get(topic_name="orders", partition=0).log_end_offset == 1010

    run = sync(synced, builder)
    b3.refresh_from_db()
    assert not b3.stale and run.ok


def test_a_failing_controller_keeps_the_last_good_metadata(synced, builder):
    last_good = Cluster.objects.get(pk=synced.pk).controller_last_good_at
    run = sync(synced, builder, down={-1})
    assert not run.controller_ok
    synced.refresh_from_db()
    assert synced.controller_stale and synced.controller_last_good_at == last_good
    assert Topic.objects.filter(cluster=synced).count() == 3
    assert run.brokers_synced == 3  # the agents still synced


def test_offline_replica_count_is_a_live_brokers_and_a_dead_brokers_replicas_count_as_down(
    synced, builder
):
    """KIP-112 (#14 gap 6): OfflineReplicaCount is what a live broker reports, its replicas on
    its offline dirs; a dead broker reports nothing, its replicas are counted apart as down."""
    builder.fail_log_dir(1, "logdir-1")
    builder.kill_broker(3)
    sync(synced, builder)
    b1 = Broker.objects.get(cluster=synced, broker_id=1)
    on_bad_dir = Replica.objects.filter(broker=b1, log_dir__name="logdir-1").count()
    assert on_bad_dir > 0
    assert (b1.offline_replica_count, b1.down_replica_count) == (on_bad_dir, 0)
    b3 = Broker.objects.get(cluster=synced, broker_id=3)
    assert b3.state == BrokerState.OFFLINE and b3.stale and not b3.alive
    replicas_on_3 = Replica.objects.filter(broker=b3).count()
    assert (b3.offline_replica_count, b3.down_replica_count) == (0, replicas_on_3)


def test_expansion_records_the_count_before_for_key_lookups(synced, builder):
    builder.alter_partition_count("payments", 5)
    sync(synced, builder)
    t = Topic.objects.get(cluster=synced, name="payments")
    assert (t.initial_partition_count, t.undeleted_partition_count) == (3, 5)
    assert t.previous_undeleted_partition_count == 3 and t.partition_count == 5
    assert Replica.objects.filter(partition__topic=t).count() == 5 * 3


def test_shrink_marks_then_a_drained_partition_is_removed(synced, builder):
    builder.alter_partition_count("orders", 4)
    sync(synced, builder)
    marked = Partition.objects.filter(topic_name="orders", marked_for_deletion=True)
    assert sorted(marked.values_list("partition", flat=True)) == [4, 5]
    assert all(p.marked_log_start_offset is not None for p in marked)
    builder.remove_partition("orders", 5)
    run = sync(synced, builder)
    assert not Partition.objects.filter(topic_name="orders", partition=5).exists()
    assert run.ok
    assert Topic.objects.get(cluster=synced, name="orders").marked_for_deletion_count == 1


def test_deleted_topic_disappears_with_its_replicas(synced, builder):
    builder.delete_topic("payments")
    sync(synced, builder)
    assert not Topic.objects.filter(name="payments").exists()
    assert not Replica.objects.filter(partition__topic_name="payments").exists()


def test_tiering_disablement_shows_new_state_and_epoch(synced, builder):
    builder.disable_tiering("orders", policy="delete")
    sync(synced, builder)
    t = Topic.objects.get(cluster=synced, name="orders")
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == (
        TieredState.DISABLING,
        1,
        "delete",
    )


def test_every_sync_is_recorded(synced, builder):
    sync(synced, builder)
    assert SyncRun.objects.filter(cluster=synced).count() == 2


@pytest.mark.parametrize("topics", [2, 40])
def test_sync_uses_a_bounded_number_of_queries(cluster, topics, django_assert_max_num_queries):
    """Bulk: the same number of statements for 2 or 40 topics (never one query per row)."""
    b = ClusterBuilder(brokers=4, log_dirs=2)
    for i in range(topics):
        b.add_topic(f"t{i}", partitions=8, rf=3)
    with django_assert_max_num_queries(60):
        sync(cluster, b)
    assert Replica.objects.filter(cluster=cluster).count() == topics * 8 * 3


def test_a_partition_level_delta_touches_only_what_it_lists(synced, builder):
    """Controllers that can answer ``delta=true`` send only changed partitions of changed
    topics, and deletions as lists; nothing else is rewritten or deleted."""
    from broker_agent.contract.models import ClusterMetadata
    from console.sync import StaticClusterSource, do_sync_cluster

    part = builder.topics["orders"].parts[2]
    builder._replica_offline(part, part.leader)  # leadership moves
    builder.delete_topic("audit.log")
    builder.remove_partition("payments", 2)
    full = builder.metadata()
    orders = next(t for t in full.topics if t.name == "orders")
    delta = ClusterMetadata(
        cluster_id=full.cluster_id,
        version=full.version,
        brokers=full.brokers,
        topics=[orders.model_copy(update={"partitions": [orders.partitions[2]]})],
        full=False,
        since=synced.metadata_version,
        removed_topics=["audit.log"],
        removed_partitions=["payments:2"],
    )
    snapshots = {b: builder.snapshot(b) for b in builder.broker_ids}
    run = do_sync_cluster(synced, source=StaticClusterSource(delta, snapshots)).run
    assert run.ok and run.partitions_upserted == 1
    assert not Topic.objects.filter(name="audit.log").exists()
    assert not Partition.objects.filter(topic_name="payments", partition=2).exists()
    assert Partition.objects.filter(topic_name="orders").count() == 6  # the others are kept
    p2 = Partition.objects.get(topic_name="orders", partition=2)
    assert p2.leader == part.leader and p2.previous_leader == 3
    assert Topic.objects.get(name="orders").metadata_digest == ""  # a full answer rewrites it


# Partition's and Replica's foreign keys have no database constraint (sync-owned, see
# console.models.topology): nothing but the sync and the ORM's cascades keeps them whole.
DANGLING_SQL = {
    "replica -> partition": "SELECT count(*) FROM console_replica r WHERE NOT EXISTS "
    "(SELECT 1 FROM console_partition p WHERE p.id = r.partition_id)",
    "replica -> broker": "SELECT count(*) FROM console_replica r WHERE NOT EXISTS "
    "(SELECT 1 FROM console_broker b WHERE b.id = r.broker_id)",
    "replica -> log dir": "SELECT count(*) FROM console_replica r WHERE r.log_dir_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM console_logdir d WHERE d.id = r.log_dir_id)",
    "replica -> cluster": "SELECT count(*) FROM console_replica r WHERE NOT EXISTS "
    "(SELECT 1 FROM console_cluster c WHERE c.id = r.cluster_id)",
    "partition -> topic": "SELECT count(*) FROM console_partition p WHERE NOT EXISTS "
    "(SELECT 1 FROM console_topic t WHERE t.id = p.topic_id)",
    "partition -> cluster": "SELECT count(*) FROM console_partition p WHERE NOT EXISTS "
    "(SELECT 1 FROM console_cluster c WHERE c.id = p.cluster_id)",
    "group position -> cluster": "SELECT count(*) FROM console_groupoffset g WHERE NOT EXISTS "
    "(SELECT 1 FROM console_cluster c WHERE c.id = g.cluster_id)",
}


def dangling() -> dict[str, int]:
    from django.db import connection

    out = {}
    with connection.cursor() as cur:
        for name, statement in DANGLING_SQL.items():
            cur.execute(statement)
            out[name] = cur.fetchone()[0]
    return {k: v for k, v in out.items() if v}


def test_no_dangling_rows_after_topic_partition_and_log_dir_removal(synced, builder):
    before = Replica.objects.count()
    builder.delete_topic("payments")  # a whole topic
    builder.alter_partition_count("orders", 4)
    builder.remove_partition("orders", 5)  # one drained partition (KIP-253)
    builder.dirs[2].pop("logdir-1")  # a log dir removed from broker 2's config
    builder._touch(2)
    run = sync(synced, builder)
    assert run.ok
    assert Replica.objects.count() < before
    assert dangling() == {}
    # A full sync deletes unlisted partitions the other way (not a delta's removed list).
    builder.alter_partition_count("orders", 3)
    builder.remove_partition("orders", 4)
    builder.remove_partition("orders", 3)
    sync(synced, builder, full=True)
    assert not Partition.objects.filter(topic_name="orders", partition__gte=3).exists()
    assert dangling() == {}


def test_no_dangling_rows_after_orm_deletes(synced, builder):
    """Deleting through the ORM still cascades (Django's on_delete, not the database's)."""
    builder.groups = [
        GroupView(group_id="billing", generation=1, members=[], offsets={"orders": {0: 5}})
    ]
    assert sync(synced, builder).ok and GroupOffset.objects.filter(cluster=synced).exists()
    Broker.objects.get(cluster=synced, broker_id=3).delete()
    assert dangling() == {}
    Topic.objects.get(cluster=synced, name="orders").delete()
    assert dangling() == {}
    LogDir.objects.filter(broker__cluster=synced).first().delete()
    assert dangling() == {}
    synced.delete()
    assert dangling() == {}
    assert not Replica.objects.exists() and not Partition.objects.exists()
    assert not GroupOffset.objects.exists()


# -- agents' answers as rows (format=tsv), and the JSON they may still send ----------------------


class _Rewritten(BuilderSource):
    """The builder's answers in format=tsv, passed through ``rewrite(broker_id, body)``."""

    def __init__(self, builder: ClusterBuilder, rewrite):
        super().__init__(builder, set())
        self.rewrite = rewrite

    def snapshot_tsv(self, broker_id: int, url: str, since: int | None) -> bytes:
        return self.rewrite(broker_id, snapshot_tsv(self.snapshot(broker_id, url, since)))


def _inventory(cluster) -> list[tuple]:
    return sorted(
        Replica.objects.filter(cluster=cluster).values_list(
            "partition__topic_name",
            "partition__partition",
            "broker__broker_id",
            "log_dir__name",
            "state",
            "is_leader",
            "log_start_offset",
            "log_end_offset",
            "remote_log_start_offset",
            "remote_log_end_offset",
            "remote_bytes",
            "copier_state",
        )
    )


def _with_row(body: bytes, change) -> bytes:
    head, _, rows = body.partition(b"\n")
    lines = rows.decode().splitlines()
    lines[0] = "\t".join(change(lines[0].split("\t")))
    return head + b"\n" + "\n".join(lines).encode() + b"\n"


def test_a_json_answer_from_an_older_agent_syncs_the_same_inventory(cluster, builder):
    assert sync(cluster, builder).ok
    by_rows = _inventory(cluster)
    Cluster.objects.filter(pk=cluster.pk).delete()
    again = Cluster.objects.create(
        name="again", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    as_json = _Rewritten(
        builder,
        lambda b, body: builder.snapshot(b, None).model_dump_json().encode(),
    )
    run = do_sync_cluster(again, source=as_json, full=True).run
    assert run.ok and run.brokers_synced == 3
    assert _inventory(again) == by_rows and by_rows


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda f: [*f[:4], "\\N", *f[5:]], "bad replica row"),  # state missing
        (lambda f: f[:-1], "bad replica row"),  # a column short
        (lambda f: [*f[:2], "zero", *f[3:]], "bad replica row"),  # partition not a number
    ],
)
def test_a_malformed_row_fails_that_agent_only(synced, builder, change, error):
    builder.produce("orders", 0, 10)
    source = _Rewritten(builder, lambda b, body: _with_row(body, change) if b == 2 else body)
    run = do_sync_cluster(synced, source=source).run
    assert run.brokers_failed == 1 and run.brokers_synced == 2
    b2 = Broker.objects.get(cluster=synced, broker_id=2)
    assert b2.stale and error in b2.error
    assert not Broker.objects.get(cluster=synced, broker_id=1).stale
    assert Partition.objects.get(topic_name="orders", partition=0).log_end_offset == 1010


def test_a_line_copy_reads_as_its_end_of_data_fails_that_agent_only(synced, builder):
    """Agents' answers are COPY-ed together: a line ``\\.`` (COPY's end of data in its text
    format) in one answer must not cut the others short, nor be taken for a shorter answer."""
    builder.produce("orders", 0, 10)
    cut = _Rewritten(
        builder, lambda b, body: body.replace(b"\n", b"\n\\.\n", 1) if b == 1 else body
    )
    run = do_sync_cluster(synced, source=cut).run
    assert run.brokers_failed == 1 and run.brokers_synced == 2
    assert "agent snapshot" in Broker.objects.get(cluster=synced, broker_id=1).error
    assert not Broker.objects.get(cluster=synced, broker_id=3).stale
    after = Replica.objects.get(
        partition__topic_name="orders", partition__partition=0, broker__broker_id=3
    )
    assert after.log_end_offset == 1010  # staged after the cut one, in the same batch


def test_an_answer_for_another_broker_is_refused(synced, builder):
    source = _Rewritten(
        builder,
        lambda b, body: snapshot_tsv(builder.snapshot(1, None)) if b == 3 else body,
    )
    run = do_sync_cluster(synced, source=source).run
    b3 = Broker.objects.get(cluster=synced, broker_id=3)
    assert run.brokers_failed == 1 and "broker 1 answered for broker 3" in b3.error


GHOST_ROW = (
    b"1\tghost\t0\tlogdir-0\tONLINE\tt\t0\t0\t0\t5\t5\t10\t0\tSTOPPED\tSTOPPED\t-1\t-1\t0\t0"
    b"\t0\t0\t0\t0\t0\t0\t0\t1\n"
)


@pytest.mark.parametrize("first_sync", [True, False])
def test_a_replica_of_a_partition_the_controller_does_not_list_yet_is_fetched_again(
    cluster, builder, first_sync
):
    """An agent ahead of the controller (a topic just created): its unknown replica is not
    written and its version is not advanced, so the next sync asks it again."""
    if not first_sync:
        assert sync(cluster, builder).ok
    before = (
        Broker.objects.get(cluster=cluster, broker_id=1).snapshot_version if not first_sync else -1
    )
    known = Replica.objects.filter(cluster=cluster).count()
    ahead = _Rewritten(builder, lambda b, body: body + GHOST_ROW if b == 1 else body)
    run = do_sync_cluster(cluster, source=ahead, full=True).run
    assert run.brokers_synced == 3
    assert not Replica.objects.filter(cluster=cluster, partition__topic_name="ghost").exists()
    assert Replica.objects.filter(cluster=cluster).count() == (known or 6 * 3 + 3 * 3 + 1)
    b1 = Broker.objects.get(cluster=cluster, broker_id=1)
    assert b1.snapshot_version == before  # asked from where it was next time
    assert Broker.objects.get(cluster=cluster, broker_id=2).snapshot_version >= 0  # applied


def test_a_cluster_whose_partitions_were_emptied_is_rebuilt_by_the_next_sync(synced, builder):
    """Partitions and replicas are UNLOGGED (migration 0019): after a crash PostgreSQL empties
    them while the cluster, its brokers and topics keep the versions they last applied. The
    next sync, though not asked to be full, asks the controller and every agent for everything
    and rebuilds them as they were."""
    builder.produce("orders", 2, 50)
    assert sync(synced, builder).ok
    before = _inventory(synced)
    partitions = sorted(
        Partition.objects.filter(cluster=synced).values_list(
            "topic_name", "partition", "log_end_offset"
        )
    )
    with connection.cursor() as cur:  # what a crash leaves: both tables empty, nothing else
        cur.execute("TRUNCATE console_partition, console_replica")
    source = builder.source()
    run = do_sync_cluster(synced, source=source).run
    assert run.ok and not run.full
    assert {s for kind, _, s in source.requests if kind == "snapshot"} == {None}
    assert _inventory(synced) == before and before
    assert (
        sorted(
            Partition.objects.filter(cluster=synced).values_list(
                "topic_name", "partition", "log_end_offset"
            )
        )
        == partitions
    )
    assert Topic.objects.get(cluster=synced, name="orders").log_end_offset == sum(
        end for topic, _, end in partitions if topic == "orders"
    )
    again = do_sync_cluster(synced, source=(source := builder.source())).run
    assert again.ok and all(s is not None for kind, _, s in source.requests if kind == "snapshot")


def test_the_sync_copy_is_unlogged_and_what_the_console_decides_is_not():
    with connection.cursor() as cur:
        cur.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relkind = 'r' AND relname IN "
            "('console_partition', 'console_replica', 'console_groupoffset', 'console_topic', "
            "'console_cluster', 'workflows_workflow', 'workflows_auditevent')"
        )
        persistence = dict(cur.fetchall())
    unlogged = ("console_partition", "console_replica", "console_groupoffset")
    assert [persistence.pop(table) for table in unlogged] == ["u"] * 3
    assert persistence == dict.fromkeys(persistence, "p") and len(persistence) == 4


class _LaggingController(_Rewritten):
    """A controller whose heartbeat view of the log dirs lags the agents': all ONLINE."""

    def metadata(self, since: int | None):
        md = super().metadata(since)
        for b in md.brokers:
            b.log_dirs = [
                d.model_copy(update={"state": LogDirState.ONLINE, "error": None})
                for d in b.log_dirs
            ]
        return md


@pytest.mark.parametrize("answer", ["tsv", "json"])
def test_an_agents_own_view_of_its_log_dirs_wins_over_the_controllers(synced, builder, answer):
    builder.fail_log_dir(2, "logdir-0")

    def rewrite(b: int, body: bytes) -> bytes:
        return builder.snapshot(b, None).model_dump_json().encode() if answer == "json" else body

    source = _LaggingController(builder, rewrite)
    run = do_sync_cluster(synced, source=source).run
    assert run.ok and run.metadata_changed and run.brokers_synced == 3
    d = LogDir.objects.get(broker__broker_id=2, name="logdir-0")
    assert d.state == LogDirState.OFFLINE and d.error == "Permission denied"


class _MovedAgent(BuilderSource):
    """The builder's cluster with broker 2's agent moved to another address: the controller
    lists the new URL (a new metadata version) and the old address refuses connections."""

    old, new = "http://127.0.0.1:1/broker-2", "http://127.0.0.1:1/moved-2"

    def __init__(self, builder: ClusterBuilder):
        super().__init__(builder, set())
        self.asked: list[tuple[int, str]] = []

    def metadata(self, since: int | None):
        md = self.builder.metadata()
        brokers = [
            b.model_copy(update={"url": self.new}) if b.broker_id == 2 else b for b in md.brokers
        ]
        self.set_metadata(md.model_copy(update={"brokers": brokers, "version": md.version + 1}))
        return super(BuilderSource, self).metadata(since)

    def snapshot(self, broker_id: int, url: str, since: int | None):
        self.asked.append((broker_id, url))
        if url == self.old:
            raise ConnectionError(f"broker {broker_id}: connection refused")
        return super().snapshot(broker_id, url, since)


def test_agents_are_asked_while_the_controller_answers_and_a_moved_one_at_its_new_url(
    synced, builder
):
    """The agents the console knows are asked before the controller's answer is in (#17); an
    agent the controller now lists at another URL is asked there, and its early answer from
    the old address (refused) is dropped rather than failing it."""
    assert Broker.objects.get(cluster=synced, broker_id=2).url == _MovedAgent.old
    source = _MovedAgent(builder)
    run = do_sync_cluster(synced, source=source).run
    assert run.ok and run.brokers_synced == 3 and run.brokers_failed == 0
    assert "broker 2" not in run.errors
    # asked early at the address it had, then where the controller says it is
    assert {url for b, url in source.asked if b == 2} == {_MovedAgent.old, _MovedAgent.new}
    b2 = Broker.objects.get(cluster=synced, broker_id=2)
    assert b2.url == _MovedAgent.new and b2.error == ""
