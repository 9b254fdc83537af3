"""Pydantic models of the agent and controller APIs, shared with the console.

Names follow Kafka: ``tiered_epoch``, ``log_start_offset``, ``local_log_start_offset``,
``leader_epoch``, ``isr``, ``offline_replicas``, ``undeleted_partition_count`` ...
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CLUSTER_METADATA_TOPIC",
    "GROUP_TSV_COLUMNS",
    "INTERNAL_TOPICS",
    "SNAPSHOT_TSV_COLUMNS",
    "SNAPSHOT_TSV_MEDIA_TYPE",
    "TOPIC_NAME_MAX_LENGTH",
    "TOPIC_NAME_PATTERN",
    "AlterConfigsRequest",
    "AlterIsrRequest",
    "AlterPartitionCountRequest",
    "BrokerHeartbeat",
    "BrokerInfo",
    "BrokerSnapshot",
    "ClusterMetadata",
    "CommandResult",
    "CreateTopicRequest",
    "FetchResponse",
    "FetchedRecord",
    "LeaderEpochEntry",
    "LogDirEvent",
    "LogDirInfo",
    "LogDirRemovalPlan",
    "LogDirRemovalReplica",
    "LogDirRemovalTarget",
    "LogStartOffsetRequest",
    "PartitionForKeyResponse",
    "PartitionMetadata",
    "PartitionStateRow",
    "ProduceRecord",
    "ProduceRequest",
    "ProduceResponse",
    "RecreateStatus",
    "RemoteSegmentRow",
    "RemoteTopicCommand",
    "ReplicaDirMove",
    "ReplicaInfo",
    "SegmentStateRequest",
    "TieringCommandRequest",
    "TopicMetadata",
    "WebhookEvent",
    "colliding_topic",
    "group_changes_tsv",
    "group_tsv_head",
    "is_internal_topic",
    "partition_key",
    "partition_keys",
    "snapshot_tsv",
    "split_group_tsv",
    "split_partition_key",
    "split_snapshot_tsv",
    "tsv_value",
    "validate_topic_name",
]

Int32 = Field(ge=-(2**31), le=2**31 - 1)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- controller ------------------------------------------------------------------------------


class LeaderEpochEntry(_Model):
    epoch: int
    start_offset: int


class PartitionMetadata(_Model):
    partition: int
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: list[int]
    offline_replicas: list[int] = []
    created: list[int] = []
    """KIP-112: brokers that have successfully created this replica."""
    leader_epoch_after_creation: dict[str, int] = {}
    """KIP-253 leaderEpochAfterCreation: partition (as string) -> leader epoch."""
    leader_epoch_before_deletion: dict[str, int] = {}
    """KIP-253 leaderEpochBeforeDeletion; non-empty iff the partition is marked for deletion."""
    marked_for_deletion: bool = False
    adding_replicas: list[int] = []
    """KIP-455: replicas a reassignment under way is adding (they are in ``replicas``)."""
    removing_replicas: list[int] = []
    """KIP-455: replicas a reassignment under way will remove once the target is in sync."""


class TopicMetadata(_Model):
    name: str
    topic_id: str
    configs: dict[str, str]
    tiered_state: str
    tiered_epoch: int
    disable_policy: str | None = None
    tiering_acks: list[int] = []
    """Brokers that acknowledged DisableRemoteTopic for the current tiered epoch."""
    initial_partition_count: int
    undeleted_partition_count: int
    partitions: list[PartitionMetadata]


class BrokerInfo(_Model):
    broker_id: int
    url: str
    alive: bool
    kafka_listener: str | None = None
    """``host:port`` of the broker's Kafka-protocol listener (``broker_agent.kafka_wire``), or
    ``None`` when it has none (an agent started without ``--kafka-port``)."""
    log_dirs: list[LogDirInfo] = []
    offline_log_directory_count: int = 0
    offline_replica_count: int = 0
    last_heartbeat_ms: int = 0


class ClusterMetadata(_Model):
    cluster_id: str
    version: int
    brokers: list[BrokerInfo]
    topics: list[TopicMetadata]
    changed: bool = True
    full: bool = True
    """True: ``topics`` is every topic with every partition (a topic missing was deleted).
    False (only when asked with ``delta=true``, only the synthetic cluster so far): a delta since
    ``since``: ``topics`` holds topics with changed partitions, each with its topic-level fields
    and only the changed partitions; other topics and partitions are unchanged."""
    since: int | None = None
    removed_topics: list[str] = []
    """Delta answers: topics deleted since ``since``."""
    removed_partitions: list[str] = []
    """Delta answers: ``topic:partition`` removed since ``since`` (KIP-253 drained partitions)."""


TOPIC_NAME_MAX_LENGTH = 249
"""Kafka's ``Topic.MAX_NAME_LENGTH``."""
TOPIC_NAME_PATTERN = r"[a-zA-Z0-9._-]+"
"""Kafka's legal topic characters (``Topic.validate``): ASCII letters, digits, ``.``, ``_``, ``-``."""


