"""Stage-table layouts of the sync and the SQL that fills them from the JSON the controller
and agents send (shaped as :mod:`broker_agent.contract.models`)."""

from __future__ import annotations

from collections.abc import Iterable

from broker_agent.contract.models import (
    TIER_METRIC_FIELDS,
    BrokerSnapshot,
    LogDirInfo,
    split_partition_key,
)
from console.choices import TopicConfig

__all__ = [
    "BROKER_COLUMNS",
    "LOGDIR_COLUMNS",
    "MIN_ISR_DEFAULT",
    "PARTITION_COLUMNS",
    "PARTITION_NOT_NULL",
    "REMOVED_COLUMNS",
    "REPLICA_COLUMNS",
    "REPLICA_DATA",
    "REPLICA_NOT_NULL",
    "STAGE_PARTITIONS_SQL",
    "STAGE_SNAPSHOT_SQL",
    "STAGE_TOPICS_SQL",
    "STAGE_TOPIC_ROWS_SQL",
    "TOPIC_COLUMNS",
    "TOPIC_ROW_COLUMNS",
    "TOPIC_ROW_NOT_NULL",
    "logdir_rows",
    "removed_rows",
]


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
#: ``stage_partition``, in the order of a ``format=tsv`` partition row
#: (``broker_agent.contract.metadata_rows.METADATA_PARTITION_COLUMNS``); the flags derived from them
#: (under-replicated, offline ...) are worked out where they are merged.
PARTITION_COLUMNS = [
    ("topic_name", "text"),
    ("partition", "int4"),
    ("replicas", "int4[]"),
    ("leader", "int4"),
    ("leader_epoch", "int4"),
    ("partition_epoch", "int4"),
    ("isr", "int4[]"),
    ("offline_replicas", "int4[]"),
    ("created", "int4[]"),
    ("leader_epoch_after_creation", "jsonb"),
    ("leader_epoch_before_deletion", "jsonb"),
    ("marked_for_deletion", "bool"),
]
#: Every column of a ``format=tsv`` partition row is required (the controller writes defaults).
PARTITION_NOT_NULL = [c for c, _ in PARTITION_COLUMNS]
#: A ``format=tsv`` topic row (``METADATA_TOPIC_COLUMNS``), staged as it comes in
#: ``raw_topic_row`` and written to ``stage_topic`` by ``STAGE_TOPIC_ROWS_SQL``.
TOPIC_ROW_COLUMNS = [*TOPIC_COLUMNS[:9], ("digest", "text")]
#: Required fields of a topic row (the others default as in ``TopicMetadata``).
TOPIC_ROW_NOT_NULL = [
    "name",
    "topic_id",
    "tiered_state",
    "tiered_epoch",
    "initial_partition_count",
    "undeleted_partition_count",
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
    ("cordoned", "bool"),
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
    *((c, "int8") for c in TIER_METRIC_FIELDS),
    ("version", "int8"),
]
#: KIP-963's tiered metrics of a replica (and of a partition: its leader's; of a topic: the sum).
TIER_METRICS = list(TIER_METRIC_FIELDS)
REMOVED_COLUMNS = [("broker_id", "int4"), ("topic", "text"), ("partition", "int4")]
REPLICA_DATA = [c for c, _ in REPLICA_COLUMNS[4:]]
#: Every replica column is required but the log dir (agents' format=tsv rows are COPY-ed into
#: stage_replica as they come, and these constraints refuse a row that lacks a field).
REPLICA_NOT_NULL = [c for c, _ in REPLICA_COLUMNS if c != "log_dir"]


# -- filling the stage tables from the JSON answers, in PostgreSQL --------------------------------
#
# The controller answers its metadata and agents their snapshots as COPY rows (``format=tsv``,
# loaded by ``StageTable.copy_text``): no Python object per partition or replica, no JSON for
# PostgreSQL to parse. A controller or agent that predates the format answers JSON, which goes
# to PostgreSQL unparsed and is expanded there with ``jsonb_to_recordset`` (``STAGE_TOPICS_SQL``
# and ``STAGE_PARTITIONS_SQL``, ``STAGE_SNAPSHOT_SQL``). Defaults are the pydantic models'
# (broker_agent.contract.models); a missing required field shows as NULL and is refused.

