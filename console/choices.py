"""Choices the console stores and shows, as classes of constants.

The Kafka-side vocabularies (tiered state, disable policy, log dir and replica state, the copier /
expiration task states) are the agent's own (:mod:`broker_agent.contract.choices`) and re-exported here so
console code imports its choices from one place; the console adds only what it derives itself.
"""

from __future__ import annotations

from broker_agent.contract.choices import (
    DisablePolicy,
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)

__all__ = [
    "BrokerState",
    "ClusterBackend",
    "DisablePolicy",
    "KafkaSecurityProtocol",
    "LogDirState",
    "ReplicaCell",
    "ReplicaState",
    "SaslMechanism",
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


class KafkaSecurityProtocol:
    """Kafka's ``security.protocol`` values (``org.apache.kafka.common.security.auth.
    SecurityProtocol``): what a ``kafka`` cluster's client speaks to its bootstrap servers."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"
    ALL = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
    SASL = (SASL_PLAINTEXT, SASL_SSL)
    TLS = (SSL, SASL_SSL)


class SaslMechanism:
    """The ``sasl.mechanism`` values Strata's Kafka client (kafka-python) authenticates with by
    user and password (KIP-43 PLAIN, KIP-84 SCRAM); GSSAPI and OAUTHBEARER need no password and
    are not offered."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    ALL = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


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
