"""Topic aggregates kept by adding and subtracting (#17) equal the sums over the partitions.

An incremental sync adds to a topic's aggregates what its changed partitions contribute now and
subtracts what they contributed before (``console.sync.aggregates``). These tests drive a
cluster through the changes a sync sees — traffic, tiering, KIP-963 lags, a failed log dir, a
dead broker, KIP-253 expansion, a shrink, drained and deleted partitions, deleted and new topics
— with the controller answering deltas, as the real one at scale does, and after every sync
compare each topic's aggregates with sums computed here from its partition rows, and the
cluster's topics per tiered state (``Cluster.topic_states``) with counts over its topics.
"""

from __future__ import annotations

import pytest

from broker_agent.contract.models import ClusterMetadata, partition_key
from console.models import Cluster, Partition, Topic
from console.models.clusters import TOPIC_STATE_SUMS
from console.sync import aggregates
from console.sync.rows import TIER_METRICS
from tests.console.conftest import sync
from tests.console.factories import BuilderSource, ClusterBuilder

pytestmark = pytest.mark.django_db

SUMMED = [
    "log_start_offset",
    "local_log_start_offset",
    "log_end_offset",
    "remote_bytes",
    "local_bytes",
    "remote_segments",
    *TIER_METRICS,
]


class DeltaSource(BuilderSource):
    """The builder's cluster, answered as a delta against the metadata answered last: the
    topics that changed with only their changed partitions, and what was removed."""

    last: dict[str, ClusterMetadata] = {}

    def metadata(self, since: int | None) -> ClusterMetadata:
        md = super().metadata(since)
        before = DeltaSource.last.get(self.builder.cluster_id)
        if md.changed:
            DeltaSource.last[self.builder.cluster_id] = md
        if since is None or before is None or not md.changed or before.version != since:
            return md
        old = {t.name: t for t in before.topics}
        topics = []
        for t in md.topics:
            was = old.get(t.name)
            if was is None:
                topics.append(t)
                continue
            old_parts = {p.partition: p for p in was.partitions}
            changed = [p for p in t.partitions if old_parts.get(p.partition) != p]
            same_topic = t.model_copy(update={"partitions": []}) == was.model_copy(
                update={"partitions": []}
            )
            if changed or not same_topic:
                topics.append(t.model_copy(update={"partitions": changed}))
        now = {t.name: {p.partition for p in t.partitions} for t in md.topics}
        return md.model_copy(
            update={
                "full": False,
                "since": since,
                "topics": topics,
                "removed_topics": sorted(set(old) - set(now)),
                "removed_partitions": [
                    partition_key(t.name, p.partition)
                    for t in before.topics
                    if t.name in now
                    for p in t.partitions
                    if p.partition not in now[t.name]
                ],
            }
        )


def _sync(cluster, builder: ClusterBuilder):
    run = sync_with(cluster, DeltaSource(builder, set()))
    dead = {f"broker {b}" for b, alive in builder.alive.items() if not alive}
    assert set(run.errors) <= dead, run.errors  # a dead broker's agent does not answer
    return run


def sync_with(cluster, source):
    from console.sync import do_sync_cluster

    return do_sync_cluster(cluster, source=source).run


def _expected(cluster) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for t in Topic.objects.filter(cluster=cluster):
        parts = list(Partition.objects.filter(topic=t))
        remote = [p for p in parts if p.remote_log_end_offset >= 0]
        row = {c: sum(getattr(p, c) for p in parts) for c in SUMMED}
        row.update(
            partition_count=len(parts),
            remote_partition_count=len(remote),
            remote_log_start_offset=sum(p.remote_log_start_offset for p in remote)
            if remote
            else -1,
            remote_log_end_offset=sum(p.remote_log_end_offset for p in remote) if remote else -1,
            offline_partition_count=sum(p.offline for p in parts),
            under_replicated_partition_count=sum(p.under_replicated for p in parts),
            under_min_isr_partition_count=sum(p.under_min_isr for p in parts),
            offline_replica_count=sum(len(p.offline_replicas) for p in parts),
            marked_for_deletion_count=sum(p.marked_for_deletion for p in parts),
        )
        out[t.name] = row
    return out


def _actual(cluster) -> dict[str, dict[str, int]]:
    columns = list(next(iter(_expected(cluster).values())))
    return {
        t["name"]: {c: t[c] for c in columns}
        for t in Topic.objects.filter(cluster=cluster).values("name", *columns)
    }


def _states(cluster) -> tuple[dict, dict]:
    """The cluster's topics per tiered state as the sync kept them (``topic_states``, read by
    /metrics), and as counted and summed here from the topic rows."""
    expected: dict[str, dict[str, int]] = {}
    for t in Topic.objects.filter(cluster=cluster):
        row = expected.setdefault(t.tiered_state, dict.fromkeys(["topics", *TOPIC_STATE_SUMS], 0))
        row["topics"] += 1
        for f in TOPIC_STATE_SUMS:
            row[f] += getattr(t, f)
    return Cluster.objects.get(pk=cluster.pk).topic_states, expected


@pytest.fixture
def paths(monkeypatch) -> list[bool]:
    """Which way each sync took: True for adding and subtracting."""
    taken: list[bool] = []
    capture = aggregates.AggregateSync.capture

    def spy(self, md):
        capture(self, md)
        taken.append(self.incremental)

    monkeypatch.setattr(aggregates.AggregateSync, "capture", spy)
    return taken


