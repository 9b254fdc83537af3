"""KIP-253 in-order delivery on the console (#14): consumer groups' positions synced from the
controller's coordinator, the topic page's barrier and gates, the API's ``ordering`` and
``groups``."""

from __future__ import annotations

import pytest

from broker_agent.contract.models import GroupView
from console.models import GroupOffset
from console.sync import do_sync_cluster
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


def _group(offsets: dict[str, dict[int, int]], group_id: str = "billing") -> GroupView:
    return GroupView(group_id=group_id, generation=4, members=[], offsets=offsets)


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def _ordering(client, topic: str) -> dict:
    return client.get(f"/api/v1/clusters/local/topics/{topic}").json()["ordering"]


def test_a_new_partition_waits_on_its_split_parent_until_the_group_starts_it(
    viewer_client, cluster, builder
):
    builder.add_topic("kv", partitions=2, rf=3, records=100)
    builder.alter_partition_count("kv", 4)
    builder.produce("kv", 2, 30)
    builder.produce("kv", 3, 30)
    builder.groups = [_group({"kv": {0: 40, 1: 100, 3: 10}})]
    sync(cluster, builder)
    assert GroupOffset.objects.filter(cluster=cluster, group_id="billing").count() == 3

    ordering = _ordering(viewer_client, "kv")
    assert ordering["barrier"] is True
    (g,) = ordering["groups"]
    rows = {r["partition"]: r for r in g["partitions"]}
    assert rows[2]["kind"] == "new" and rows[2]["parent"] == rows[2]["barrier"] == 0
    assert rows[2]["status"] == "waits on 0" and rows[2]["position"] is None
    assert rows[2]["barrier_position"] == 40 and rows[2]["split_epoch"] == 0
    assert rows[3]["status"] == "released"  # the group has started it
    assert g["lag"] == (100 - 40) + 0 + 30 + (30 - 10)

    html = viewer_client.get("/topics/local/kv/").content.decode()
    assert "Barrier on" in html and "Group <code>billing</code>" in html
    assert "split from 0; waits on 0 up to its leader epoch 0 (group at 40 on 0)" in html
    # the same on the split tree: the group's badge on partition 2 (held) and 3 (released)
    assert 'title="consumer group billing">billing: waits on 0</span>' in html
    assert "billing: released" in html

    groups = viewer_client.get("/api/v1/clusters/local/groups").json()["groups"]
    # as kafka-consumer-groups.sh shows it: lag over the partitions with a committed offset
    assert [(x["group_id"], x["generation"], x["lag"]) for x in groups] == [("billing", 4, 80)]


def test_a_partition_split_from_a_new_one_waits_on_the_first_ancestor_that_existed_before(
    viewer_client, cluster, builder
):
    """KIP-253 consumer step 4.2: an expansion by more than one doubling (2 -> 8) makes
    partition 6 split partition 2, itself new - 6's keys were in 0 before, so the page names 0
    (and its leader epoch in 6's leaderEpochAfterCreation), never "its parent" 2."""
    builder.add_topic("kv", partitions=2, rf=3, records=100)
    builder.alter_partition_count("kv", 8)
    builder.produce("kv", 6, 30)
    builder.groups = [_group({"kv": {0: 40, 1: 100}})]
    sync(cluster, builder)

    rows = {r["partition"]: r for r in _ordering(viewer_client, "kv")["groups"][0]["partitions"]}
    assert (rows[6]["parent"], rows[6]["barrier"], rows[6]["status"]) == (2, 0, "waits on 0")
    assert rows[6]["split_epoch"] == 0 and rows[6]["barrier_position"] == 40
    assert (rows[7]["parent"], rows[7]["barrier"], rows[7]["status"]) == (3, 1, "waits on 1")
    assert rows[7]["barrier_position"] == 100
    assert (rows[4]["parent"], rows[4]["barrier"]) == (0, 0)

    html = viewer_client.get("/topics/local/kv/").content.decode()
    assert (
        "split from 2; waits on 0 (the first ancestor that existed before the expansion) "
        "up to its leader epoch 0 (group at 40 on 0)"
    ) in html
    assert "waits on parent" not in html and "waits on 2" not in html


