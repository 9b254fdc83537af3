"""Topics (with their KIP-950 tiering state), partitions (KIP-253) and replicas (KIP-112).

Partition's and Replica's foreign keys have no database constraint (``db_constraint=False``):
deferred checks cost 11-20 s at COMMIT of a large full sync. So the sync guarantees integrity
itself (ids resolved by joins, dependents deleted first; ``test_no_dangling_rows_*`` pin it), and
any raw-SQL delete of topics, partitions, brokers or log dirs must delete their replicas (and
partitions) itself; ORM deletes still cascade. Partitions, replicas and group positions are
UNLOGGED, emptied after a crash and rebuilt by the next sync: nothing the console decides may
live in them (``previous_leader``, ``leader_changed_at``, ``marked_log_start_offset`` restart).
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from broker_agent.contract.models import is_internal_topic
from console.choices import TieredState, choices
from console.models.clusters import Cluster
from console.models.disks import Broker, LogDir

__all__ = ["Partition", "Replica", "ReplicaMove", "Topic"]


class TierMetrics(models.Model):
    """KIP-963's tiered metrics: a replica's as its broker reports them (leaders only), a
    partition's are its leader's, a topic's the sum (see ``console.sync.aggregates`` and
    ``broker_agent`` ``Broker.tier_metrics``). ``fenced_*`` is what a delete-policy
    disablement fenced and the purge has not deleted yet (#14 gap 8)."""

    remote_copy_lag_bytes = models.BigIntegerField(default=0, db_default=0)
    remote_copy_lag_segments = models.BigIntegerField(default=0, db_default=0)
    remote_delete_lag_bytes = models.BigIntegerField(default=0, db_default=0)
    remote_delete_lag_segments = models.BigIntegerField(default=0, db_default=0)
    fenced_remote_bytes = models.BigIntegerField(default=0, db_default=0)
    fenced_remote_segments = models.BigIntegerField(default=0, db_default=0)
    remote_log_size_bytes = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        abstract = True


class Topic(TierMetrics):
    """A topic: configs, KIP-950 tiering state, KIP-253 partition counts, and aggregates.

    ``previous_undeleted_partition_count`` is the count before the last expansion or shrink the
    console saw (KIP-253 keeps no history; Strata records it at sync time) so that a key can be
    looked up "before" as well as "now". The byte and count aggregates are sums over the topic's
    partitions, maintained by the sync (:mod:`console.sync.aggregates`).

    Topic-level offsets (``log_end_offset`` ...) are the sums over partitions: the "total" bar
    then reads in records, like KIP-950's per-partition figure.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topics")
    name = models.CharField(max_length=249)
    topic_id = models.CharField(max_length=64)
    configs = models.JSONField(default=dict)
    tiered_state = models.CharField(
        max_length=16, choices=choices(TieredState.ALL), default=TieredState.NONE
    )
    tiered_epoch = models.IntegerField(default=0)
    disable_policy = models.CharField(max_length=16, blank=True)
    tiering_acks = ArrayField(models.IntegerField(), default=list, blank=True)
    initial_partition_count = models.IntegerField()
    undeleted_partition_count = models.IntegerField()
    previous_undeleted_partition_count = models.IntegerField(null=True, blank=True)
    partition_count_changed_at = models.DateTimeField(null=True, blank=True)
    min_insync_replicas = models.IntegerField(default=1)
    metadata_digest = models.CharField(max_length=32, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)

    # Aggregates over partitions (console.sync.aggregates).
    partition_count = models.IntegerField(default=0)
    log_start_offset = models.BigIntegerField(default=0)
    local_log_start_offset = models.BigIntegerField(default=0)
    log_end_offset = models.BigIntegerField(default=0)
    remote_log_start_offset = models.BigIntegerField(default=-1)
    remote_log_end_offset = models.BigIntegerField(default=-1)
    remote_bytes = models.BigIntegerField(default=0)
    local_bytes = models.BigIntegerField(default=0)
    remote_segments = models.BigIntegerField(default=0)
    offline_partition_count = models.IntegerField(default=0)
    under_replicated_partition_count = models.IntegerField(default=0)
    under_min_isr_partition_count = models.IntegerField(default=0)
    offline_replica_count = models.IntegerField(default=0)
    marked_for_deletion_count = models.IntegerField(default=0)
    #: Partitions with remote data (``remote_log_end_offset >= 0``): the remote offsets above are
    #: sums over those, -1 when there is none; kept so that a sync can add and subtract.
    remote_partition_count = models.IntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="topic_unique")]
        indexes = [
            models.Index(fields=["cluster", "tiered_state"]),
            models.Index(fields=["cluster", "-remote_bytes"]),
            models.Index(fields=["cluster", "-local_bytes"]),
            # /metrics: the tiered topics storing the most remote bytes (console.metrics)
            models.Index(
                fields=["cluster", "-remote_log_size_bytes", "name"],
                name="topic_metrics_top_idx",
                condition=~models.Q(tiered_state=TieredState.NONE),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def has_remote_data(self) -> bool:
        return self.remote_bytes > 0 or self.remote_segments > 0

    @property
    def is_internal(self) -> bool:
        """Kafka's ``Topic.isInternal`` (``__consumer_offsets``, ``__transaction_state``,
        ``__share_group_state``): shown with an "internal" badge on the topic list and page."""
        return is_internal_topic(self.name)


class Partition(TierMetrics):
    """One partition: controller metadata (leader, ISR, KIP-112 offline replicas, KIP-253 maps)
    and the leader replica's offsets (KIP-950: remote Rx..Ry, local Lx..log end).

    ``topic_name`` is denormalised so the topology page pages through a 200,000-partition
    cluster on one index. ``previous_leader`` / ``leader_changed_at`` are recorded by the sync
    (Kafka keeps no history) so the incident panel can say where leadership went.
    ``marked_log_start_offset`` is the log start offset when the console first saw the partition
    marked for deletion, the origin of its drain progress (KIP-253 removes it once empty).
    """

    # Sync-owned (see the module docstring): no database constraint, and no index of their own (the
    # composite index and ``partition_unique`` lead with these columns).
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    topic = models.ForeignKey(
        Topic,
        on_delete=models.CASCADE,
        related_name="partitions",
        db_constraint=False,
        db_index=False,
    )
    topic_name = models.CharField(max_length=249)
    partition = models.IntegerField()
    leader = models.IntegerField(default=-1)
    previous_leader = models.IntegerField(null=True, blank=True)
    leader_changed_at = models.DateTimeField(null=True, blank=True)
    leader_epoch = models.IntegerField(default=0)
    partition_epoch = models.IntegerField(default=0)
    replicas = ArrayField(models.IntegerField(), default=list)
    isr = ArrayField(models.IntegerField(), default=list)
    offline_replicas = ArrayField(models.IntegerField(), default=list)
    #: KIP-966: replicas out of the ISR still eligible to lead (they left it while it was below
    #: min.insync.replicas), and the last known ones; a ``kafka`` cluster's DescribeTopicPartitions
    #: (``console.sync.extras``). Empty also where the cluster cannot say: the
    #: ``eligible_leader_replicas`` capability tells "none" from "not available".
    eligible_leader_replicas = ArrayField(models.IntegerField(), default=list, db_default=[])
    last_known_elr = ArrayField(models.IntegerField(), default=list, db_default=[])
    created = ArrayField(models.IntegerField(), default=list)
    leader_epoch_after_creation = models.JSONField(default=dict, blank=True)
    leader_epoch_before_deletion = models.JSONField(default=dict, blank=True)
    marked_for_deletion = models.BooleanField(default=False)
    marked_log_start_offset = models.BigIntegerField(null=True, blank=True)
    under_replicated = models.BooleanField(default=False)
    under_min_isr = models.BooleanField(default=False)
    offline = models.BooleanField(default=False, help_text="No leader (leader == -1).")
    has_offline_replicas = models.BooleanField(default=False)

    log_start_offset = models.BigIntegerField(default=0)
    local_log_start_offset = models.BigIntegerField(default=0)
    log_end_offset = models.BigIntegerField(default=0)
    high_watermark = models.BigIntegerField(default=0)
    remote_log_start_offset = models.BigIntegerField(default=-1)
    remote_log_end_offset = models.BigIntegerField(default=-1)
    remote_bytes = models.BigIntegerField(default=0)
    local_bytes = models.BigIntegerField(default=0)
    remote_segments = models.IntegerField(default=0)

    class Meta:
        ordering = ["topic_name", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "partition"], name="partition_unique")
        ]
        indexes = [
            models.Index(fields=["cluster", "topic_name", "partition"]),
            models.Index(
                fields=["cluster", "topic_name", "partition"],
                name="partition_problem_idx",
                condition=models.Q(has_offline_replicas=True)
                | models.Q(under_replicated=True)
                | models.Q(offline=True),
            ),
            # The sync's per-broker KIP-112 OfflineReplicaCount reads the partitions listing an
            # offline replica after every sync: through partition_problem_idx it filtered every
            # under-replicated partition too (118,736 of 1,000,000 under churn: 0.2-0.3 s of
            # every sync, an idle one's third, #17). Holds only those rows: ~free to keep.
            models.Index(
                fields=["cluster"],
                name="partition_offline_replicas_idx",
                condition=models.Q(has_offline_replicas=True),
            ),
            # The sync clears the ELR of partitions that no longer have one: only those rows.
            models.Index(
                fields=["cluster"],
                name="partition_elr_idx",
                condition=~models.Q(eligible_leader_replicas=[]) | ~models.Q(last_known_elr=[]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic_name}-{self.partition}"

    @property
    def drain_percent(self) -> float | None:
        """How far a partition marked for deletion has drained (KIP-253: removed once empty)."""
        if not self.marked_for_deletion:
            return None
        start = self.marked_log_start_offset
        if start is None:
            start = self.log_start_offset
        total = self.log_end_offset - start
        if total <= 0:
            return 100.0
        return max(0.0, min(100.0, 100.0 * (self.log_start_offset - start) / total))


class Replica(TierMetrics):
    """A replica as its broker's agent reports it: where it lives and how far it got."""

    # Sync-owned (see the module docstring): no database constraints. Keyed by (partition,
    # broker), with no surrogate id (migration 0020): ``partition`` and ``log_dir`` have no index
    # of their own (the primary key and the (log_dir, partition) index lead with them);
    # ``cluster`` and ``broker`` none at all: every page reaches replicas through a partition or
    # a log dir, and each index costs a first sync ~1 s per 1,000,000 replicas (the sync's scan
    # for replicas an agent stopped reporting reads the cluster's rows anyway).
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    partition = models.ForeignKey(
        Partition,
        on_delete=models.CASCADE,
        related_name="replica_set",
        db_constraint=False,
        db_index=False,
    )
    broker = models.ForeignKey(
        Broker,
        on_delete=models.CASCADE,
        related_name="replicas",
        db_constraint=False,
        db_index=False,
    )
    log_dir = models.ForeignKey(
        LogDir,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="replicas",
        db_constraint=False,
        db_index=False,
    )
    state = models.CharField(max_length=16)
    is_leader = models.BooleanField(default=False)
    leader_epoch = models.IntegerField(default=0)
    log_start_offset = models.BigIntegerField(default=0)
    local_log_start_offset = models.BigIntegerField(default=0)
    log_end_offset = models.BigIntegerField(default=0)
    high_watermark = models.BigIntegerField(default=0)
    size_bytes = models.BigIntegerField(default=0)
    tiered_epoch = models.IntegerField(default=0)
    copier_state = models.CharField(max_length=16, blank=True)
    expiration_state = models.CharField(max_length=16, blank=True)
    remote_log_start_offset = models.BigIntegerField(default=-1)
    remote_log_end_offset = models.BigIntegerField(default=-1)
    remote_bytes = models.BigIntegerField(default=0)
    remote_segments = models.IntegerField(default=0)
    version = models.BigIntegerField(default=0)
    pk = models.CompositePrimaryKey("partition", "broker")

    class Meta:
        indexes = [models.Index(fields=["log_dir", "partition"])]

    def __str__(self) -> str:
        return f"{self.partition_id}@{self.broker_id}"


