"""The sync reads a cluster over Kafka's protocol (#35): the simulated cluster registered twice,
as ``agents`` (controller and agents over HTTP) and as ``kafka`` (its brokers' Kafka listeners,
SASL/PLAIN), gives the same inventory; a dir failed the file-for-dir way shows OFFLINE on the
``kafka`` one after one sync; wrong credentials and an unreachable bootstrap leave a clear error
and no inventory.

What must agree: topics (partition counts, tiering state and policy, min.insync.replicas, the
configs but tiering's, the topic id), partitions (leader, epoch, replicas, ISR, offline
replicas), their offsets (log start, local log start, high watermark, remote range), replicas
(broker, dir, state, leadership), log dirs (state, total bytes), brokers and consumer groups'
committed offsets. What legitimately differs, and is not compared: a dir's name (Kafka names a
dir by its path), the topic id's spelling (Kafka's base64 of the same UUID), tiering configs
(Kafka 3.9's names, ``broker_agent.contract.kafka39``), a partition's log end offset (Kafka gives
clients the high watermark, not the leader's log end offset) and followers' offsets (only
leaders answer ListOffsets), the tiered epoch, partition epoch and KIP-112 ``created`` list (not
on the wire), probe latency and KIP-963's gauges (JMX only), usable bytes (free space moves),
the broker's URL (its Kafka listener) and group generations / members (not in ListGroups).
"""

from __future__ import annotations

import pytest
from kafka.protocol.api_key import ApiKey

from broker_agent.contract.choices import LogDirState, ReplicaState
from broker_agent.contract.kafka39 import (
    REMOTE_LOG_COPY_DISABLE,
    REMOTE_LOG_DELETE_ON_DISABLE,
    REMOTE_STORAGE_ENABLE,
)
from broker_agent.contract.metadata_rows import metadata_tsv
from broker_agent.contract.models import snapshot_tsv
from broker_agent.contract.producer import Consumer, Producer
from broker_agent.kafka_wire.cluster import topic_uuid
from console.choices import ClusterBackend
from console.models import Broker, Cluster, GroupOffset, LogDir, Partition, Replica, SyncRun, Topic
from console.sync import do_sync_cluster, kafka_reads, source_for
from console.sync.kafka_reads import REQUIRED_APIS, uuid_text
from console.sync.kafka_source import KafkaClusterSource, dir_names
from tests.broker_agent.conftest import Load
from tests.console.simcluster import SimCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

TIERING = {REMOTE_STORAGE_ENABLE, REMOTE_LOG_COPY_DISABLE, REMOTE_LOG_DELETE_ON_DISABLE}
TIERING |= {"remote.log.disable.policy"}
#: Offsets that only grow: a sync read between two others lies between their values.
GROWING = ("log_start_offset", "local_log_start_offset", "high_watermark", "remote_log_end_offset")


class _Sim(SimCluster):
    """The console's simulated cluster with what ``Load`` drives (a producer, a consumer)."""

    def producer(self) -> Producer:
        return Producer(self.controller, self.secret)

    def consumer(self) -> Consumer:
        return Consumer(self.controller, self.secret)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cluster = _Sim(tmp_path_factory.mktemp("sim"))
    try:
        yield cluster
    finally:
        cluster.down()


def _kafka_cluster(sim, name: str, password_file, bootstrap: str | None = None) -> Cluster:
    return Cluster.objects.create(
        name=name,
        backend=ClusterBackend.KAFKA,
        kafka_bootstrap=bootstrap or sim.urls["kafka_bootstrap"],
        kafka_client_config={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "strata",
            "sasl_password_ref": str(password_file),
        },
    )


def _structure(cluster: Cluster) -> dict:
    """What both backends must show the same at any moment the metadata holds still."""
    topics = {
        t.name: (
            t.partition_count,
            t.tiered_state,
            t.disable_policy or "",
            t.min_insync_replicas,
            {k: v for k, v in t.configs.items() if k not in TIERING},
        )
        for t in Topic.objects.filter(cluster=cluster)
    }
    partitions = {
        (p.topic_name, p.partition): (
            p.leader,
            p.leader_epoch,
            p.replicas,
            p.isr,
            p.offline_replicas,
        )
        for p in Partition.objects.filter(cluster=cluster)
    }
    replicas = {
        (r.partition.topic_name, r.partition.partition, r.broker.broker_id): (
            r.log_dir.path if r.log_dir else None,
            r.state,
            r.is_leader,
        )
        for r in Replica.objects.filter(cluster=cluster).select_related(
            "partition", "broker", "log_dir"
        )
    }
    dirs = {
        (d.broker.broker_id, d.path): (d.state, d.total_bytes)
        for d in LogDir.objects.filter(broker__cluster=cluster).select_related("broker")
    }
    brokers = {b.broker_id: b.alive for b in Broker.objects.filter(cluster=cluster)}
    return {
        "topics": topics,
        "partitions": partitions,
        "replicas": replicas,
        "dirs": dirs,
        "brokers": brokers,
    }