def validate_topic_name(name: str) -> str:
    """Kafka's rule for a topic name (``org.apache.kafka.common.internals.Topic.validate``):
    1 to 249 characters of ``[a-zA-Z0-9._-]``, and neither ``.`` nor ``..``.

    Returns the name, or raises ``ValueError`` saying which part of the rule it breaks. A legal
    name can still be refused by the controller: see :func:`colliding_topic` and
    :data:`CLUSTER_METADATA_TOPIC`."""
    if not name:
        raise ValueError("a topic name cannot be empty")
    if name in (".", ".."):
        raise ValueError(f"a topic name cannot be {name!r}")
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        raise ValueError(
            f"a topic name can be at most {TOPIC_NAME_MAX_LENGTH} characters, not {len(name)}"
        )
    if not re.fullmatch(TOPIC_NAME_PATTERN, name):
        raise ValueError(
            f"topic name {name!r} is illegal: it may hold only ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return name


CLUSTER_METADATA_TOPIC = "__cluster_metadata"
"""Kafka's ``Topic.CLUSTER_METADATA_TOPIC_NAME``: the KRaft metadata log, not a topic anyone may
create (``ControllerApis.createTopics``: INVALID_REQUEST "Creation of internal topic
__cluster_metadata is prohibited.")."""

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's ``Topic.INTERNAL_TOPICS``: the group coordinator's offsets, the transaction
coordinator's state and (KIP-932) the share coordinator's state. Metadata marks them
``isInternal``; the console shows them as internal."""


def is_internal_topic(name: str) -> bool:
    """Kafka's ``Topic.isInternal``: one of :data:`INTERNAL_TOPICS`, by exact name (a topic merely
    starting with ``__`` is an ordinary topic)."""
    return name in INTERNAL_TOPICS


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """The existing topic ``name`` collides with, or ``None`` (Kafka's ``Topic.hasCollision``).

    Metric names cannot tell ``.`` from ``_``, so Kafka's controller refuses a new topic whose
    name equals an existing one once every ``.`` is read as ``_`` (``unifyCollisionChars``):
    ``ReplicationControlManager.validateNewTopicNames`` answers INVALID_TOPIC_EXCEPTION "Topic
    'a.b' collides with existing topic: a_b". The same name is not a collision (that is
    TOPIC_ALREADY_EXISTS), and a name without ``.`` or ``_`` cannot collide."""
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == unified:
            return other
    return None


def partition_key(topic: str, partition: int) -> str:
    """A partition's key on the wire and in maps: ``topic:partition`` (``demo.orders:3``), as the
    agents' heartbeats, snapshots and metadata deltas name partitions. Unambiguous because a
    topic name cannot hold ``:`` (:data:`TOPIC_NAME_PATTERN`)."""
    return f"{topic}:{partition}"


def partition_keys(keys: Iterable[str]) -> Iterator[tuple[str, str, int]]:
    """``(key, topic, partition)`` of each :func:`partition_key` in ``keys`` that is one; a key
    from a request that is not (no number after the colon) names no partition and is skipped."""
    for key in keys:
        try:
            topic, partition = split_partition_key(key)
        except ValueError:
            continue
        yield key, topic, partition


def split_partition_key(key: str) -> tuple[str, int]:
    """The ``(topic, partition)`` of a :func:`partition_key`; ``ValueError`` for a key whose
    partition is not a number (a caller reading keys from a request skips or refuses it)."""
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


class CreateTopicRequest(_Model):
    name: str
    """Checked by the controller with :func:`validate_topic_name` and :func:`colliding_topic`
    (INVALID_TOPIC_EXCEPTION); :data:`CLUSTER_METADATA_TOPIC` is INVALID_REQUEST."""
    partitions: int = Field(ge=1, le=100_000)
    replication_factor: int = Field(ge=1, le=1000)
    configs: dict[str, str] = {}


class AlterConfigsRequest(_Model):
    """AlterConfigs (incremental): a ``None`` value deletes the override.

    ``remote.storage.enable=false`` starts KIP-950 disablement with ``remote.log.disable.policy``
    (default retain); ``true`` enables or re-enables tiering.
    """

    configs: dict[str, str | None]
    expected_tiered_epoch: int | None = None
    drive_brokers: bool = False
    """Kafka 3.9's semantics (the Kafka listener's requests): the controller sends the brokers
    the KIP-950 commands a tiering change needs itself (DisableRemoteTopic then DISABLED, or
    EnableRemoteTopic), as Kafka's brokers act on the config change alone."""


