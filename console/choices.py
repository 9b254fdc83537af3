"""Choices the console stores and shows, as classes of constants.

The Kafka-side vocabularies (tiered state, disable policy, log dir and replica state, the copier /
expiration task states) are the agent's own (:mod:`broker_agent.choices`) and re-exported here so
console code imports its choices from one place; the console adds only what it derives itself.
"""

from __future__ import annotations

from broker_agent.choices import (
    DisablePolicy,
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)

__all__ = [
    "BrokerState",
    "DisablePolicy",
    "LogDirState",
    "ReplicaCell",
    "ReplicaState",
    "SyncTrigger",
    "TaskState",
    "TieredState",
    "TopicConfig",
    "choices",
]


def choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """Django ``choices`` from a constant tuple, labelled as Kafka spells them."""
    return [(v, v) for v in values]


class BrokerState:
    """What the console shows for a broker (our decision; KIP-112 defines only the counts).

    OFFLINE: the controller fenced it (no heartbeat within the session timeout) or every one of
    its log dirs is offline (KIP-112: a broker whose dirs are all bad shuts down). DEGRADED: alive
    with at least one offline or degraded log dir. ONLINE otherwise. UNKNOWN until first synced.
    """

    ONLINE = "ONLINE"
    DEGRADED = "DEGRADED"
    OFFLINE = "OFFLINE"
    UNKNOWN = "UNKNOWN"
    ALL = (ONLINE, DEGRADED, OFFLINE, UNKNOWN)


class ClusterBackend:
    """How Strata talks to a cluster (issue #35): its controller and broker agents over their
    HTTP API (the simulated cluster, or any agent with the same API), or Kafka's own protocol
    through its bootstrap servers (kafka-python)."""

    AGENTS = "agents"
    KAFKA = "kafka"
    ALL = (AGENTS, KAFKA)


class SyncTrigger:
    """Why a sync ran."""

    BEAT = "beat"
    WEBHOOK = "webhook"
    COMMAND = "command"
    MANUAL = "manual"
    ALL = (BEAT, WEBHOOK, COMMAND, MANUAL)


class ReplicaCell:
    """A cell of the partitions x brokers topology matrix (our rendering of KIP-112 / ISR state).

    Precedence: OFFLINE (KIP-112 offline replica) > LEADER > IN_SYNC follower > OUT_OF_SYNC
    follower. ``NONE``: the broker holds no replica of the partition.
    """

    LEADER = "leader"
    IN_SYNC = "in-sync"
    OUT_OF_SYNC = "out-of-sync"
    OFFLINE = "offline"
    NONE = ""
