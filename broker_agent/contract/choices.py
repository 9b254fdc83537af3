"""Choices as constant classes, named as the KIPs name them."""

from __future__ import annotations

__all__ = [
    "CleanupPolicy",
    "DisablePolicy",
    "ErrorCode",
    "EventType",
    "ExpirationMode",
    "LogDirState",
    "RemoteSegmentState",
    "ReplicaState",
    "TaskState",
    "TieredState",
    "TopicConfig",
]


class TieredState:
    """KIP-950 topic tiering states: ENABLED -> DISABLING -> DISABLED -> (re-enable) ENABLED.

    ``NONE`` is a topic that was never tiered (``remote.storage.enable`` never true).
    """

    NONE = "NONE"
    ENABLED = "ENABLED"
    DISABLING = "DISABLING"
    DISABLED = "DISABLED"
    ALL = (NONE, ENABLED, DISABLING, DISABLED)


class DisablePolicy:
    """KIP-950 ``remote.log.disable.policy``; default ``retain``."""

    RETAIN = "retain"
    DELETE = "delete"
    ALL = (RETAIN, DELETE)
    DEFAULT = RETAIN


class CleanupPolicy:
    DELETE = "delete"
    COMPACT = "compact"


class RemoteSegmentState:
    """KIP-405 RemoteLogSegmentState, as written in the remote store metadata records and in the
    inventory the Spark jobs read (``spark_tasks.schema``; this module ships in their zip)."""

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"
    ALL = (
        COPY_SEGMENT_STARTED,
        COPY_SEGMENT_FINISHED,
        DELETE_SEGMENT_STARTED,
        DELETE_SEGMENT_FINISHED,
    )
    # Allowed transitions (RemoteLogSegmentState.isValidTransition in Kafka).
    TRANSITIONS = {
        COPY_SEGMENT_STARTED: (COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED),
        COPY_SEGMENT_FINISHED: (DELETE_SEGMENT_STARTED,),
        DELETE_SEGMENT_STARTED: (DELETE_SEGMENT_FINISHED,),
        DELETE_SEGMENT_FINISHED: (),
    }


class LogDirState:
    """KIP-112 log directory health. DEGRADED: online but its probe is far slower than peers."""

    ONLINE = "ONLINE"
    DEGRADED = "DEGRADED"
    OFFLINE = "OFFLINE"
    GOOD = (ONLINE, DEGRADED)


class ReplicaState:
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    CREATING = "CREATING"


class TaskState:
    """State of the per-partition RemoteStorageCopier / RemoteDataExpiration tasks (KIP-950)."""

    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    EXTERNAL = "EXTERNAL"  # expiration delegated to the Spark retention job
    NOT_LEADER = "NOT_LEADER"


class ExpirationMode:
    """Who expires remote segments: the agent itself, or external Spark jobs."""

    INTERNAL = "internal"
    EXTERNAL = "external"
    ALL = (INTERNAL, EXTERNAL)


class EventType:
    """Events agents push to ``STRATA_EVENTS_WEBHOOK_URL`` (KIP-112 LogDirFailure and friends)."""

    LOG_DIR_FAILURE = "LogDirFailure"
    LOG_DIR_RECOVERED = "LogDirRecovered"
    BROKER_OFFLINE = "BrokerOffline"


class TopicConfig:
    """Topic config names the simulated controller understands, with their defaults."""

    REMOTE_STORAGE_ENABLE = "remote.storage.enable"
    REMOTE_LOG_DISABLE_POLICY = "remote.log.disable.policy"
    RETENTION_MS = "retention.ms"
    RETENTION_BYTES = "retention.bytes"
    LOCAL_RETENTION_MS = "local.retention.ms"
    LOCAL_RETENTION_BYTES = "local.retention.bytes"
    CLEANUP_POLICY = "cleanup.policy"
    ENABLE_ORDERED_DELIVERY = "enable.ordered.delivery"
    SEGMENT_BYTES = "segment.bytes"
    MIN_INSYNC_REPLICAS = "min.insync.replicas"
    # Kafka's replication quota on a topic's replicas ("*" or "partition:broker,..."), the
    # topic half of kafka-reassign-partitions --throttle; the rates are broker configs
    LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
    FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"

    DEFAULTS = {
        REMOTE_STORAGE_ENABLE: "false",
        REMOTE_LOG_DISABLE_POLICY: DisablePolicy.DEFAULT,
        RETENTION_MS: "604800000",
        RETENTION_BYTES: "-1",
        # -2: "use retention.*", as in Kafka.
        LOCAL_RETENTION_MS: "-2",
        LOCAL_RETENTION_BYTES: "-2",
        CLEANUP_POLICY: CleanupPolicy.DELETE,
        ENABLE_ORDERED_DELIVERY: "true",
        SEGMENT_BYTES: "1048576",
        MIN_INSYNC_REPLICAS: "1",
        LEADER_THROTTLED_REPLICAS: "",
        FOLLOWER_THROTTLED_REPLICAS: "",
    }
    ALL = tuple(DEFAULTS)