class TieringCommandRequest(_Model):
    """Start / complete disablement or re-enable, with an optional expected-epoch check."""

    policy: str | None = None
    expected_tiered_epoch: int | None = None


class AlterPartitionCountRequest(_Model):
    undeleted_partition_count: int = Field(ge=1, le=100_000)
    increase_only: bool = False
    """Kafka's CreatePartitions: a count that does not grow is INVALID_PARTITIONS (this API
    also shrinks, KIP-253, and takes the current count as done)."""
    validate_only: bool = False
    """Every check, nothing changed (CreatePartitions' ``validate_only``)."""


class JoinGroupRequest(_Model):
    member_id: str | None = Field(None, max_length=64)
    """None for a new member; a member that was removed gets a new id."""
    topics: list[Annotated[str, Field(max_length=249)]] = Field(min_length=1, max_length=1000)


class GroupMemberRequest(_Model):
    member_id: str = Field(max_length=64)


class CommitOffsetsRequest(_Model):
    member_id: str = Field(max_length=64)
    generation: int = Field(ge=0, le=2**31)
    offsets: dict[Annotated[str, Field(max_length=249)], dict[int, Annotated[int, Field(ge=0)]]]
    """topic -> partition -> the next offset to consume (Kafka's committed offset)."""


class GroupAssignment(_Model):
    group_id: str
    member_id: str
    generation: int
    assignment: dict[str, list[int]]
    members: list[str]


class GroupMemberView(_Model):
    member_id: str
    topics: list[str]
    assignment: dict[str, list[int]]


class GroupView(_Model):
    group_id: str
    generation: int
    members: list[GroupMemberView]
    offsets: dict[str, dict[int, int]]
    """topic -> partition -> committed offset: the group's positions (KIP-253 gates read them)."""


class AlterIsrRequest(_Model):
    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


class LogDirEvent(_Model):
    broker_id: int
    event: Literal["LogDirFailure", "LogDirRecovered"]
    log_dir: str
    error: str | None = None


class BrokerHeartbeat(_Model):
    broker_id: int
    url: str
    kafka_listener: str | None = None
    """``host:port`` of the broker's Kafka listener, registered as a KRaft broker registers its
    listeners: every broker learns the others' endpoints from the metadata."""
    online: bool = True
    log_dirs: list[LogDirInfo] = []
    offline_replicas: list[str] = []
    """``topic:partition`` of replicas this broker should host but cannot serve."""
    created: list[str] = []
    """``topic:partition`` replicas created since the controller last listed them in created."""
    empty_marked_partitions: list[str] = []
    """Led partitions marked for deletion whose log start offset == log end offset."""


class PartitionForKeyResponse(_Model):
    topic: str
    key: str
    partition: int
    hash: int
    initial_partition_count: int
    undeleted_partition_count: int


# -- agent -----------------------------------------------------------------------------------


class LogDirInfo(_Model):
    name: str
    path: str
    state: str
    total_bytes: int = 0
    usable_bytes: int = 0
    probe_latency_ms: float | None = None
    error: str | None = None
    replica_count: int = 0
    offline_replica_count: int = 0
    cordoned: bool = False
    """KIP-1066 ``cordoned.log.dirs``: no new replica is placed here; its replicas serve on."""
    removal_pending: bool = False
    """Removed from the broker's configuration; the dir leaves at the broker's next start."""


class ReplicaInfo(_Model):
    topic: str
    topic_id: str
    partition: int
    log_dir: str | None
    state: str
    is_leader: bool
    leader: int
    leader_epoch: int
    isr: list[int]
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    tiered_state: str
    tiered_epoch: int
    copier_state: str
    expiration_state: str
    remote_log_start_offset: int = -1
    remote_log_end_offset: int = -1
    remote_bytes: int = 0
    remote_segments: int = 0
    # KIP-963, on the leader of a tiered partition (0 elsewhere); see Tiering.tier_metrics.
    remote_copy_lag_bytes: int = 0
    remote_copy_lag_segments: int = 0
    remote_delete_lag_bytes: int = 0
    remote_delete_lag_segments: int = 0
    fenced_remote_bytes: int = 0
    fenced_remote_segments: int = 0
    remote_log_size_bytes: int = 0
    marked_for_deletion: bool = False
    version: int = 0


