"""The read API's response and filter schemas (``console.api``'s routes answer with them).

Their field names are STABLE, as the paths are (see ``console.api``); a field the protocol of a
cluster's backend cannot give is ``null`` with its reason, never 0.
"""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema
from pydantic import BaseModel, ConfigDict, computed_field

from console import selectors


class StaleSource(Schema):
    source: str
    error: str
    last_good_at: datetime | None


class CapabilityOut(Schema):
    key: str = Field(
        description="tiered_epoch, linear_hashing, log_dir_reset, cordon, tiered_offsets, "
        "probe_latency, restart_control, log_dirs, leader_election or partition_expansion"
    )
    label: str
    supported: bool
    known: bool = Field(description="false until the first sync tells (then supported is false)")
    reason: str = Field(description="why not, when not supported; empty otherwise")


class ClusterOut(Schema):
    name: str
    backend: str = Field(description="agents (controller + broker agents) or kafka")
    cluster_id: str
    controller_url: str = Field(description="agents backend; empty for kafka")
    kafka_bootstrap: str = Field(description="kafka backend: host:port,...; empty for agents")
    sync_error_source: str = Field(
        description="what controller_error is the error of: 'controller' (agents) or "
        "'Kafka bootstrap' (kafka)"
    )
    synced_at: datetime | None
    sync_duration_ms: int | None
    metadata_version: int
    controller_stale: bool
    controller_error: str
    controller_last_good_at: datetime | None
    broker_count: int
    brokers_online: int
    brokers_degraded: int
    brokers_offline: int
    brokers_stale: int
    offline_log_directory_count: int
    topic_count: int
    topics_by_tiered_state: dict[str, int]
    partition_count: int
    offline_partition_count: int
    under_replicated_partition_count: int
    under_min_isr_partition_count: int
    offline_replica_count: int
    capabilities: list[CapabilityOut]


class ClustersOut(Schema):
    synced_at: datetime | None
    clusters: list[ClusterOut]


class Rows(BaseModel):
    """An output row of which a route lists many (a topic's 1,000 partitions, a fleet's 1,200
    log dirs): validated by pydantic from the model's attributes, without ninja's
    ``Schema`` getter per field (most of a 1,000-partition answer's Python time, #17)."""

    model_config = ConfigDict(from_attributes=True)


class LogDirOut(Rows):
    name: str
    path: str
    state: str
    total_bytes: int
    usable_bytes: int
    replica_count: int
    offline_replica_count: int
    probe_latency_ms: float | None
    error: str
    state_changed_at: datetime | None


class BrokerOut(Rows):
    id: int
    url: str
    state: str
    alive: bool
    offline_log_directory_count: int
    offline_replica_count: int
    down_replica_count: int
    stale: bool
    error: str
    last_good_at: datetime | None
    log_dirs: list[LogDirOut]


class BrokersOut(Schema):
    cluster: str
    synced_at: datetime | None
    stale_sources: list[StaleSource]
    brokers: list[BrokerOut]


class TopicSummary(Schema):
    name: str
    topic_id: str
    tiered_state: str
    tiered_epoch: int
    policy: str | None
    partition_count: int
    initial_partition_count: int
    undeleted_partition_count: int
    remote_bytes: int | None = Field(
        description="bytes in the remote tier; null: not available for this cluster (Kafka "
        "reports it only as KIP-963's RemoteLogSizeBytes, in JMX)"
    )
    local_bytes: int
    has_remote_data: bool
    offline_partition_count: int
    under_replicated_partition_count: int
    under_min_isr_partition_count: int


class TopicsOut(Schema):
    cluster: str
    synced_at: datetime | None
    stale_sources: list[StaleSource]
    count: int
    page: int
    page_size: int
    num_pages: int
    results: list[TopicSummary]


class TopicFilters(Schema):
    name: str | None = None
    tiered_state: str | None = None
    policy: str | None = None
    has_remote_data: bool | None = None
    sort: str | None = None
    page: int = 1
    page_size: int = selectors.DEFAULT_PAGE_SIZE


