"""Acceptance 2 and 3 against the simulated cluster's real processes: tiering disablement
shows on the topic page with the new epoch and the agents' offsets; the key lookup agrees with
the simulated producer for 10,000 random keys before and after an expansion."""

from __future__ import annotations

import random
import re

import pytest

from broker_agent.contract.producer import Producer
from console.models import Cluster, Topic
from console.selectors import lookup_key
from console.sync import do_sync_cluster
from tests.console.simcluster import SimCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cluster = SimCluster(tmp_path_factory.mktemp("sim"))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def cluster(sim, db) -> Cluster:
    return Cluster.objects.create(
        name="local", controller_url=sim.urls["controller"], secret_ref=str(sim.secret_file)
    )


def _bars(html: str) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for m in re.finditer(
        r'<tr data-partition="(\d+)".*?data-remote-start="(-?\d+)" data-remote-end="(-?\d+)" '
        r'data-local-start="(-?\d+)" data-log-end="(-?\d+)"',
        html,
        re.S,
    ):
        out[int(m.group(1))] = tuple(int(x) for x in m.groups()[1:])
    return out


def test_disabling_tiering_shows_state_epoch_and_the_agents_offsets(sim, cluster, client, viewer):
    sim.cli(
        "create-topic",
        "tiered",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
        "--tiered",
        "--segment-bytes",
        "2048",
    )
    sim.cli("produce", "--topic", "tiered", "--records", "1500", "--keyed")

    # Wait until something was tiered, so the bar has a remote part.
    def tiered_somewhere():
        with sim.agent(1) as a:
            return any(r.remote_log_end_offset >= 0 for r in a.snapshot().replicas if r.is_leader)

    wait_until(tiered_somewhere, 30, what="a segment copied to remote storage")
    client.force_login(viewer)

    sim.controller.start_disable("tiered", policy="retain")
    do_sync_cluster(cluster)
    html = client.get("/topics/local/tiered/").content.decode()
    assert 'id="tiered-state">DISABLING<' in html and 'id="tiered-epoch">1<' in html
    assert 'id="disable-policy">retain<' in html

    sim.cli("disable-tiering", "tiered", "--policy", "retain")  # acks from every host, complete
    wait_until(
        lambda: sim.controller.topic("tiered").tiered_state == "DISABLED", 30, what="DISABLED"
    )
    do_sync_cluster(cluster)
    html = client.get("/topics/local/tiered/").content.decode()
    assert 'id="tiered-state">DISABLED<' in html and 'id="tiered-epoch">1<' in html

    # The offsets bar of each partition is its leader's remote Rx..Ry and local Lx..end.
    leaders = {p.partition: p.leader for p in sim.controller.topic("tiered").partitions}
    agent_offsets = {}
    for broker in set(leaders.values()):
        with sim.agent(broker) as a:
            for r in a.snapshot().replicas:
                if r.topic == "tiered" and leaders[r.partition] == broker:
                    agent_offsets[r.partition] = (
                        r.remote_log_start_offset,
                        r.remote_log_end_offset,
                        r.local_log_start_offset,
                        r.log_end_offset,
                    )
    assert _bars(html) == agent_offsets
    assert any(v[1] >= 0 for v in agent_offsets.values())


def test_key_lookup_agrees_with_the_producer_before_and_after_an_expansion(
    sim, cluster, client, viewer
):
    sim.controller.create_topic("keys", 3, 2)
    wait_until(
        lambda: all(len(p.created) == 2 for p in sim.controller.topic("keys").partitions),
        30,
        what="replicas created",
    )
    rnd = random.Random(253)
    keys = [f"key-{rnd.getrandbits(64):x}" for _ in range(10_000)]
    producer = Producer(sim.controller, sim.secret)
    try:
        before = producer.send("keys", [{"key": k, "value": "v"} for k in keys])
        do_sync_cluster(cluster)
        topic = Topic.objects.get(cluster=cluster, name="keys")
        assert [lookup_key(topic, k).partition for k in keys] == [p for p, _ in before]

        sim.controller.alter_partition_count("keys", 5)  # KIP-253 expansion: 3 -> 5
        wait_until(
            lambda: all(len(p.created) == 2 for p in sim.controller.topic("keys").partitions),
            30,
            what="new replicas created",
        )
        producer.refresh()
        after = producer.send("keys", [{"key": k, "value": "w"} for k in keys])
    finally:
        producer.close()
    do_sync_cluster(cluster)
    topic.refresh_from_db()
    assert (topic.undeleted_partition_count, topic.previous_undeleted_partition_count) == (5, 3)
    found = [lookup_key(topic, k) for k in keys]
    assert [f.partition for f in found] == [p for p, _ in after]
    assert [f.previous_partition for f in found] == [p for p, _ in before]
    assert {p for p, _ in after} == set(range(5))

    client.force_login(viewer)
    for i in range(0, 10_000, 500):  # the API answers the same (a sample: it is the same code)
        body = client.get(
            "/api/v1/clusters/local/partition-for-key", {"topic": "keys", "key": keys[i]}
        ).json()
        assert body["partition"] == after[i][0]
        assert body["before"]["partition"] == before[i][0]