def test_incremental_aggregates_equal_the_sums_over_partitions(cluster, paths):
    DeltaSource.last.clear()
    b = ClusterBuilder(brokers=4, log_dirs=2)
    b.add_topic("orders", partitions=8, rf=3, tiered=True, records=1000, remote_records=400)
    b.add_topic("payments", partitions=4, rf=3, configs={"min.insync.replicas": "2"})
    b.add_topic("clicks", partitions=6, rf=2, tiered=True, records=500)
    b.add_topic("audit.log", partitions=1, rf=1)
    _sync(cluster, b)
    assert _actual(cluster) == _expected(cluster)
    assert _states(cluster)[0] == _states(cluster)[1]

    steps = [
        ("traffic", lambda: [b.produce("orders", p, 50 + p) for p in range(0, 8, 2)]),
        ("first remote data of a topic", lambda: b.tier("clicks", 1, 200)),
        ("more tiering", lambda: [b.tier("orders", p, 600) for p in (0, 3)]),
        ("KIP-963 lags", lambda: b.set_tier_metrics("orders", 2, remote_copy_lag_bytes=4096)),
        ("tiering disabled", lambda: b.disable_tiering("clicks", policy="retain")),
        ("a failed log dir", lambda: b.fail_log_dir(2, "logdir-0")),
        ("a dead broker", lambda: b.kill_broker(3)),
        ("expansion", lambda: b.alter_partition_count("payments", 7)),
        ("traffic on new partitions", lambda: b.produce("payments", 6, 30)),
        ("a shrink marks partitions", lambda: b.alter_partition_count("clicks", 4)),
        ("a drained partition goes", lambda: b.remove_partition("clicks", 5)),
        ("a topic is deleted", lambda: b.delete_topic("audit.log")),
        ("a new topic", lambda: b.add_topic("audit.log", partitions=2, rf=2, records=7)),
        ("nothing", lambda: None),
    ]
    for label, change in steps:
        change()
        _sync(cluster, b)
        assert _actual(cluster) == _expected(cluster), label
        kept, counted = _states(cluster)
        assert kept == counted, label
        if label == "KIP-963 lags":
            assert kept["ENABLED"]["remote_copy_lag_bytes"] == 4096
    assert {"ENABLED", "DISABLING", "NONE"} <= set(kept)
    assert all(paths[1:]), "every sync after the first added and subtracted"
    assert paths[0] is False  # the first sync sums


def test_a_full_sync_sums_again_and_sets_a_wrong_aggregate_right(cluster, paths):
    """Anything a topic's aggregates were left with (say, by an interrupted upgrade) is set
    right by a full sync, which sums every partition of the topics it rewrites."""
    DeltaSource.last.clear()
    b = ClusterBuilder(brokers=3, log_dirs=1)
    b.add_topic("orders", partitions=3, rf=3, tiered=True, records=100, remote_records=40)
    _sync(cluster, b)
    Topic.objects.filter(cluster=cluster, name="orders").update(log_end_offset=1, remote_bytes=7)
    Topic.objects.filter(cluster=cluster, name="orders").update(metadata_digest="")
    run = sync(cluster, b, full=True)
    assert run.ok
    assert paths[-1] is False
    assert _actual(cluster) == _expected(cluster)


class AgentsOnly(DeltaSource):
    """The controller's metadata did not change since the last sync (``changed=False``): only
    the agents' figures moved, as when a purge marks segments DELETE_SEGMENT_FINISHED."""

    def metadata(self, since: int | None) -> ClusterMetadata:
        md = self.builder.metadata()
        return ClusterMetadata(
            cluster_id=md.cluster_id,
            version=since if since is not None else md.version,
            brokers=[],
            topics=[],
            changed=False,
        )


def test_a_purge_seen_only_by_the_agents_takes_the_fenced_bytes_to_zero_never_below(cluster, paths):
    """KIP-950's delete policy fences remote data; the purge deletes it and the leaders report
    0 fenced bytes. The controller's metadata does not change, so the sync's key table was the
    staged replicas alone: each partition counted once per replica (RF 3), and the topic showed
    8,000 - 3 x 8,000 = -16,000 fenced bytes (#39). Each partition counts once."""
    DeltaSource.last.clear()
    b = ClusterBuilder(brokers=3, log_dirs=1)
    b.add_topic("fenced", partitions=2, rf=3, tiered=True, records=100, remote_records=40)
    b.disable_tiering("fenced", policy="delete", done=True)
    fenced = {"fenced_remote_bytes": 4000, "fenced_remote_segments": 2}
    for p in range(2):
        b.set_tier_metrics("fenced", p, **fenced)
    _sync(cluster, b)
    topic = Topic.objects.get(cluster=cluster, name="fenced")
    assert (topic.fenced_remote_bytes, topic.fenced_remote_segments) == (8000, 4)

    for p in range(2):  # purged: the leaders report nothing fenced any more
        b.set_tier_metrics("fenced", p, **dict.fromkeys(fenced, 0))
    run = sync_with(cluster, AgentsOnly(b, set()))
    assert run.ok, run.errors
    assert paths[-1] is True  # added and subtracted
    topic.refresh_from_db()
    assert (topic.fenced_remote_bytes, topic.fenced_remote_segments) == (0, 0)
    assert _actual(cluster) == _expected(cluster)
