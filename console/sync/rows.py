"""Stage-table layouts of the sync and the rows they are filled with, from the pydantic
models the controller and agents send (:mod:`broker_agent.models`)."""

from __future__ import annotations

import hashlib

from broker_agent.models import BrokerSnapshot, TopicMetadata
from console.choices import TopicConfig
from console.sync.staging import jsonb

__all__ = [
    "BROKER_COLUMNS",
    "LOGDIR_COLUMNS",
    "PARTITION_COLUMNS",
    "REMOVED_COLUMNS",
    "REPLICA_COLUMNS",
    "REPLICA_DATA",
    "TOPIC_COLUMNS",
    "partition_rows",
    "removed_rows",
    "replica_rows",
    "topic_digest",
    "topic_row",
]


def topic_digest(topic: TopicMetadata) -> str:
    return hashlib.blake2b(topic.model_dump_json().encode(), digest_size=16).hexdigest()


def _min_isr(configs: dict[str, str]) -> int:
    raw = configs.get(TopicConfig.MIN_INSYNC_REPLICAS) or TopicConfig.DEFAULTS.get(
        TopicConfig.MIN_INSYNC_REPLICAS, "1"
    )
    try:
        return int(raw)
    except ValueError:
        return 1


# -- stage table layouts -----------------------------------------------------------------------

TOPIC_COLUMNS = [
    ("name", "text"),
    ("topic_id", "text"),
    ("configs", "jsonb"),
    ("tiered_state", "text"),
    ("tiered_epoch", "int4"),
    ("disable_policy", "text"),
    ("tiering_acks", "int4[]"),
    ("initial_partition_count", "int4"),
    ("undeleted_partition_count", "int4"),
    ("min_insync_replicas", "int4"),
    ("metadata_digest", "text"),
]
PARTITION_COLUMNS = [
    ("topic_name", "text"),
    ("partition", "int4"),
    ("leader", "int4"),
    ("leader_epoch", "int4"),
    ("partition_epoch", "int4"),
    ("replicas", "int4[]"),
    ("isr", "int4[]"),
    ("offline_replicas", "int4[]"),
    ("created", "int4[]"),
    ("leader_epoch_after_creation", "jsonb"),
    ("leader_epoch_before_deletion", "jsonb"),
    ("marked_for_deletion", "bool"),
    ("under_replicated", "bool"),
    ("under_min_isr", "bool"),
    ("offline", "bool"),
    ("has_offline_replicas", "bool"),
]
BROKER_COLUMNS = [
    ("broker_id", "int4"),
    ("url", "text"),
    ("alive", "bool"),
    ("last_heartbeat_ms", "int8"),
]
LOGDIR_COLUMNS = [
    ("broker_id", "int4"),
    ("name", "text"),
    ("path", "text"),
    ("state", "text"),
    ("total_bytes", "int8"),
    ("usable_bytes", "int8"),
    ("probe_latency_ms", "float8"),
    ("error", "text"),
    ("replica_count", "int4"),
    ("offline_replica_count", "int4"),
]
REPLICA_COLUMNS = [
    ("broker_id", "int4"),
    ("topic", "text"),
    ("partition", "int4"),
    ("log_dir", "text"),
    ("state", "text"),
    ("is_leader", "bool"),
    ("leader_epoch", "int4"),
    ("log_start_offset", "int8"),
    ("local_log_start_offset", "int8"),
    ("log_end_offset", "int8"),
    ("high_watermark", "int8"),
    ("size_bytes", "int8"),
    ("tiered_epoch", "int4"),
    ("copier_state", "text"),
    ("expiration_state", "text"),
    ("remote_log_start_offset", "int8"),
    ("remote_log_end_offset", "int8"),
    ("remote_bytes", "int8"),
    ("remote_segments", "int4"),
    ("version", "int8"),
]
REMOVED_COLUMNS = [("broker_id", "int4"), ("topic", "text"), ("partition", "int4")]
REPLICA_DATA = [c for c, _ in REPLICA_COLUMNS[4:]]


def topic_row(t: TopicMetadata, *, digest: bool = True) -> tuple:
    return (
        t.name,
        t.topic_id,
        jsonb(t.configs),
        t.tiered_state,
        t.tiered_epoch,
        t.disable_policy or "",
        list(t.tiering_acks),
        t.initial_partition_count,
        t.undeleted_partition_count,
        _min_isr(t.configs),
        topic_digest(t) if digest else "",
    )


def partition_rows(t: TopicMetadata):
    min_isr = _min_isr(t.configs)
    for p in t.partitions:
        yield (
            t.name,
            p.partition,
            p.leader,
            p.leader_epoch,
            p.partition_epoch,
            p.replicas,
            p.isr,
            p.offline_replicas,
            p.created,
            jsonb(p.leader_epoch_after_creation),
            jsonb(p.leader_epoch_before_deletion),
            p.marked_for_deletion,
            len(p.isr) < len(p.replicas),
            len(p.isr) < min_isr,
            p.leader < 0,
            bool(p.offline_replicas),
        )


def replica_rows(snap: BrokerSnapshot):
    for r in snap.replicas:
        yield (
            snap.broker_id,
            r.topic,
            r.partition,
            r.log_dir or "",
            r.state,
            r.is_leader,
            r.leader_epoch,
            r.log_start_offset,
            r.local_log_start_offset,
            r.log_end_offset,
            r.high_watermark,
            r.size_bytes,
            r.tiered_epoch,
            r.copier_state,
            r.expiration_state,
            r.remote_log_start_offset,
            r.remote_log_end_offset,
            r.remote_bytes,
            r.remote_segments,
            r.version,
        )


def removed_rows(snap: BrokerSnapshot):
    for key in snap.removed:
        topic, _, part = key.rpartition(":")
        yield (snap.broker_id, topic, int(part))
