"""Topic page signals (#15): bytes rather than summed offsets, the partitions' spread with a hot
partition called out, and leader skew / Kafka's preferred-leader imbalance per broker."""

from __future__ import annotations

import pytest

from console import selectors
from console.models import Topic
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client, viewer):
    client.force_login(viewer)
    return lambda topic: client.get(f"/topics/local/{topic}/").content.decode()


def _topic(name: str) -> Topic:
    return Topic.objects.get(cluster__name="local", name=name)


def test_a_balanced_topic_reads_balanced(page, synced):
    balance = selectors.leader_balance(_topic("orders"), [1, 2, 3])
    assert [(b.broker_id, b.leaders, b.preferred) for b in balance.brokers] == [
        (1, 2, 2),
        (2, 2, 2),
        (3, 2, 2),
    ]
    assert balance.fair_share == 2 and not balance.skewed and not balance.imbalanced
    html = page("orders")
    assert "a fair share is 2.0." in html and "Balanced." in html
    assert "leader skew" not in html


def test_leadership_moved_off_a_dead_broker_shows_skew_and_preferred_imbalance(
    page, cluster, builder
):
    builder.add_topic("wide", partitions=12, rf=3)
    builder.kill_broker(2)  # its 4 partitions move to their next replica in the ISR: broker 3
    sync(cluster, builder, down={2})
    balance = selectors.leader_balance(_topic("wide"), [1, 3])
    by_id = {b.broker_id: b for b in balance.brokers}
    assert (by_id[1].leaders, by_id[2].leaders, by_id[3].leaders) == (4, 0, 8)
    assert balance.fair_share == 4  # 12 led partitions over the 3 brokers hosting replicas
    assert [b.broker_id for b in balance.skewed] == [3]  # 8 > 1.5 x 4
    assert [b.broker_id for b in balance.imbalanced] == [2]  # Kafka's measure: 4 of 4 elsewhere
    assert by_id[2].imbalance_percent == 100.0
    html = page("wide")
    assert "leader skew" in html and "broker 3 leads 8" in html
    assert "broker 2: 4 of 4 led elsewhere" in html
    assert "no snapshot from this broker" in html  # broker 2's row stays, its tasks unknown


def test_one_small_extra_leader_is_not_called_skew(cluster, builder):
    builder.add_topic("small", partitions=2, rf=2)
    builder.kill_broker(1)
    sync(cluster, builder, down={1})
    balance = selectors.leader_balance(_topic("small"), [2, 3])
    assert max(b.leaders for b in balance.brokers) == 2  # 2 > 1.5 x 0.67, but only 1.3 over
    assert not balance.skewed


def test_topic_bytes_bar_and_a_hot_partition(page, cluster, builder):
    builder.add_topic("hot", partitions=12, rf=3)
    builder.produce("hot", 5, 1000)  # 1,100 records on partition 5, 100 on the others
    sync(cluster, builder)
    spread = {s.label: s for s in selectors.topic_spread(_topic("hot"))}
    records = spread["Records retained"]
    assert (records.low, records.high, records.high_partition) == (100, 1100, 5)
    assert records.average == pytest.approx(2200 / 12) and records.hot
    assert spread["Local bytes"].high_partition == 5 and spread["Local bytes"].hot
    assert spread["Remote bytes"].high_partition is None and not spread["Remote bytes"].hot
    t = _topic("hot")
    html = page("hot")
    assert f'data-remote-bytes="{t.remote_bytes}" data-local-bytes="{t.local_bytes}"' in html
    assert "sums of offsets" not in html
    assert 'id="partition-spread"' in html and "partition 5" in html and ">hot<" in html


def test_a_topic_with_remote_bytes_draws_both_lanes(page, synced):
    t = _topic("orders")
    assert t.remote_bytes > 0 and t.local_bytes > 0
    html = page("orders")
    assert 'class="bar-remote"><title>remote ' in html and 'class="bar-local"><title>local ' in html


def test_split_tree_marks_new_partitions_with_their_parent_and_split_epoch(page, cluster, builder):
    """#15 / KIP-253: the split tree says which partitions the last expansion added, which parent
    each splits and the parent's leader epoch at creation (leaderEpochAfterCreation)."""
    builder.add_topic("grow", partitions=2, rf=3)
    sync(cluster, builder)
    builder.alter_partition_count("grow", 4)
    sync(cluster, builder)
    tree = {n["partition"]: n for n in _walk(selectors.split_tree(_topic("grow"), _rows("grow")))}
    assert [p for p, n in tree.items() if n["new"]] == [2, 3]
    assert (tree[2]["parent"], tree[3]["parent"]) == (0, 1)
    assert tree[2]["split_epoch"] == 0 and tree[0]["parent"] is None
    html = page("grow")
    assert 'class="node new" data-partition="2"' in html
    assert "split from 0 at its leader epoch 0" in html
    builder.alter_partition_count("grow", 3)  # partition 3 marked for deletion
    sync(cluster, builder)
    tree = {n["partition"]: n for n in _walk(selectors.split_tree(_topic("grow"), _rows("grow")))}
    assert tree[3]["marked"] and not tree[3]["new"]
    assert "its keys go back to 1" in page("grow")


def test_split_tree_names_the_ancestor_a_partition_split_from_a_new_one_waits_on(
    page, cluster, builder
):
    """KIP-253 step 4.2 on the split tree: after 2 -> 8 in one expansion partition 6 splits 2,
    itself new, so its split epoch is partition 0's (the first ancestor that existed before);
    after a shrink back to 2, marked partition 6's keys go to 0, not to its parent 2."""
    builder.add_topic("wide", partitions=2, rf=3)
    sync(cluster, builder)
    builder.alter_partition_count("wide", 8)
    sync(cluster, builder)
    tree = {n["partition"]: n for n in _walk(selectors.split_tree(_topic("wide"), _rows("wide")))}
    assert (tree[6]["parent"], tree[6]["barrier"], tree[6]["split_epoch"]) == (2, 0, 0)
    assert (tree[2]["parent"], tree[2]["barrier"]) == (0, 0)
    assert "split from 2, its keys from 0 at its leader epoch 0" in page("wide")
    builder.alter_partition_count("wide", 2)
    sync(cluster, builder)
    tree = {n["partition"]: n for n in _walk(selectors.split_tree(_topic("wide"), _rows("wide")))}
    assert [tree[p]["keys_to"] for p in range(2, 8)] == [0, 1, 0, 1, 0, 1]
    html = page("wide")
    assert "its keys go back to 2" not in html and "its keys go back to 3" not in html


def _rows(topic: str) -> dict:
    return {p.partition: p for p in _topic(topic).partitions.all()}


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n["children"])