class Tiering(Schema):
    state: str
    epoch: int
    policy: str | None
    remote_log_start_offset: int
    remote_log_end_offset: int
    local_log_start_offset: int
    log_end_offset: int
    log_start_offset: int
    remote_bytes: int | None = Field(
        description="bytes in the remote tier (summed); null: not available for this cluster "
        "(Kafka reports it only as KIP-963's RemoteLogSizeBytes, in JMX)"
    )
    local_bytes: int
    tiering_acks: list[int]
    remote_copy_lag_bytes: int | None = Field(
        description="KIP-963 RemoteCopyLagBytes (summed); null: not available for this cluster"
    )
    remote_copy_lag_segments: int | None
    remote_delete_lag_bytes: int | None = Field(
        description="KIP-963 RemoteDeleteLagBytes (summed); null: not available for this cluster"
    )
    remote_delete_lag_segments: int | None
    fenced_remote_bytes: int = Field(
        description="fenced by a delete-policy disablement, not purged yet"
    )
    fenced_remote_segments: int
    remote_log_size_bytes: int | None = Field(
        description="KIP-963 RemoteLogSizeBytes (summed); null: not available for this cluster"
    )
    not_available: str = Field(
        "",
        description="why the KIP-963 figures and remote_bytes are null (a kafka cluster: they "
        "live in JMX)",
    )


class PartitionOut(Rows):
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    eligible_leader_replicas: list[int] | None = Field(
        description="KIP-966 ELR: replicas out of the ISR still eligible to lead; null: not "
        "available for this cluster (see the eligible_leader_replicas capability)"
    )
    last_known_elr: list[int] | None = Field(
        description="KIP-966 LastKnownElr; null: not available for this cluster"
    )
    under_replicated: bool
    under_min_isr: bool
    marked_for_deletion: bool
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    high_watermark: int
    remote_log_start_offset: int
    remote_log_end_offset: int
    remote_bytes: int | None = Field(description="null: not available for this cluster (JMX)")
    local_bytes: int
    remote_copy_lag_bytes: int | None = Field(description="KIP-963; null: not available")
    remote_copy_lag_segments: int | None
    remote_delete_lag_bytes: int | None = Field(description="KIP-963; null: not available")
    remote_delete_lag_segments: int | None
    fenced_remote_bytes: int
    fenced_remote_segments: int
    remote_log_size_bytes: int | None = Field(description="KIP-963; null: not available")

    @computed_field(description="KIP-1005 earliest-local: the local log start offset")
    @property
    def earliest_local_offset(self) -> int:
        return self.local_log_start_offset

    @computed_field(
        description="KIP-1005 latest-tiered: the highest offset in the remote tier, -1 if none"
    )
    @property
    def latest_tiered_offset(self) -> int:
        return self.remote_log_end_offset


class OrderingPartitionOut(Schema):
    partition: int
    kind: str = Field(
        description="new (made by an expansion), marked (for deletion) or holds (receives the "
        "keys of a marked partition)"
    )
    status: str = Field(
        description="released / waits on B (new: B is its barrier); draining / drained "
        "(marked); holds after the shrink (a marked partition that sends it keys is not drained)"
    )
    held: bool = Field(description="the group may not deliver all of it yet")
    position: int | None = Field(description="the group's committed offset; null: not started")
    lag: int
    parent: int | None = Field(None, description="the partition it split (new)")
    barrier: int | None = Field(
        None,
        description="KIP-253 step 4.2 (new): the partition the group must consume first, up to "
        "split_epoch - the first of its ancestors that existed before the expansion (its parent "
        "unless the parent is new too)",
    )
    split_epoch: int | None = Field(
        None, description="leaderEpochAfterCreation of the barrier partition"
    )
    barrier_position: int | None = Field(
        None, description="the group's committed offset on the barrier partition"
    )
    waits_on: list[int] = []
    deletion_epoch: int | None = Field(None, description="leaderEpochBeforeDeletion")


