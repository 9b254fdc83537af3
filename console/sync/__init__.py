"""Cluster sync: controller metadata and agent snapshots into PostgreSQL, in bulk.

See :mod:`console.sync.core` for the design and the parts a sync run composes; the parts are
internal to this package, which exports how a sync is run and where clusters are read from.
"""

from console.sync.core import (
    SyncBusy,
    SyncResult,
    do_sync_cluster,
    inventory_missing,
    source_for,
)
from console.sync.kafka_source import KafkaClusterSource
from console.sync.sources import (
    ClusterSource,
    HttpClusterSource,
    SourceError,
    StaticClusterSource,
)

__all__ = [
    "ClusterSource",
    "HttpClusterSource",
    "KafkaClusterSource",
    "SourceError",
    "StaticClusterSource",
    "SyncBusy",
    "SyncResult",
    "do_sync_cluster",
    "inventory_missing",
    "source_for",
]