def test_after_a_shrink_the_surviving_partition_holds_until_the_marked_one_drains(
    viewer_client, cluster, builder
):
    builder.add_topic("kv", partitions=2, rf=3, records=100)
    builder.alter_partition_count("kv", 4)
    builder.produce("kv", 2, 30)
    builder.alter_partition_count("kv", 2)  # 2 and 3 marked; 3 holds nothing
    builder.groups = [_group({"kv": {0: 100, 2: 10}})]
    sync(cluster, builder)
    rows = {r["partition"]: r for r in _ordering(viewer_client, "kv")["groups"][0]["partitions"]}
    assert rows[2]["kind"] == "marked" and rows[2]["status"] == "draining"
    assert rows[3]["status"] == "drained"  # empty: nothing to drain
    assert rows[0]["status"] == "holds after the shrink" and rows[0]["waits_on"] == [2]
    assert 1 not in rows  # partition 3 is drained, so 1 holds nothing back

    builder.groups = [_group({"kv": {0: 100, 2: 30}})]  # the group drained partition 2
    sync(cluster, builder)
    rows = {r["partition"]: r for r in _ordering(viewer_client, "kv")["groups"][0]["partitions"]}
    assert rows[2]["status"] == "drained" and 0 not in rows


def test_with_ordered_delivery_off_the_console_says_the_barrier_is_off(
    viewer_client, cluster, builder
):
    builder.add_topic("loose", partitions=2, rf=3, configs={"enable.ordered.delivery": "false"})
    builder.alter_partition_count("loose", 3)
    builder.groups = [_group({"loose": {0: 5}})]
    sync(cluster, builder)
    ordering = _ordering(viewer_client, "loose")
    assert ordering["barrier"] is False
    assert ordering["groups"][0]["partitions"][0]["status"] == "released"
    html = viewer_client.get("/topics/local/loose/").content.decode()
    assert "Barrier off" in html and "enable.ordered.delivery=false" in html


def test_a_cluster_without_a_coordinator_keeps_no_groups(viewer_client, cluster, builder):
    builder.groups = [_group({"orders": {0: 1}})]
    sync(cluster, builder)
    builder.groups = None  # e.g. the synthetic scale mode: no coordinator, nothing replaced
    sync(cluster, builder)
    assert GroupOffset.objects.filter(cluster=cluster).count() == 1
    builder.groups = []
    sync(cluster, builder)
    assert not GroupOffset.objects.filter(cluster=cluster).exists()
    assert (
        "No consumer group has positions"
        in viewer_client.get("/topics/local/orders/").content.decode()
    )


def test_groups_are_merged_moved_positions_updated_gone_ones_deleted(cluster, builder):
    """Each sync merges the coordinator's positions: a moved one is updated, an unmoved one
    keeps the sync that last wrote it, a group or position no longer listed goes, a new one
    comes; a coordinator that fails leaves the previous rows."""
    builder.add_topic("kv", partitions=3, rf=3, records=100)
    builder.groups = [
        _group({"kv": {0: 10, 1: 20, 2: 30}}),
        _group({"kv": {0: 5}}, group_id="audit"),
    ]
    sync(cluster, builder)

    def rows() -> dict[tuple[str, int], tuple[int, object]]:
        return {
            (r.group_id, r.partition): (r.committed_offset, r.synced_at)
            for r in GroupOffset.objects.filter(cluster=cluster)
        }

    first = rows()
    builder.groups = [_group({"kv": {0: 10, 1: 25}}), _group({"kv": {2: 7}}, group_id="search")]
    sync(cluster, builder)
    second = rows()
    assert set(second) == {("billing", 0), ("billing", 1), ("search", 2)}
    assert second[("billing", 0)] == first[("billing", 0)]  # unmoved: not rewritten
    assert second[("billing", 1)][0] == 25 and second[("billing", 1)][1] > first[("billing", 1)][1]
    assert second[("search", 2)][0] == 7

    def failing():
        raise ConnectionError("coordinator: connection refused")

    source = builder.source()
    source.groups = failing
    run = do_sync_cluster(cluster, source=source).run
    assert "groups" in run.errors and rows() == second