MIN_ISR_DEFAULT = TopicConfig.DEFAULTS.get(TopicConfig.MIN_INSYNC_REPLICAS, "1")

#: A topic's min.insync.replicas: its config (``m.v``, from ``t.configs``) when it is a number,
#: else 1.
_MIN_ISR_VALUE = """LATERAL (SELECT coalesce(nullif(t.configs ->> %(min_isr_key)s, ''),
                                 %(min_isr_default)s) AS v) m"""
#: stage_topic's columns but the name, from a topic's fields ``t``, and its min.insync.replicas.
_STAGE_TOPIC = (
    """INSERT INTO stage_topic (name, topic_id, configs, tiered_state, tiered_epoch,
        disable_policy, tiering_acks, initial_partition_count, undeleted_partition_count,
        min_insync_replicas, metadata_digest)
    SELECT""",
    """t.topic_id, coalesce(t.configs, '{}'), t.tiered_state, t.tiered_epoch,
        coalesce(t.disable_policy, ''), coalesce(t.tiering_acks, '{}'),
        t.initial_partition_count, t.undeleted_partition_count,""",
)
_MIN_ISR = "CASE WHEN m.v ~ '^\\s*[+-]?[0-9]{1,9}\\s*$' THEN m.v::int ELSE 1 END"


def _topic_sql(template: str) -> str:
    """``template`` with the shared parts of the two ways into stage_topic filled in."""
    for key, value in (
        ("{insert}", _STAGE_TOPIC[0]),
        ("{topic_values}", _STAGE_TOPIC[1]),
        ("{min_isr}", _MIN_ISR),
        ("{min_isr_value}", _MIN_ISR_VALUE),
    ):
        template = template.replace(key, value)
    return template


#: raw_topic (name, digest, j) -> stage_topic; ``%(delta)s``: digests blanked (partial topics).
STAGE_TOPICS_SQL = _topic_sql("""
    {insert} r.name, {topic_values}
        {min_isr}, CASE WHEN %(delta)s THEN '' ELSE r.digest END
    FROM raw_topic r,
        jsonb_to_record(r.j) AS t(topic_id text, configs jsonb, tiered_state text,
            tiered_epoch int4, disable_policy text, tiering_acks int4[],
            initial_partition_count int4, undeleted_partition_count int4),
        {min_isr_value}
    RETURNING (name IS NULL OR topic_id IS NULL OR tiered_state IS NULL
               OR tiered_epoch IS NULL OR initial_partition_count IS NULL
               OR undeleted_partition_count IS NULL) AS bad
""")

#: raw_topic_row (a ``format=tsv`` answer's topic rows) -> stage_topic, as STAGE_TOPICS_SQL.
STAGE_TOPIC_ROWS_SQL = _topic_sql("""
    {insert} t.name, {topic_values}
        {min_isr}, CASE WHEN %(delta)s THEN '' ELSE t.digest END
    FROM raw_topic_row t,
        {min_isr_value}
""")

#: The staged topics' partitions (from raw_topic) -> stage_partition.
STAGE_PARTITIONS_SQL = """
    INSERT INTO stage_partition (topic_name, partition, leader, leader_epoch, partition_epoch,
        replicas, isr, offline_replicas, created, leader_epoch_after_creation,
        leader_epoch_before_deletion, marked_for_deletion)
    SELECT r.name, p.partition, coalesce(p.leader, -1), coalesce(p.leader_epoch, 0),
        coalesce(p.partition_epoch, 0), p.replicas, p.isr, coalesce(p.offline_replicas, '{}'),
        coalesce(p.created, '{}'), coalesce(p.leader_epoch_after_creation, '{}'),
        coalesce(p.leader_epoch_before_deletion, '{}'), coalesce(p.marked_for_deletion, false)
    FROM raw_topic r,
        jsonb_to_recordset(r.j -> 'partitions') AS p(partition int4, replicas int4[],
            leader int4, leader_epoch int4, partition_epoch int4, isr int4[],
            offline_replicas int4[], created int4[], leader_epoch_after_creation jsonb,
            leader_epoch_before_deletion jsonb, marked_for_deletion bool)
    RETURNING (partition IS NULL OR replicas IS NULL OR isr IS NULL) AS bad
"""