class ReplicaMove(models.Model):
    """A replica being moved between two log dirs of its broker (AlterReplicaLogDirs, KIP-113),
    as the broker last reported it: the replica serves from ``log_dir`` while its future
    replica is copied on ``future_log_dir``. Rewritten for each broker every sync answered
    (``console.sync.extras``); keyed by names, not by the sync-owned rows' ids, so it never
    dangles when those are rebuilt."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    broker_id = models.IntegerField()
    topic_name = models.CharField(max_length=249)
    partition = models.IntegerField()
    log_dir = models.CharField(max_length=200, blank=True)
    future_log_dir = models.CharField(max_length=200)
    future_size_bytes = models.BigIntegerField()
    future_offset_lag = models.BigIntegerField()
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["topic_name", "partition", "broker_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "topic_name", "partition", "broker_id"],
                name="replica_move_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.topic_name}-{self.partition}@{self.broker_id}: {self.log_dir} -> {self.future_log_dir}"


class ConsumerGroup(models.Model):
    """A consumer group as the controller's coordinator last described it: one row per group
    (the groups API pages these; a fleet has 20,000 of them), merged by the sync with the
    positions below (:mod:`console.sync.groups`)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    group_id = models.CharField(max_length=249)
    generation = models.IntegerField(default=0)
    members = models.IntegerField(default=0)
    positions = models.IntegerField(default=0, help_text="Committed positions the group holds.")
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["group_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "group_id"], name="consumer_group_unique")
        ]

    def __str__(self) -> str:
        return self.group_id


