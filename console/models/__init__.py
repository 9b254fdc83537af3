"""Console models, one module per concern: heartbeat (beat and workers), clusters (registration,
sync runs, agent events), disks (brokers, log dirs; KIP-112), history (samples for trends) and topology (topics with their
KIP-950 tiering state, partitions and replicas; KIP-253, with consumer groups' positions)."""

from console.models.clusters import AgentEvent, Cluster, SyncRun
from console.models.disks import Broker, LogDir
from console.models.heartbeat import Heartbeat, ObjectStoreProbe
from console.models.history import LogDirSample, TopicSample
from console.models.topology import (
    ConsumerGroup,
    GroupOffset,
    Partition,
    Replica,
    ReplicaMove,
    Topic,
)

__all__ = [
    "AgentEvent",
    "Broker",
    "Cluster",
    "ConsumerGroup",
    "GroupOffset",
    "Heartbeat",
    "LogDir",
    "LogDirSample",
    "ObjectStoreProbe",
    "Partition",
    "Replica",
    "ReplicaMove",
    "SyncRun",
    "Topic",
    "TopicSample",
]