#: One agent's snapshot (``%(body)s``, jsonb) -> stage_replica; answers the snapshot without
#: its replicas (validated in Python), how many rows lacked a required field and how many
#: were staged.
STAGE_SNAPSHOT_SQL = """
    WITH raw AS (SELECT %(body)s::jsonb AS j),
    ins AS (
        INSERT INTO stage_replica (broker_id, topic, partition, log_dir, state, is_leader,
            leader_epoch, log_start_offset, local_log_start_offset, log_end_offset,
            high_watermark, size_bytes, tiered_epoch, copier_state, expiration_state,
            remote_log_start_offset, remote_log_end_offset, remote_bytes, remote_segments,
            remote_copy_lag_bytes, remote_copy_lag_segments, remote_delete_lag_bytes,
            remote_delete_lag_segments, fenced_remote_bytes, fenced_remote_segments,
            remote_log_size_bytes, version)
        SELECT (raw.j ->> 'broker_id')::int4, r.topic, r.partition, coalesce(r.log_dir, ''),
            r.state, r.is_leader, r.leader_epoch, r.log_start_offset,
            r.local_log_start_offset, r.log_end_offset, r.high_watermark, r.size_bytes,
            r.tiered_epoch, r.copier_state, r.expiration_state,
            coalesce(r.remote_log_start_offset, -1), coalesce(r.remote_log_end_offset, -1),
            coalesce(r.remote_bytes, 0), coalesce(r.remote_segments, 0),
            coalesce(r.remote_copy_lag_bytes, 0), coalesce(r.remote_copy_lag_segments, 0),
            coalesce(r.remote_delete_lag_bytes, 0), coalesce(r.remote_delete_lag_segments, 0),
            coalesce(r.fenced_remote_bytes, 0), coalesce(r.fenced_remote_segments, 0),
            coalesce(r.remote_log_size_bytes, 0), coalesce(r.version, 0)
        FROM raw, jsonb_to_recordset(raw.j -> 'replicas') AS r(topic text, partition int4,
            log_dir text, state text, is_leader bool, leader_epoch int4, log_start_offset int8,
            local_log_start_offset int8, log_end_offset int8, high_watermark int8,
            size_bytes int8, tiered_epoch int4, copier_state text, expiration_state text,
            remote_log_start_offset int8, remote_log_end_offset int8, remote_bytes int8,
            remote_segments int4, remote_copy_lag_bytes int8, remote_copy_lag_segments int4,
            remote_delete_lag_bytes int8, remote_delete_lag_segments int4,
            fenced_remote_bytes int8, fenced_remote_segments int4, remote_log_size_bytes int8,
            version int8)
        RETURNING (topic IS NULL OR partition IS NULL OR state IS NULL OR is_leader IS NULL
                   OR leader_epoch IS NULL OR log_start_offset IS NULL
                   OR local_log_start_offset IS NULL OR log_end_offset IS NULL
                   OR high_watermark IS NULL OR size_bytes IS NULL OR tiered_epoch IS NULL
                   OR copier_state IS NULL OR expiration_state IS NULL) AS bad
    )
    SELECT raw.j - 'replicas', (SELECT count(*) FILTER (WHERE bad) FROM ins),
        (SELECT count(*) FROM ins)
    FROM raw
"""


def logdir_rows(broker_id: int, dirs: Iterable[LogDirInfo]):
    """``stage_logdir`` rows (LOGDIR_COLUMNS) of one broker's log dirs, as the controller's
    heartbeats or the broker's own agent report them."""
    for d in dirs:
        yield (
            broker_id,
            d.name,
            d.path,
            d.state,
            d.total_bytes,
            d.usable_bytes,
            d.probe_latency_ms,
            d.error or "",
            d.replica_count,
            d.offline_replica_count,
            d.cordoned,
        )


def removed_rows(snap: BrokerSnapshot):
    for key in snap.removed:
        topic, part = split_partition_key(key)
        yield (snap.broker_id, topic, part)
