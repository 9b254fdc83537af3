"""The controller's metadata as COPY rows (``GET /v1/metadata?format=tsv``, #17): the sync stages
them as they come, builds the same inventory as from JSON, and refuses a malformed row."""

from __future__ import annotations

import pytest
from django.db import connection

from broker_agent.contract.metadata_rows import metadata_tsv
from console.models import Cluster, Partition, Topic
from console.sync import StaticClusterSource, do_sync_cluster
from tests.console.factories import BuilderSource, ClusterBuilder


def _partitions(cluster) -> list[tuple]:
    return sorted(
        Partition.objects.filter(cluster=cluster).values_list(
            "topic_name",
            "partition",
            "leader",
            "replicas",
            "isr",
            "offline_replicas",
            "under_replicated",
            "under_min_isr",
            "offline",
            "has_offline_replicas",
            "marked_for_deletion",
            "leader_epoch_before_deletion",
            "log_start_offset",
            "log_end_offset",
            "remote_log_start_offset",
        )
    )


def _topics(cluster) -> list[tuple]:
    return sorted(
        Topic.objects.filter(cluster=cluster).values_list(
            "name",
            "tiered_state",
            "tiered_epoch",
            "configs",
            "min_insync_replicas",
            "undeleted_partition_count",
            "partition_count",
            "under_replicated_partition_count",
            "offline_partition_count",
        )
    )


class _Rows(BuilderSource):
    """The builder's metadata as ``format=tsv``, passed through ``rewrite(body)``."""

    def __init__(self, builder: ClusterBuilder, rewrite=lambda body: body):
        super().__init__(builder, set())
        self.rewrite = rewrite

    def metadata_tsv(self, since: int | None) -> bytes:
        return self.rewrite(metadata_tsv(self.metadata(since)))


@pytest.fixture
def varied(builder):
    """Partitions whose flags the merge works out: under-replicated, under min ISR (a topic
    config), offline, with offline replicas, and marked for deletion (KIP-253)."""
    builder.add_topic("strict", partitions=3, configs={"min.insync.replicas": "3"})
    builder.fail_log_dir(2, "logdir-0")
    builder.kill_broker(3)
    builder.alter_partition_count("payments", 2)
    return builder


def test_rows_and_json_build_the_same_inventory(cluster, varied):
    run = do_sync_cluster(cluster, source=_Rows(varied), full=True).run
    assert run.controller_ok  # broker 3's agent is down
    partitions, topics = _partitions(cluster), _topics(cluster)
    assert any(p[6] for p in partitions) and any(p[7] for p in partitions)  # flags are set
    assert any(p[9] for p in partitions) and any(p[10] for p in partitions)
    again = Cluster.objects.create(
        name="json", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )
    as_json = BuilderSource(varied, set())
    as_json.metadata_json = lambda since: as_json.metadata(since).model_dump_json().encode()
    assert do_sync_cluster(again, source=as_json, full=True).run.controller_ok
    assert _partitions(again) == partitions and partitions
    assert _topics(again) == topics and topics


def _edit(body: bytes, line: int, change) -> bytes:
    lines = body.decode().split("\n")
    lines[line] = "\t".join(change(lines[line].split("\t")))
    return "\n".join(lines).encode()


def _first_partition_row(body: bytes) -> int:
    return 1 + int(body.split(b"\n", 1)[0].split(b'"topic_count":')[1].split(b",")[0].strip(b"}"))


