"""Two read-side points of #35 on the simulated cluster registered twice (``agents`` and
``kafka``): a replica being moved between two dirs of its broker (AlterReplicaLogDirs, KIP-113)
shows on both backends as source dir -> target dir with its future replica's size and offset
lag until the swap, on the topic and broker pages and in the topic API; and KIP-966's eligible
leader replicas: read where the brokers answer DescribeTopicPartitions (the ``kafka`` backend,
the sim's listener answers them empty: "none"), "not available for this cluster" on the agents'
backend, never an empty list that reads as "none"."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.errors import NoError

from console.choices import ClusterBackend
from console.models import Cluster, Partition, Replica, ReplicaMove
from console.sync import do_sync_cluster
from console.sync.kafka_source import KafkaClusterSource
from tests.broker_agent import test_kafka_listener as wire
from tests.console.simcluster import SimCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
SET, DELETE, BROKER = 0, 1, 4


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cluster = SimCluster(tmp_path_factory.mktemp("sim"), brokers=2, log_dirs=2)
    try:
        yield cluster
    finally:
        cluster.down()


def _client(sim) -> dict:
    return {
        "bootstrap_servers": sim.urls["kafka_bootstrap"],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "strata",
        "sasl_plain_password": sim.secret,
        "request_timeout_ms": 20_000,
    }


def _clusters(sim) -> tuple[Cluster, Cluster]:
    agents = Cluster.objects.create(
        name="local", controller_url=sim.urls["controller"], secret_ref=str(sim.secret_file)
    )
    kafka = Cluster.objects.create(
        name="local-kafka",
        backend=ClusterBackend.KAFKA,
        kafka_bootstrap=sim.urls["kafka_bootstrap"],
        kafka_client_config={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "strata",
            "sasl_password_ref": str(sim.secret_file),
        },
    )
    return agents, kafka


def _port(sim, broker_id: int) -> int:
    """The broker's Kafka listener port, its SASL password registered for ``wire.ask``."""
    addrs = dict(
        zip(sorted(sim.urls["brokers"]), sim.urls["kafka_bootstrap"].split(","), strict=True)
    )
    port = int(addrs[str(broker_id)].rsplit(":", 1)[1])
    wire.SECRET[port] = sim.secret.encode()
    return port


def _moves(cluster: Cluster) -> list[tuple]:
    """The cluster's dir moves after one more sync."""
    run = do_sync_cluster(cluster).run
    assert run.errors == {}, run.errors
    return list(
        ReplicaMove.objects.filter(cluster=cluster).values_list(
            "broker_id",
            "topic_name",
            "partition",
            "log_dir",
            "future_log_dir",
            "future_size_bytes",
            "future_offset_lag",
        )
    )


def test_a_replica_moving_between_dirs_shows_on_both_backends_until_its_swap(sim, client, viewer):
    sim.controller.create_topic("moving", 1, 1)
    wait_until(lambda: len(sim.controller.topic("moving").partitions[0].created) == 1, 30)
    sim.cli("produce", "--topic", "moving", "--records", "300", "--value-size", "500")
    leader = sim.controller.topic("moving").partitions[0].leader
    snap = sim.agent(leader).snapshot()
    paths = {d.name: d.path for d in snap.log_dirs}
    [source] = [r.log_dir for r in snap.replicas if r.topic == "moving"]
    [target] = [name for name in paths if name != source]
    port = _port(sim, leader)
    # Kafka's quota on the copy: at 1,000 bytes a second the ~150 kB move is under way for minutes
    assert wire._alter(port, str(leader), [(THROTTLE, SET, "1000")], resource_type=BROKER) == (
        0,
        None,
    )
    admin = KafkaAdminClient(**_client(sim))
    try:
        here = TopicPartitionReplica("moving", 0, leader)
        assert admin.alter_replica_log_dirs({here: paths[target]}) == {here: NoError}
    finally:
        admin.close()
    # the copy took the whole log at once and now waits out its quota: what is written meanwhile
    # it is behind by
    sim.cli("produce", "--topic", "moving", "--records", "100")

    agents, kafka = _clusters(sim)
    for cluster in (agents, kafka):
        [move] = wait_until(lambda c=cluster: _moves(c), 30, what=f"{cluster.name}: the move")
        assert move[:5] == (leader, "moving", 0, source, target), cluster.name
        size, lag = move[5:]
        assert lag >= 100, cluster.name  # the copy is behind the replica it replaces
        assert (
            0
            <= size
            < Replica.objects.get(cluster=cluster, partition__topic_name="moving").size_bytes
        )

    client.force_login(viewer)
    for cluster in (agents, kafka):
        for url in (
            f"/topics/{cluster.name}/moving/",
            f"/brokers/?cluster={cluster.name}",
        ):
            html = client.get(url).content.decode()
            assert f'data-move="moving-0@{leader}"' in html, url
            assert f"{source} → {target}" in html, url
        body = client.get(f"/api/v1/clusters/{cluster.name}/topics/moving").json()
        assert [(m["broker_id"], m["log_dir"], m["future_log_dir"]) for m in body["dir_moves"]] == [
            (leader, source, target)
        ]

    assert wire._alter(port, str(leader), [(THROTTLE, DELETE, None)], resource_type=BROKER)[0] == 0
    for cluster in (agents, kafka):
        wait_until(lambda c=cluster: _moves(c) == [], 60, what=f"{cluster.name}: the swap")
        replica = Replica.objects.select_related("log_dir").get(
            cluster=cluster, partition__topic_name="moving"
        )
        assert replica.log_dir.name == target, cluster.name
        html = client.get(f"/topics/{cluster.name}/moving/").content.decode()
        assert "data-move=" not in html