class ReplicaDirMove(_Model):
    """A replica being moved between two log dirs of its broker (AlterReplicaLogDirs,
    KIP-113): the current replica serves from ``log_dir`` while its *future replica* is copied
    on ``future_log_dir``, then swapped in. Kafka's DescribeLogDirs lists the future replica
    (``is_future_key``) with its size and its offset lag behind the current one."""

    topic: str
    partition: int
    log_dir: str | None
    """The dir the replica serves from until the swap (None: not known)."""
    future_log_dir: str
    future_size_bytes: int
    future_offset_lag: int


class BrokerSnapshot(_Model):
    broker_id: int
    version: int
    since: int | None = None
    full: bool
    state: str
    expiration_mode: str
    log_dirs: list[LogDirInfo]
    replicas: list[ReplicaInfo]
    removed: list[str] = []
    """``topic:partition`` keys removed since ``since`` (incremental snapshots only)."""
    offline_log_directory_count: int
    offline_replica_count: int
    generated_at_ms: int
    remote_store_unreachable_since_ms: int | None = None
    """When this broker's calls to the remote object store began failing (None: reachable)."""
    remote_store_error: str | None = None
    dir_moves: list[ReplicaDirMove] = []
    """Every replica being moved between this broker's dirs now (always all of them, in an
    incremental snapshot too: there are few)."""


class RemoteTopicCommand(_Model):
    """DisableRemoteTopic / EnableRemoteTopic (KIP-950 controller -> broker)."""

    topic: str
    topic_id: str
    tiered_epoch: int = Field(ge=0, le=2**31 - 1)
    policy: str | None = None
    idempotency_key: str = Field(min_length=1, max_length=200)


class CommandResult(_Model):
    topic: str
    tiered_epoch: int
    applied: bool
    """False when this idempotency key was applied before (the repeat changed nothing)."""
    tiered_state: str
    partitions: list[int] = []


class ProduceRecord(_Model):
    key: str | None = None
    value: str
    timestamp_ms: int | None = Field(default=None, ge=0, le=2**62)


class ProduceRequest(_Model):
    topic: str
    partition: int = Field(ge=0, le=2**31 - 1)
    records: list[ProduceRecord] = Field(min_length=1, max_length=100_000)
    acks: Literal[-1, 1, 0] = -1
    producer_id: int = Field(default=-1, ge=-1, le=2**62)
    base_sequence: int = Field(default=-1, ge=-1, le=2**31 - 1)
    undeleted_partition_count: int | None = Field(default=None, ge=0, le=2**31 - 1)
    timeout_ms: int = Field(default=15_000, ge=1, le=120_000)


class ProduceResponse(_Model):
    topic: str
    partition: int
    base_offset: int
    log_end_offset: int
    high_watermark: int
    duplicate: bool = False


class FetchedRecord(_Model):
    offset: int
    timestamp_ms: int
    key: str | None
    value: str


class FetchResponse(_Model):
    topic: str
    partition: int
    records: list[FetchedRecord]
    next_offset: int
    high_watermark: int
    log_end_offset: int = -1
    """The leader's log end offset (KIP-253 consumers: a partition marked for deletion is drained
    once a group's position reaches it)."""
    log_start_offset: int
    local_log_start_offset: int
    remote_records: int = 0
    """How many of ``records`` were read from the remote store."""


class LogStartOffsetRequest(_Model):
    log_start_offset: int = Field(ge=0, le=2**62)


class SegmentStateRequest(_Model):
    state: Literal["DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"]


class RemoteSegmentRow(_Model):
    """One row of the remote-segment inventory (DESIGN.md, Spark job contract)."""

    cluster: str
    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_bytes: int
    segment_leader_epochs: list[LeaderEpochEntry]
    tiered_epoch: int
    state: str
    object_path: str
    event_timestamp_ms: int


class PartitionStateRow(_Model):
    """One row of the partition state input of the Spark jobs (DESIGN.md)."""

    cluster: str
    topic: str
    topic_id: str
    partition: int
    retention_ms: int
    retention_bytes: int
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    local_untiered_bytes: int
    leader_epochs: list[LeaderEpochEntry]
    tiered_state: str
    tiered_epoch: int
    disable_policy: str | None
    purge_below_tiered_epoch: int