def _offsets(cluster: Cluster) -> dict:
    return {
        (p.topic_name, p.partition): {
            f: getattr(p, f) for f in (*GROWING, "remote_log_start_offset")
        }
        for p in Partition.objects.filter(cluster=cluster)
    }


def _groups(cluster: Cluster) -> dict:
    return {
        (g.group_id, g.topic_name, g.partition): g.committed_offset
        for g in GroupOffset.objects.filter(cluster=cluster)
    }


def _between(before: dict, middle: dict, after: dict) -> list:
    """Partitions whose growing offsets in ``middle`` are not between ``before`` and ``after``."""
    return [
        (key, f, before[key][f], middle[key][f], after[key][f])
        for key in before
        for f in GROWING
        if not before[key][f] <= middle[key][f] <= after[key][f]
    ]


def test_both_backends_agree_under_load_and_a_failed_dir_shows_offline(sim):
    sim.cli(
        "create-topic", "tiered", "--partitions", "3", "--replication-factor", "3", "--tiered",
        "--segment-bytes", "2048",
    )  # fmt: skip
    sim.cli("produce", "--topic", "tiered", "--records", "1500", "--keyed")
    sim.controller.create_topic("orders", 6, 3, configs={"min.insync.replicas": "2"})
    wait_until(
        lambda: all(len(p.created) == 3 for p in sim.controller.topic("orders").partitions),
        30,
        what="replicas created",
    )
    joined = sim.controller.join_group("billing", ["orders"])
    sim.controller.commit_offsets(
        "billing", joined.member_id, joined.generation, {"orders": {0: 0}}
    )
    agents = Cluster.objects.create(
        name="local", controller_url=sim.urls["controller"], secret_ref=str(sim.secret_file)
    )
    kafka = _kafka_cluster(sim, "local-kafka", sim.secret_file)

    def kafka_between_two_agents_syncs():
        """One kafka sync between two agents' syncs: its growing offsets always lie between
        theirs; its structure equals theirs whenever it held still across the three (and no
        source failed: a broker the loaded machine fenced meanwhile is asked again)."""
        do_sync_cluster(agents)
        before = (_structure(agents), _offsets(agents))
        run = do_sync_cluster(kafka).run
        middle = (_structure(kafka), _offsets(kafka))
        do_sync_cluster(agents)
        after = (_structure(agents), _offsets(agents))
        assert _between(before[1], middle[1], after[1]) == []
        ok = run.errors == {} and run.brokers_synced == 3
        return ok and before[0] == after[0] and (before, middle, after)

    with Load(sim, "orders") as load:
        load.wait_acked(200)
        before, middle, _ = wait_until(kafka_between_two_agents_syncs, 60, what="still metadata")
        assert middle[0] == before[0]
        assert any(o["high_watermark"] > 0 for (t, _), o in middle[1].items() if t == "orders")
    assert not load.errors, load.errors

    # The load stopped: once the agents' inventory holds still, the kafka read equals it.
    def still():
        before, middle, after = kafka_between_two_agents_syncs()
        return before == after and (before, middle)

    (settled_structure, settled), kafka_read = wait_until(still, 60, what="a still inventory")
    assert kafka_read == (settled_structure, settled)
    tiered = {k: v for k, v in settled.items() if k[0] == "tiered"}
    assert any(o["remote_log_end_offset"] >= 0 for o in tiered.values()), "nothing was tiered"
    assert _groups(kafka) == _groups(agents) == {("billing", "orders", 0): 0}
    ids = dict(Topic.objects.filter(cluster=agents).values_list("name", "topic_id"))
    assert dict(Topic.objects.filter(cluster=kafka).values_list("name", "topic_id")) == {
        name: uuid_text(topic_uuid(tid)) for name, tid in ids.items()
    }

    # The rows the sync stages are the models' own rows of the same answer, byte for byte.
    source = source_for(kafka)
    try:
        md = source.metadata(None)
        assert source.metadata_tsv(None) == metadata_tsv(md)
        assert source.metadata(md.version).changed is False
        for broker in (1, 2, 3):
            assert source.snapshot_tsv(broker, "", None) == snapshot_tsv(
                source.snapshot(broker, "", None)
            )
    finally:
        source.close()

    # Nothing changed: the next sync finds the same metadata digest and rewrites nothing.
    kafka.refresh_from_db()
    assert kafka.backend_features["api_versions"]["35"] == [1, 4]  # DescribeLogDirs v1-v4
    # the simulated brokers have KIP-1066's cordoned.log.dirs, as Kafka 4.3 does
    assert kafka.backend_features["broker_configs"] == {"cordoned.log.dirs": True}

    def idle_sync():
        run = do_sync_cluster(kafka).run
        return not run.metadata_changed and run

    run = wait_until(idle_sync, 30, what="a sync of unchanged metadata")
    assert (run.topics_changed, run.partitions_upserted, run.replicas_upserted) == (0, 0, 0)
    assert LogDir.objects.filter(broker__cluster=kafka, probe_latency_ms__isnull=False).count() == 0

    # A dir failed the file-for-dir way (KIP-112's system test): OFFLINE after one sync.
    path = str(sim.log_dir_path(2, "logdir-0").resolve())
    sim.break_log_dir(2, "logdir-0")
    with sim.agent(2) as agent:
        wait_until(
            lambda: {d.path: d.state for d in agent.snapshot().log_dirs}[path] == "OFFLINE",
            30,
            what="the broker to find its dir failed",
        )
    do_sync_cluster(kafka)
    failed = LogDir.objects.get(broker__cluster=kafka, broker__broker_id=2, path=path)
    assert (failed.state, failed.error) == (LogDirState.OFFLINE, "KAFKA_STORAGE_ERROR")
    assert Broker.objects.get(cluster=kafka, broker_id=2).error == ""

    # Its replicas go OFFLINE on it once the brokers' metadata lists them offline.
    def offline_replicas():
        do_sync_cluster(kafka)
        return Replica.objects.filter(
            cluster=kafka, broker__broker_id=2, state=ReplicaState.OFFLINE, log_dir=failed
        ).count()

    assert wait_until(offline_replicas, 30, what="offline replicas on the failed dir") > 0
    do_sync_cluster(agents)
    assert _structure(kafka)["dirs"] == _structure(agents)["dirs"]