class _WithElr(KafkaClusterSource):
    """The kafka read with one partition's ELR as a Kafka 4.x cluster with ELR enabled reports
    it after its ISR shrank below min.insync.replicas: what the sync stores, pages and the API
    show, and clear once the brokers report none (the sim's listener never has one)."""

    def eligible_leader_replicas(self):
        return {**(super().eligible_leader_replicas() or {}), ("elr", 0): ([2], [1, 2])}


def test_elr_is_read_where_the_brokers_answer_it_and_not_available_on_the_agents_backend(
    sim, client, viewer
):
    sim.controller.create_topic("elr", 2, 2, configs={"min.insync.replicas": "2"})
    wait_until(lambda: all(len(p.created) == 2 for p in sim.controller.topic("elr").partitions), 30)
    agents, kafka = _clusters(sim)
    for cluster in (agents, kafka):
        assert do_sync_cluster(cluster).run.errors == {}
        cluster.refresh_from_db()
    # the sim's listener answers DescribeTopicPartitions: the capability is learnt, ELR empty
    assert kafka.backend_features["api_versions"]["75"] == [0, 0]
    for cluster in (agents, kafka):
        parts = Partition.objects.filter(cluster=cluster, topic_name="elr")
        assert [(p.eligible_leader_replicas, p.last_known_elr) for p in parts] == [([], [])] * 2

    client.force_login(viewer)
    kafka_page = client.get("/topics/local-kafka/elr/").content.decode()
    assert kafka_page.count("<td data-elr>none</td>") == 2
    assert 'data-not-available="eligible_leader_replicas"' not in kafka_page
    agents_page = client.get("/topics/local/elr/").content.decode()
    assert "<td data-elr>none</td>" not in agents_page
    assert "Eligible leader replicas (KIP-966): not available for this cluster." in agents_page
    api = {
        c.name: client.get(f"/api/v1/clusters/{c.name}/topics/elr").json()["partitions"]
        for c in (agents, kafka)
    }
    assert [p["eligible_leader_replicas"] for p in api["local"]] == [None, None]
    assert [p["last_known_elr"] for p in api["local"]] == [None, None]
    assert [p["eligible_leader_replicas"] for p in api["local-kafka"]] == [[], []]

    # a partition with an ELR: stored, shown, then cleared by the next read without one
    source = _WithElr(kafka.kafka_client_kwargs())
    try:
        assert do_sync_cluster(kafka, source=source).run.errors == {}
    finally:
        source.close()
    elr = {
        p.partition: (p.eligible_leader_replicas, p.last_known_elr)
        for p in Partition.objects.filter(cluster=kafka, topic_name="elr")
    }
    assert elr == {0: ([2], [1, 2]), 1: ([], [])}
    page = client.get("/topics/local-kafka/elr/").content.decode()
    assert '<td data-elr>2 <small class="age">(1, 2)</small></td>' in page
    body = client.get("/api/v1/clusters/local-kafka/topics/elr").json()
    assert body["partitions"][0]["eligible_leader_replicas"] == [2]
    assert body["partitions"][0]["last_known_elr"] == [1, 2]
    assert do_sync_cluster(kafka).run.errors == {}
    assert list(
        Partition.objects.filter(cluster=kafka, topic_name="elr").values_list(
            "eligible_leader_replicas", flat=True
        )
    ) == [[], []]