@pytest.mark.parametrize(
    ("rewrite", "error"),
    [
        (lambda b: _edit(b, 1, lambda f: [f[0], "\\N", *f[2:]]), "bad row"),  # topic_id missing
        (lambda b: _edit(b, _first_partition_row(b), lambda f: f[:-1]), "bad row"),  # short
        (
            lambda b: _edit(b, _first_partition_row(b), lambda f: [f[0], f[1], "\\N", *f[3:]]),
            "bad row",
        ),  # replicas missing
        (
            lambda b: _edit(b, _first_partition_row(b), lambda f: [f[0], "two", *f[2:]]),
            "bad row",
        ),  # partition not a number
        (lambda b: b.replace(b'"topic_count":', b'"topic_count":1000', 1), "topic rows"),
        (
            lambda b: b.replace(b'"partition_columns":["topic",', b'"partition_columns":[', 1),
            "unexpected partition columns",
        ),
    ],
)
def test_a_malformed_answer_fails_the_controller_only(synced, builder, rewrite, error):
    before = _partitions(synced)
    builder.produce("orders", 0, 10)
    builder.alter_partition_count("orders", 8)
    run = do_sync_cluster(synced, source=_Rows(builder, rewrite), full=True).run
    synced.refresh_from_db()
    assert not run.controller_ok and error in synced.controller_error
    assert run.brokers_synced == 3  # the agents still synced
    after = _partitions(synced)
    assert len(after) == len(before)  # the last good metadata is kept: no partition 6, 7
    assert next(p for p in after if p[:2] == ("orders", 0))[13] == 1010


def test_a_partition_row_of_a_topic_the_answer_does_not_list_is_not_merged(synced, builder):
    """A delta lists each changed topic with its changed partitions; a partition row whose topic
    has no row is malformed, and must not land in the console's topic of that name."""
    full = builder.metadata()
    orders = next(t for t in full.topics if t.name == "orders")
    moved = orders.partitions[1].model_copy(update={"leader": -1, "isr": []})
    bumped = orders.partitions[0].model_copy(update={"leader_epoch": 7})
    delta = full.model_copy(
        update={
            "topics": [orders.model_copy(update={"partitions": [bumped]})],
            "full": False,
            "since": synced.metadata_version,
        }
    )
    body = metadata_tsv(delta)
    stray = metadata_tsv(
        delta.model_copy(
            update={"topics": [orders.model_copy(update={"name": "x", "partitions": [moved]})]}
        )
    )
    row = stray.rstrip(b"\n").rsplit(b"\n", 1)[1].replace(b"x\t", b"payments\t", 1)
    source = StaticClusterSource(delta, {b: builder.snapshot(b) for b in builder.broker_ids})
    source.metadata_tsv = lambda since: body + row + b"\n"
    run = do_sync_cluster(synced, source=source).run
    assert run.ok and run.partitions_upserted == 1
    assert Partition.objects.get(topic_name="orders", partition=0).leader_epoch == 7
    assert Partition.objects.get(topic_name="payments", partition=1).leader != -1


def test_a_partition_row_of_an_unlisted_topic_finds_no_topic_when_everything_is_asked(
    synced, builder
):
    """A sync that asks for everything (here: after a crash emptied the partitions) does not
    look for such rows apart: the topics a full answer does not list are deleted before the
    partitions are merged, so a stray row of one finds no topic to land in."""
    full = builder.metadata()
    payments = next(t for t in full.topics if t.name == "payments")
    listed = full.model_copy(update={"topics": [t for t in full.topics if t.name != "payments"]})
    body = metadata_tsv(listed)
    stray = metadata_tsv(full.model_copy(update={"topics": [payments]}))
    row = stray.rstrip(b"\n").rsplit(b"\n", 1)[1]
    with connection.cursor() as cur:  # what a crash leaves
        cur.execute("TRUNCATE console_partition, console_replica")
    source = StaticClusterSource(listed, {b: builder.snapshot(b) for b in builder.broker_ids})
    source.metadata_tsv = lambda since: body + row + b"\n"
    run = do_sync_cluster(synced, source=source).run
    assert run.ok
    assert not Topic.objects.filter(cluster=synced, name="payments").exists()
    assert not Partition.objects.filter(cluster=synced, topic_name="payments").exists()
    assert Partition.objects.filter(cluster=synced, topic_name="orders").count() == len(
        next(t for t in full.topics if t.name == "orders").partitions
    )