class RecreateStatus(_Model):
    """Progress of replicas re-created after LogDirReset."""

    total: int
    in_sync: int
    replicas: list[dict[str, Any]]


class LogDirRemovalReplica(_Model):
    """A replica that must be re-created on a good dir when its bad dir is removed."""

    topic: str
    partition: int
    size_bytes: int
    size_source: Literal["leader", "local", "last_known", "unknown"]
    """``leader``: the current leader's local size (what catching up will write); ``local``:
    its own size (a cordoned dir's replica that still serves); ``last_known``: this replica's size before its dir failed; ``unknown``: neither (0)."""
    target_dir: str | None
    """The good dir it will be re-created on; ``None`` if no good dir has room."""


class LogDirRemovalTarget(_Model):
    name: str
    state: str
    usable_bytes: int
    needed_bytes: int
    """Bytes of the replicas this plan puts on this dir."""
    fits: bool


class LogDirRemovalPlan(_Model):
    """KIP-112 recovery, option 2: remove a bad log dir from the broker's configuration.

    ``removable`` is false with ``error`` ``INSUFFICIENT_SPACE`` when the good dirs lack usable
    space for the replicas that must move there, ``LOG_DIR_NOT_OFFLINE`` for a dir that is not
    OFFLINE, ``LAST_LOG_DIR`` for a broker's only dir."""

    broker_id: int
    log_dir: str
    state: str
    removable: bool
    removed: bool = False
    """True once the dir was removed (``POST .../remove`` without ``dry_run``)."""
    error: str | None = None
    message: str = ""
    needed_bytes: int
    available_bytes: int
    replicas: list[LogDirRemovalReplica]
    good_dirs: list[LogDirRemovalTarget]


class WebhookEvent(_Model):
    event_id: str
    event: Literal["LogDirFailure", "LogDirRecovered", "BrokerOffline"]
    cluster: str
    broker_id: int
    log_dir: str | None = None
    error: str | None = None
    offline_replicas: list[str] = []
    timestamp_ms: int


BrokerInfo.model_rebuild()


# -- the snapshot as rows: ``GET /v1/snapshot?format=tsv`` ----------------------------------------
#
# A 200,000-partition cluster's 60 snapshots are 600,000 replicas: ~250 MB of JSON, whose parsing
# was half of the console's full sync. The same snapshot as rows is a third of the bytes and goes
# into PostgreSQL with ``COPY`` (measured: 10,000 replicas in 17 ms against 200 ms as jsonb).
# JSON stays the default answer; ``format=tsv`` is an addition.

SNAPSHOT_TSV_MEDIA_TYPE = "text/tab-separated-values"

#: KIP-963's tiered metrics of a replica (ReplicaInfo; see Tiering.tier_metrics), in row order.
TIER_METRIC_FIELDS = (
    "remote_copy_lag_bytes",
    "remote_copy_lag_segments",
    "remote_delete_lag_bytes",
    "remote_delete_lag_segments",
    "fenced_remote_bytes",
    "fenced_remote_segments",
    "remote_log_size_bytes",
)

#: The row layout of ``format=tsv`` (line 1 repeats it as ``replica_columns``).
SNAPSHOT_TSV_COLUMNS = (
    "broker_id",
    "topic",
    "partition",
    "log_dir",
    "state",
    "is_leader",
    "leader_epoch",
    "log_start_offset",
    "local_log_start_offset",
    "log_end_offset",
    "high_watermark",
    "size_bytes",
    "tiered_epoch",
    "copier_state",
    "expiration_state",
    "remote_log_start_offset",
    "remote_log_end_offset",
    "remote_bytes",
    "remote_segments",
    *TIER_METRIC_FIELDS,
    "version",
)

_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_value(value: object) -> str:
    """One value in PostgreSQL's COPY text format: ``\\N`` for None, ``t`` / ``f``, lists as
    array literals (``{1,2}``), dicts as JSON, anything else as text; backslash, tab, newline
    and carriage return escaped."""
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, list):
        return "{" + ",".join(map(str, value)) + "}"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":")).translate(_TSV_ESCAPES)
    return str(value).translate(_TSV_ESCAPES)


