"""Issue #35's acceptance on an independent broker: a cluster registered with
``--kafka-bootstrap`` pointing at Tansu shows Tansu's topics after a sync. Written against the
stable names only (``manage.py register_cluster NAME --kafka-bootstrap``, ``manage.py
sync_cluster NAME``, the console's Topic / Partition rows), so it holds whichever way the kafka
backend reads.

Tansu answers no DescribeLogDirs and drops the connection on ListOffsets -3 / -4 / -5 although
it advertises v9 (``test_tansu.py`` lists its gaps): the sync reads its dirs as not available
and its tiered offsets as refused; what this test requires is the metadata a user sees."""

from __future__ import annotations

import contextlib
import io
import uuid

import pytest
from django.core.management import CommandError, call_command
from kafka import KafkaAdminClient

from console import capabilities as caps
from console.choices import ClusterBackend
from console.models import Cluster, Partition, Topic

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_cluster_registered_at_tansus_bootstrap_shows_its_topics_and_partitions(tansu):
    topic = f"strata-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=tansu, client_id="strata-test")
    try:
        spec = {"num_partitions": 3, "replication_factor": 1}
        admin.create_topics({topic: spec}, wait_for_metadata=True)
        broker = admin.describe_cluster()["brokers"][0]["broker_id"]
    finally:
        admin.close()

    call_command("register_cluster", "tansu", "--kafka-bootstrap", tansu, stdout=io.StringIO())
    out, err = io.StringIO(), io.StringIO()
    # non-zero when some sources failed (Tansu's gaps); its output goes into the messages below
    with contextlib.suppress(CommandError):
        call_command("sync_cluster", "tansu", stdout=out, stderr=err)
    said = f"sync_cluster said: {out.getvalue()}{err.getvalue()}"

    cluster = Cluster.objects.get(name="tansu")
    assert cluster.backend == ClusterBackend.KAFKA
    assert Topic.objects.filter(cluster=cluster, name=topic).exists(), said
    partitions = {
        p.partition: (p.leader, p.replicas, p.isr)
        for p in Partition.objects.filter(cluster=cluster, topic_name=topic)
    }
    assert partitions == dict.fromkeys(range(3), (broker, [broker], [broker])), said
    # KIP-966: Tansu answers DescribeTopicPartitions; an ISR that never shrank has no ELR
    elr = caps.by_key(cluster)[caps.ELIGIBLE_LEADER_REPLICAS]
    assert elr.supported, elr.reason
    assert {
        (tuple(p.eligible_leader_replicas), tuple(p.last_known_elr))
        for p in Partition.objects.filter(cluster=cluster, topic_name=topic)
    } == {((), ())}
