"""Console models, one module per concern: access (tokens, heartbeat), clusters (registration,
sync runs, agent events), disks (brokers, log dirs; KIP-112) and topology (topics with their
KIP-950 tiering state, partitions and replicas; KIP-253)."""

from console.models.access import ApiToken, Heartbeat
from console.models.clusters import AgentEvent, Cluster, SyncRun
from console.models.disks import Broker, LogDir
from console.models.topology import Partition, Replica, Topic

__all__ = [
    "AgentEvent",
    "ApiToken",
    "Broker",
    "Cluster",
    "Heartbeat",
    "LogDir",
    "Partition",
    "Replica",
    "SyncRun",
    "Topic",
]