def snapshot_tsv(snap: BrokerSnapshot) -> bytes:
    """``snap`` as ``format=tsv``: line 1 is the snapshot without ``replicas`` as one line of
    JSON, plus ``replica_columns`` (:data:`SNAPSHOT_TSV_COLUMNS`); then one line per replica in
    PostgreSQL's COPY text format (tab-separated, ``\\N`` for null, ``t`` / ``f``, backslash,
    tab, newline and carriage return escaped with a backslash)."""
    head = snap.model_dump(mode="json", exclude={"replicas"})
    head["replica_columns"] = list(SNAPSHOT_TSV_COLUMNS)
    lines = [json.dumps(head, separators=(",", ":"))]
    broker = str(snap.broker_id)
    for r in snap.replicas:
        row = r.model_dump()
        lines.append("\t".join([broker, *(tsv_value(row[c]) for c in SNAPSHOT_TSV_COLUMNS[1:])]))
    return ("\n".join(lines) + "\n").encode()


def split_snapshot_tsv(body: bytes) -> tuple[BrokerSnapshot, memoryview] | None:
    """A ``format=tsv`` answer as (the snapshot without its replicas, the replica rows as they
    came); ``None`` when ``body`` is a JSON snapshot instead (an agent that predates the format
    ignores the parameter). Raises ``ValueError`` for an envelope that is not one."""
    end = body.find(b"\n")
    if end < 0 or not body.startswith(b"{"):
        return None
    try:
        head = json.loads(body[:end])
    except ValueError:  # JSON spread over lines: not this format
        return None
    if not isinstance(head, dict) or "replica_columns" not in head:
        return None
    columns = tuple(head.pop("replica_columns"))
    if columns != SNAPSHOT_TSV_COLUMNS:
        raise ValueError(f"unexpected replica columns {list(columns)}")
    return BrokerSnapshot.model_validate({**head, "replicas": []}), memoryview(body)[end + 1 :]


# -- consumer groups as rows (``GET /v1/groups?format=tsv[&since=V]``) -------------------------
#
# A fleet's 20,000 groups hold ~500,000 committed positions (#17). As JSON the coordinator's whole
# answer every sync cost more than the rest of a 1% sync; as rows, and only for the groups that
# changed since the version the console last applied, it is what a commit changed.

#: The row layout of the groups' ``format=tsv`` answer: one committed position per line.
GROUP_TSV_COLUMNS = (
    "group_id",
    "topic",
    "partition",
    "committed_offset",
    "generation",
    "members",
)


def group_changes_tsv(
    version: int,
    full: bool,
    groups: Iterable[tuple[str, int, int]],
    rows: Iterable[tuple[Any, ...]],
) -> bytes:
    """The coordinator's answer in ``format=tsv``. Line 1 is one line of JSON: ``version`` (ask
    ``since`` it next time), ``full`` (true: these are all the groups, any other is gone; false:
    only these groups changed, each listed whole), ``groups`` (``[group_id, generation,
    members]`` of every group in the answer, with or without positions) and
    ``position_columns`` (:data:`GROUP_TSV_COLUMNS`). Then one line per committed position in
    PostgreSQL's COPY text format, as :func:`snapshot_tsv`'s rows."""
    lines = [group_tsv_head(version, full, groups)]
    lines.extend("\t".join(tsv_value(v) for v in row) for row in rows)
    return ("\n".join(lines) + "\n").encode()


def group_tsv_head(version: int, full: bool, groups: Iterable[tuple[str, int, int]]) -> str:
    """Line 1 of :func:`group_changes_tsv`, without its newline (for a coordinator that writes
    its rows itself)."""
    head = {
        "version": version,
        "full": full,
        "groups": [list(g) for g in groups],
        "position_columns": list(GROUP_TSV_COLUMNS),
    }
    return json.dumps(head, separators=(",", ":"))


def split_group_tsv(body: bytes) -> tuple[dict[str, Any], memoryview] | None:
    """A groups ``format=tsv`` answer as (its head, the position rows as they came); ``None``
    when ``body`` is the JSON list instead (a controller that predates the format). Raises
    ``ValueError`` for an envelope that is not one."""
    end = body.find(b"\n")
    if end < 0 or not body.startswith(b"{"):
        return None
    head = json.loads(body[:end])
    if not isinstance(head, dict) or "position_columns" not in head:
        raise ValueError("not a groups answer")
    if tuple(head.pop("position_columns")) != GROUP_TSV_COLUMNS:
        raise ValueError("unexpected position columns")
    return head, memoryview(body)[end + 1 :]