def test_bad_input_gives_a_clear_error_and_writes_nothing(sim, tmp_path, monkeypatch):
    """Wrong password, unreachable bootstrap, a call the cluster lacks (UNSUPPORTED_VERSION)
    and an error answered mid-read: the cluster's controller error says which, and no
    inventory is written."""
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-secret")
    refused = _kafka_cluster(sim, "wrong-password", wrong)
    run = do_sync_cluster(refused).run
    refused.refresh_from_db()
    assert (
        "SASL" in refused.controller_error or "refused the credentials" in refused.controller_error
    )
    assert "credentials" in refused.controller_error
    assert run.errors == {"controller": refused.controller_error}

    unreachable = _kafka_cluster(sim, "unreachable", sim.secret_file, bootstrap="127.0.0.1:1")
    run = do_sync_cluster(
        unreachable,
        source_factory=lambda c: KafkaClusterSource(c.kafka_client_kwargs(), timeout=1),
    ).run
    unreachable.refresh_from_db()
    assert unreachable.controller_error == (
        "SourceError: cannot reach Kafka at 127.0.0.1:1: no bootstrap server answered within 1 s"
    )
    assert not run.controller_ok

    # A cluster without a call the sync needs (here: asked to need one the sim lacks).
    monkeypatch.setitem(REQUIRED_APIS, ApiKey.DescribeAcls, "DescribeAcls")
    too_old = _kafka_cluster(sim, "too-old", sim.secret_file)
    do_sync_cluster(too_old)
    too_old.refresh_from_db()
    assert too_old.controller_error == (
        "SourceError: UNSUPPORTED_VERSION: the bootstrap broker does not support "
        "DescribeAcls, which a sync needs"
    )
    monkeypatch.undo()

    # An error answered after Metadata (DescribeConfigs of a resource type Kafka does not know).
    monkeypatch.setattr(kafka_reads, "TOPIC", 99)
    mid_read = _kafka_cluster(sim, "mid-read", sim.secret_file)
    do_sync_cluster(mid_read)
    mid_read.refresh_from_db()
    assert mid_read.controller_error.startswith(
        "SourceError: Kafka protocol error: InvalidRequestError: Unsupported resource type: 99"
    )

    for cluster in (refused, unreachable, too_old, mid_read):
        assert not Topic.objects.filter(cluster=cluster).exists()
        assert not Partition.objects.filter(cluster=cluster).exists()
        assert not Broker.objects.filter(cluster=cluster).exists()
        assert cluster.backend_features == {} and cluster.metadata_version == -1
        assert SyncRun.objects.filter(cluster=cluster).count() == 1


def test_kafka_dirs_are_named_by_the_last_part_of_their_path_where_it_is_unique():
    assert dir_names(["/var/lib/kafka/data-0", "/var/lib/kafka/data-1/"]) == {
        "/var/lib/kafka/data-0": "data-0",
        "/var/lib/kafka/data-1/": "data-1",
    }
    assert dir_names(["/disk1/kafka", "/disk2/kafka"]) == {
        "/disk1/kafka": "/disk1/kafka",
        "/disk2/kafka": "/disk2/kafka",
    }
