"""Each cluster states what it can do, and why not (issue #35): an agents cluster everything;
a kafka cluster what Kafka as shipped does, the rest from what its first sync learnt."""

from __future__ import annotations

import pytest
from django.utils import timezone

from console import capabilities as caps
from console.models import Cluster

pytestmark = pytest.mark.django_db


def kafka(**features) -> Cluster:
    return Cluster.objects.create(
        name=f"k{Cluster.objects.count()}",
        backend="kafka",
        kafka_bootstrap="127.0.0.1:9092",
        backend_features=features,
    )


def status(cluster: Cluster) -> dict[str, str]:
    return {c.key: c.status for c in caps.capabilities(cluster)}


def test_an_agents_cluster_supports_every_capability_but_kip_966_elr(cluster):
    assert status(cluster) == {
        **dict.fromkeys(caps.KEYS, "supported"),
        "eligible_leader_replicas": "unsupported",
    }
    assert "agents' API carries no eligible leader replicas" in (
        caps.by_key(cluster)["eligible_leader_replicas"].reason
    )
    assert all(caps.kind_unsupported(cluster, k) is None for k in caps.KIND_NEEDS)
    assert caps.gauges_not_available(cluster) == {}


def test_a_kafka_cluster_before_its_first_sync_says_what_is_not_known_yet():
    got = {c.key: c for c in caps.capabilities(kafka())}
    assert got["tiered_offsets"].status == "unknown" and got["cordon"].status == "unknown"
    assert got["tiered_offsets"].reason == "not known until the first sync"
    assert not got["tiered_offsets"].supported
    # what Kafka as shipped lacks is known without a sync, with the reason an SRE reads
    for key in ("tiered_epoch", "linear_hashing", "log_dir_reset", "probe_latency"):
        assert got[key].status == "unsupported"
    assert "Kafka shipped KIP-950 without a tiered epoch" in got["tiered_epoch"].reason
    assert "never shipped KIP-253" in got["linear_hashing"].reason
    assert "JMX" in got["probe_latency"].reason
    assert "no call to restart a broker" in got["restart_control"].reason


def test_what_a_sync_did_not_learn_is_not_called_waiting_for_the_first_sync():
    c = kafka(api_versions={"2": [0, 9]})
    c.synced_at = timezone.now()
    cordon = caps.by_key(c)["cordon"]
    assert cordon.status == "unknown"
    assert cordon.reason == "not known: the last sync did not learn it from the brokers"


def test_tiered_offsets_need_list_offsets_v9_as_kip_1005_adds_latest_tiered():
    assert status(kafka(api_versions={"2": [0, 9]}))["tiered_offsets"] == "supported"
    older = caps.by_key(kafka(api_versions={"2": [0, 8]}))["tiered_offsets"]
    assert older.status == "unsupported" and "up to v8" in older.reason and "v9" in older.reason
    none = caps.by_key(kafka(api_versions={"3": [0, 12]}))["tiered_offsets"]
    assert none.reason == "the brokers do not answer ListOffsets"


def test_cordon_follows_whether_the_brokers_know_kip_1066_cordoned_log_dirs():
    assert status(kafka(broker_configs={"cordoned.log.dirs": True}))["cordon"] == "supported"
    lacking = caps.by_key(kafka(broker_configs={"cordoned.log.dirs": False}))["cordon"]
    assert lacking.status == "unsupported" and "KIP-1066" in lacking.reason


def test_workflow_kinds_a_kafka_cluster_cannot_run_name_the_capability_they_need():
    c = kafka(api_versions={"2": [0, 9]})
    assert caps.kind_unsupported(c, "remote_purge").key == "tiered_epoch"
    # tiering on kafka is Kafka 3.9's config change, verified by the -4 / -5 offsets
    assert caps.kind_unsupported(c, "disable_tiering") is None
    older = kafka(api_versions={"2": [0, 8]})
    assert caps.kind_unsupported(older, "disable_tiering").key == "tiered_offsets"
    # Kafka grows a topic by CreatePartitions (API key 37), keys remapped; it never shrinks one
    assert caps.kind_unsupported(c, "expand_partitions").key == "partition_expansion"
    assert caps.kind_unsupported(kafka(api_versions={"37": [0, 3]}), "expand_partitions") is None
    assert caps.kind_unsupported(c, "shrink_partitions").key == "linear_hashing"
    # the restart is the operator's manual step there: log-dir recovery needs DescribeLogDirs
    assert caps.kind_unsupported(c, "recover_log_dir").key == "log_dirs"
    assert caps.kind_unsupported(kafka(api_versions={"35": [0, 4]}), "recover_log_dir") is None
    assert caps.kind_unsupported(c, "a_kind_needing_nothing") is None


def test_kip_963_gauges_of_a_kafka_cluster_are_null_with_the_reason_never_zero():
    gauges = caps.gauges_not_available(kafka())
    assert gauges["remote_copy_lag_bytes"] is None and gauges["remote_log_size_bytes"] is None
    assert "JMX" in gauges["not_available"]


def test_a_kafka_cluster_without_describe_log_dirs_or_readable_tiered_offsets_says_why():
    """Tansu 0.6 lacks DescribeLogDirs and drops the connection on ListOffsets -4 / -5 though it
    advertises v9: the sync records both and the capabilities say so."""
    cluster = Cluster.objects.create(
        name="peer",
        backend="kafka",
        kafka_bootstrap="peer:9092",
        synced_at=timezone.now(),
        backend_features={
            "api_versions": {"2": [0, 9], "3": [0, 12]},
            "broker_configs": {"cordoned.log.dirs": False},
            "tiered_offsets_refused": "broker 1 failed ListOffsets -4: KafkaConnectionError",
        },
    )
    got = caps.by_key(cluster)
    assert not got[caps.LOG_DIRS].supported and "DescribeLogDirs" in got[caps.LOG_DIRS].reason
    assert not got[caps.TIERED_OFFSETS].supported
    assert "could not read" in got[caps.TIERED_OFFSETS].reason


def test_elr_follows_whether_the_brokers_answer_describe_topic_partitions():
    assert status(kafka(api_versions={"75": [0, 0]}))["eligible_leader_replicas"] == "supported"
    older = caps.by_key(kafka(api_versions={"3": [0, 12]}))["eligible_leader_replicas"]
    assert older.status == "unsupported" and "DescribeTopicPartitions" in older.reason
    assert caps.by_key(kafka())["eligible_leader_replicas"].status == "unknown"