class GroupOffset(models.Model):
    """A consumer group's committed position on one partition, as the controller's group
    coordinator holds it (KIP-253's gates read these positions). Merged by every sync
    (:mod:`console.sync.groups`; ``synced_at`` is the sync that last changed the row); a cluster
    whose controller has no coordinator has none. The group's generation and members are its
    :class:`ConsumerGroup` row's, not repeated per position.

    Sync-owned like partitions and replicas (see the module docstring): the cluster's foreign
    key has no database constraint - a first sync writes 539,020 positions, and the deferred
    check of each at COMMIT was 1.8 s of it (#17) - and no index of its own (both indexes lead
    with it). Keyed by (cluster, group, topic, partition), with no surrogate id, and UNLOGGED
    like partitions and replicas (migration 0022): a crash empties the three together and the
    next sync asks for everything again. Deleting a cluster through the ORM still deletes its
    positions."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    group_id = models.CharField(max_length=249)
    topic_name = models.CharField(max_length=249)
    partition = models.IntegerField()
    committed_offset = models.BigIntegerField()
    synced_at = models.DateTimeField()
    pk = models.CompositePrimaryKey("cluster", "group_id", "topic_name", "partition")

    class Meta:
        ordering = ["group_id", "topic_name", "partition"]
        indexes = [models.Index(fields=["cluster", "topic_name", "group_id"])]

    def __str__(self) -> str:
        return f"{self.group_id} {self.topic_name}-{self.partition}@{self.committed_offset}"