class OrderingGroupOut(Schema):
    group_id: str
    lag: int
    partitions_count: int = Field(description="gated partitions in all (at most 100 listed)")
    partitions: list[OrderingPartitionOut]


class OrderingOut(Schema):
    barrier: bool = Field(description="false when enable.ordered.delivery=false")
    groups_count: int = Field(description="groups with positions on the topic (20 listed)")
    groups: list[OrderingGroupOut]


class GroupPositionOut(Schema):
    topic: str
    partition: int
    committed_offset: int
    lag: int | None = Field(description="high watermark minus position; null: partition gone")


class GroupOut(Schema):
    group_id: str
    generation: int
    members: int
    lag: int = Field(description="summed over all the group's positions")
    positions_count: int
    positions: list[GroupPositionOut] = Field(
        description="the first 100 by topic and partition; the group's own route pages them all"
    )


class GroupDetailOut(Schema):
    cluster: str
    synced_at: datetime | None
    group_id: str
    generation: int
    members: int
    lag: int
    positions_count: int
    page: int
    page_size: int
    num_pages: int
    positions: list[GroupPositionOut]


class GroupsOut(Schema):
    cluster: str
    synced_at: datetime | None
    count: int = Field(description="consumer groups in all")
    page: int
    page_size: int
    num_pages: int
    groups: list[GroupOut]


class DirMoveOut(Rows):
    """A replica being moved between two dirs of its broker (AlterReplicaLogDirs, KIP-113)."""

    partition: int
    broker_id: int
    log_dir: str = Field(description="the dir it serves from until the swap ('' if unknown)")
    future_log_dir: str = Field(description="the dir its future replica is copied to")
    future_size_bytes: int
    future_offset_lag: int = Field(description="offsets the future replica is behind")
    synced_at: datetime


class TopicOut(Schema):
    cluster: str
    synced_at: datetime | None
    stale_sources: list[StaleSource]
    name: str
    topic_id: str
    configs: dict[str, str]
    tiering: Tiering
    initial_partition_count: int
    undeleted_partition_count: int
    previous_undeleted_partition_count: int | None
    partition_count: int
    partitions_page: int
    partitions_page_size: int
    partitions: list[PartitionOut]
    dir_moves: list[DirMoveOut] = Field(
        description="replicas of this topic being moved between log dirs now"
    )
    ordering: OrderingOut


class KeyBefore(Schema):
    undeleted_partition_count: int
    partition: int


class PartitionForKeyOut(Schema):
    cluster: str
    synced_at: datetime | None
    topic: str
    key: str
    hash: int
    partition: int
    initial_partition_count: int
    undeleted_partition_count: int
    before: KeyBefore | None


class DirPointOut(Schema):
    at: datetime
    used_bytes: int
    total_bytes: int
    probe_latency_ms: float | None
    state: str = Field(description="The worst KIP-112 state seen in the bucket.")


class TopicPointOut(Schema):
    at: datetime
    remote_bytes: int | None = Field(description="null: not available for this cluster (JMX)")
    local_bytes: int
    fenced_remote_bytes: int
    remote_copy_lag_bytes: int | None = Field(description="KIP-963; null: not available")
    remote_delete_lag_bytes: int | None = Field(description="KIP-963; null: not available")


class SeriesOut(Schema):
    cluster: str
    range: str
    step_seconds: int = Field(description="Bucket width; each point is its bucket's peak.")
    start: datetime
    end: datetime
    last_sample_at: datetime | None


class DirHistoryOut(SeriesOut):
    broker: int
    log_dir: str
    points: list[DirPointOut] = Field(description="Buckets with a sample; a gap: none.")


class TopicHistoryOut(SeriesOut):
    topic: str
    points: list[TopicPointOut] = Field(description="Buckets with a sample; a gap: none.")