class ErrorCode:
    """API error codes. Kafka's names where Kafka has one (the KIP-950 spelling is fixed here)."""

    INVALID_REQUEST = "INVALID_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    NOT_FOUND = "NOT_FOUND"
    UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
    TOPIC_ALREADY_EXISTS = "TOPIC_ALREADY_EXISTS"
    INVALID_TOPIC_EXCEPTION = "INVALID_TOPIC_EXCEPTION"  # Kafka's name for an illegal topic name
    INVALID_REPLICATION_FACTOR = "INVALID_REPLICATION_FACTOR"
    INVALID_PARTITIONS = "INVALID_PARTITIONS"
    INVALID_CONFIG = "INVALID_CONFIG"
    NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
    NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    KAFKA_STORAGE_ERROR = "KAFKA_STORAGE_ERROR"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    OUT_OF_ORDER_SEQUENCE_NUMBER = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    INVALID_PARTITION_METADATA = "INVALID_PARTITION_METADATA"  # KIP-253
    # KIP-950 writes TIERED_STORAGET_DISABLEMENT_IN_PROGRESS (sic); we use the corrected spelling.
    TIERED_STORAGE_DISABLEMENT_IN_PROGRESS = "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS"
    TIERED_STORAGE_DISABLEMENT_INCOMPLETE = "TIERED_STORAGE_DISABLEMENT_INCOMPLETE"
    STALE_TIERED_EPOCH = "STALE_TIERED_EPOCH"
    # A tiered epoch newer than the controller's: never applied (Kafka's UNKNOWN_LEADER_EPOCH
    # is the same fence for leader epochs).
    UNKNOWN_TIERED_EPOCH = "UNKNOWN_TIERED_EPOCH"
    REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC = (
        "REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC"
    )
    PARTITIONS_MARKED_FOR_DELETION = "PARTITIONS_MARKED_FOR_DELETION"
    # Group coordinator (Kafka's names).
    INVALID_GROUP_ID = "INVALID_GROUP_ID"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
    INVALID_STATE_TRANSITION = "INVALID_STATE_TRANSITION"
    INSUFFICIENT_SPACE = "INSUFFICIENT_SPACE"
    LOG_DIR_NOT_OFFLINE = "LOG_DIR_NOT_OFFLINE"
    LAST_LOG_DIR = "LAST_LOG_DIR"
    BROKER_NOT_AVAILABLE = "BROKER_NOT_AVAILABLE"
    REMOTE_SEGMENT_UNREADABLE = "REMOTE_SEGMENT_UNREADABLE"
    INVALID_REPLICA_ASSIGNMENT = "INVALID_REPLICA_ASSIGNMENT"
    NO_REASSIGNMENT_IN_PROGRESS = "NO_REASSIGNMENT_IN_PROGRESS"
    LOG_DIR_NOT_FOUND = "LOG_DIR_NOT_FOUND"
    REPLICA_NOT_AVAILABLE = "REPLICA_NOT_AVAILABLE"
    # Leader elections (Kafka's ElectLeaders answers).
    ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"
    PREFERRED_LEADER_NOT_AVAILABLE = "PREFERRED_LEADER_NOT_AVAILABLE"
    ELIGIBLE_LEADERS_NOT_AVAILABLE = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    # Codes after which a client should refresh metadata and retry.
    RETRIABLE = (
        NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH,
        NOT_ENOUGH_REPLICAS,
        REQUEST_TIMED_OUT,
        KAFKA_STORAGE_ERROR,
        INVALID_PARTITION_METADATA,
        BROKER_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION,
    )
