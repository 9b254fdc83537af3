"""The Spark job contract (DESIGN.md, "Spark job contract"): Parquet schemas and their constants.

Imported by the job modules under ``spark-submit`` and by the generator, so it depends on pyarrow
only (no Django, no PySpark). The KIP-405 / KIP-950 states the columns hold are the broker's own
(:mod:`broker_agent.contract.choices`, shipped in the job zip): one definition for the agent and the jobs.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "EPOCH_ENTRY",
    "INVENTORY_SCHEMA",
    "PARTITIONS_OUT_SCHEMA",
    "PARTITION_KEY",
    "PARTITION_STATE_SCHEMA",
    "PLAN_SCHEMA",
    "QUARANTINE_SCHEMA",
    "PlanReason",
    "QuarantineReason",
]


class PlanReason:
    """Why a segment is in a plan (the ``reason`` column of ``plan/``)."""

    RETENTION_TIME = "retention_time"
    RETENTION_SIZE = "retention_size"
    LOG_START_OFFSET = "log_start_offset"
    DELETE_RETRY = "delete_retry"
    UNREFERENCED = "unreferenced"
    PURGE_DISABLED = "purge_disabled"
    ORPHAN = "orphan"

    RETENTION = (RETENTION_TIME, RETENTION_SIZE, LOG_START_OFFSET, DELETE_RETRY, UNREFERENCED)
    ALL = (*RETENTION, PURGE_DISABLED, ORPHAN)
    #: Reasons whose segments move the log start offset (Kafka's RemoteLogRetentionHandler).
    MOVES_LOG_START = (RETENTION_TIME, RETENTION_SIZE, LOG_START_OFFSET)


EPOCH_ENTRY = pa.struct([("epoch", pa.int32()), ("start_offset", pa.int64())])

PARTITION_KEY = ("cluster", "topic", "partition")

INVENTORY_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("segment_id", pa.string()),
        ("start_offset", pa.int64()),
        ("end_offset", pa.int64()),  # inclusive
        ("max_timestamp_ms", pa.int64()),
        ("size_bytes", pa.int64()),
        ("segment_leader_epochs", pa.list_(EPOCH_ENTRY)),
        ("tiered_epoch", pa.int32()),
        ("state", pa.string()),
        ("object_path", pa.string()),
        ("event_timestamp_ms", pa.int64()),
    ]
)

PARTITION_STATE_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("retention_ms", pa.int64()),
        ("retention_bytes", pa.int64()),  # -1 = unlimited
        ("log_start_offset", pa.int64()),
        ("local_log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("local_untiered_bytes", pa.int64()),
        ("leader_epochs", pa.list_(EPOCH_ENTRY)),
        ("tiered_state", pa.string()),
        ("tiered_epoch", pa.int32()),
        ("disable_policy", pa.string()),
        ("purge_below_tiered_epoch", pa.int32()),
    ]
)

PLAN_SCHEMA = pa.schema(
    [
        ("segment_id", pa.string()),
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("reason", pa.string()),
        ("size_bytes", pa.int64()),
        ("object_path", pa.string()),
    ]
)


class QuarantineReason:
    """Why a plan row is in ``quarantined/`` instead of ``plan/`` (its ``reason`` column)."""

    #: the row's ``object_path`` lies outside the remote store's root (``spark_tasks.store``)
    OUTSIDE_STORE = "object_outside_store"
    #: the row's object is inside, but another record of its partition names one outside: the
    #: partition's cleanup is refused as a whole (see ``spark_tasks.quarantine``)
    PARTITION_QUARANTINED = "partition_quarantined"

    ALL = (OUTSIDE_STORE, PARTITION_QUARANTINED)


#: ``quarantined/``: the plan rows withheld from a run, every planned row of a quarantined
#: partition (``spark_tasks.quarantine``).
QUARANTINE_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("segment_id", pa.string()),
        ("object_path", pa.string()),
        ("reason", pa.string()),
    ]
)

PARTITIONS_OUT_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("new_log_start_offset", pa.int64()),
        ("segments_deleted", pa.int64()),
        ("bytes_deleted", pa.int64()),
    ]
)


def spark_ddl(schema: pa.Schema) -> str:
    """A Spark DDL string for a flat or list<struct> pyarrow schema (used for UDF return types)."""

    def one(t: pa.DataType) -> str:
        if pa.types.is_string(t):
            return "string"
        if pa.types.is_int32(t):
            return "int"
        if pa.types.is_int64(t):
            return "bigint"
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_list(t):
            return f"array<{one(t.value_type)}>"
        if pa.types.is_struct(t):
            return "struct<" + ", ".join(f"{f.name}: {one(f.type)}" for f in t) + ">"
        raise TypeError(f"no Spark type for {t}")

    return ", ".join(f"`{f.name}` {one(f.type)}" for f in schema)
