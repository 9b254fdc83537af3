"""The simulated cluster as a ``kafka`` cluster for the tiering tests (#36): registered through
its brokers' Kafka listeners (SASL/PLAIN, as ``make run``'s ``local-kafka``), a tiered topic,
a produce load, and the topic's configs and offsets read over Kafka's protocol, independently
of the workflow steps' own reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from console.models import Cluster

from .simcluster import Sim

__all__ = ["PARTITIONS", "TOPIC", "configs", "offsets", "tiered"]

TOPIC = "events"
PARTITIONS = 3


def tiered(sim: Sim, topic: str = TOPIC) -> None:
    """A tiered topic with small segments and ``local.retention.bytes=1``, which Kafka refuses
    ``remote.log.copy.disable=true`` with (a retain plan sets it to -2)."""
    sim.cli(
        "create-topic",
        topic,
        "--partitions",
        str(PARTITIONS),
        "--replication-factor",
        "3",
        "--tiered",
        "--segment-bytes",
        "2048",
        "--config",
        "local.retention.bytes=1",
    )


@contextlib.contextmanager
def _admin(cluster: Cluster) -> Iterator[Any]:
    from console.sync.kafka_source import connect_admin

    admin = connect_admin(cluster.kafka_client_kwargs(), timeout=10, request_timeout=20)
    try:
        yield admin
    finally:
        admin.close()


def offsets(cluster: Cluster, spec: int, topic: str = TOPIC) -> dict[int, int]:
    """ListOffsets ``spec`` (-2, -4, -5) of each partition."""
    from kafka import TopicPartition

    with _admin(cluster) as a:
        got = a.list_partition_offsets({TopicPartition(topic, p): spec for p in range(PARTITIONS)})
    return {tp.partition: at.offset for tp, at in got.items()}


def configs(cluster: Cluster, topic: str = TOPIC) -> dict[str, str]:
    """DescribeConfigs of ``topic``, every config."""
    from kafka.admin import ConfigResource, ConfigResourceType

    with _admin(cluster) as a:
        got = a.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
    return {k: c["value"] for k, c in got["topic"][topic].items()}
