"""What a cluster can do, and why not when it cannot: one place for pages, forms and the API.

An ``agents`` cluster (the simulated cluster, agents implementing the KIP-950 draft) supports
everything Strata does but KIP-966's ELR, which the agents' API does not carry. A ``kafka`` cluster supports what Kafka as shipped supports: some of it
is fixed by what Kafka released (no tiered epoch, no KIP-253, no LogDirReset, no JMX over the
protocol, no restart call), the rest the sync learns (``Cluster.backend_features``: each API's
version range from ApiVersions, broker configs such as KIP-1066's ``cordoned.log.dirs``) and is
"not known until the first sync" before it ran. Reasons are written for an SRE.
"""

from __future__ import annotations

import dataclasses

from console.choices import ClusterBackend
from console.models import Cluster

__all__ = [
    "CORDON",
    "ELIGIBLE_LEADER_REPLICAS",
    "KAFKA_KINDS",
    "KEYS",
    "KIP963_GAUGES",
    "LEADER_ELECTION",
    "LINEAR_HASHING",
    "LOG_DIRS",
    "LOG_DIR_RESET",
    "PARTITION_EXPANSION",
    "PROBE_LATENCY",
    "RESTART_CONTROL",
    "TIERED_EPOCH",
    "TIERED_OFFSETS",
    "Capability",
    "by_key",
    "capabilities",
    "gauges_not_available",
    "kind_runs_on",
    "kind_unsupported",
    "task_states_not_available",
]

# Stable names (the API's ``capabilities[].key``).
TIERED_EPOCH = "tiered_epoch"
LINEAR_HASHING = "linear_hashing"
LOG_DIR_RESET = "log_dir_reset"
CORDON = "cordon"
TIERED_OFFSETS = "tiered_offsets"
PROBE_LATENCY = "probe_latency"
RESTART_CONTROL = "restart_control"
LOG_DIRS = "log_dirs"
LEADER_ELECTION = "leader_election"
PARTITION_EXPANSION = "partition_expansion"
ELIGIBLE_LEADER_REPLICAS = "eligible_leader_replicas"

LABELS = {
    TIERED_EPOCH: "Tiered epoch and per-broker acknowledgements (KIP-950)",
    LINEAR_HASHING: "Linear hashing: ordered partition expansion and shrink (KIP-253)",
    LOG_DIR_RESET: "LogDirReset (KIP-112)",
    CORDON: "Cordon a log dir (KIP-1066 cordoned.log.dirs)",
    TIERED_OFFSETS: "Tiered offsets: earliest-local and latest-tiered (ListOffsets -4 / -5)",
    PROBE_LATENCY: "Log dir probe latency and KIP-963 remote-tier gauges",
    RESTART_CONTROL: "Broker restart from Strata",
    LOG_DIRS: "Log dirs, their state and replica sizes (DescribeLogDirs, KIP-113 / KIP-827)",
    LEADER_ELECTION: "Preferred leader election (ElectLeaders, KIP-460)",
    PARTITION_EXPANSION: "Partition expansion (CreatePartitions, KIP-195)",
    ELIGIBLE_LEADER_REPLICAS: "Eligible leader replicas and last known ELR "
    "(KIP-966, DescribeTopicPartitions)",
}
KEYS = tuple(LABELS)

NOT_KNOWN_YET = "not known until the first sync"
NOT_LEARNT = "not known: the last sync did not learn it from the brokers"

#: Kafka's ListOffsets API key and the first version with KIP-1005's latest-tiered (-5);
#: earliest-local (-4) came one version before.
LIST_OFFSETS_API_KEY = 2
DESCRIBE_LOG_DIRS_API_KEY = 35
ELECT_LEADERS_API_KEY = 43
CREATE_PARTITIONS_API_KEY = 37
DESCRIBE_TOPIC_PARTITIONS_API_KEY = 75
LIST_OFFSETS_TIERED_VERSION = 9

#: What Kafka as released does not do, whatever the brokers' version.
KAFKA_NEVER = {
    TIERED_EPOCH: "Kafka shipped KIP-950 without a tiered epoch or per-broker acknowledgements: "
    "disabling tiering is a topic config change (remote.log.copy.disable, or "
    "remote.storage.enable=false with remote.log.delete.on.disable) with no DISABLING state to "
    "follow and no epoch fencing what a delete purges",
    LINEAR_HASHING: "Kafka never shipped KIP-253: adding partitions remaps keys (the default "
    "partitioner takes murmur2 modulo the partition count) and partitions cannot be removed",
    LOG_DIR_RESET: "Kafka has no LogDirReset request (it was in a superseded KIP-112 draft): a "
    "broker re-creates missing replicas itself once the failed dir is replaced or removed from "
    "log.dirs and the broker restarted",
    PROBE_LATENCY: "Kafka's protocol carries neither a log dir's probe latency nor KIP-963's "
    "RemoteCopyLag / RemoteDeleteLag / RemoteLogSize gauges: they live in the brokers' JMX "
    "metrics, which Strata does not read",
    RESTART_CONTROL: "Kafka's protocol has no call to restart a broker: its process manager "
    "(systemd, Kubernetes) does, outside Strata",
}

#: What the agents' API does not carry (the simulated cluster, KIP-950 draft agents).
AGENTS_NEVER = {
    ELIGIBLE_LEADER_REPLICAS: "the agents' API carries no eligible leader replicas (KIP-966): "
    "the controller keeps no ELR, so a partition whose ISR shrank below min.insync.replicas "
    "shows only its ISR",
}

#: The KIP-963 gauges among a topic's or partition's tier metrics (JMX only on Kafka).
KIP963_GAUGES = (
    "remote_copy_lag_bytes",
    "remote_copy_lag_segments",
    "remote_delete_lag_bytes",
    "remote_delete_lag_segments",
    "remote_log_size_bytes",
)

#: Why a kafka cluster's brokers show no KIP-950 copier / expiration task states.
KAFKA_NO_TASK_STATES = (
    "Kafka's protocol does not report a broker's remote log manager tasks: whether its "
    "RLMCopyTask or RLMExpirationTask of a partition runs is visible only in the brokers' logs "
    "and JMX metrics, which Strata does not read, and Kafka has no 'external' expiration state"
)

#: The capabilities each workflow kind needs (by name: the console reads no workflow code).
KIND_NEEDS = {
    # on kafka, Kafka 3.9's config change verified by the -4 / -5 offsets (no epoch needed)
    "disable_tiering": (TIERED_OFFSETS,),
    "remote_purge": (TIERED_EPOCH,),
    # Kafka's expansion is CreatePartitions, without KIP-253's order (shown unavailable in its
    # plan); a shrink needs KIP-253: Kafka cannot remove partitions.
    "expand_partitions": (PARTITION_EXPANSION,),
    "shrink_partitions": (LINEAR_HASHING,),
    # On kafka the restart is the operator's (a manual step): it needs DescribeLogDirs.
    "recover_log_dir": (LOG_DIRS,),
    "elect_leaders": (LEADER_ELECTION,),
}

#: The workflow kinds whose steps run on a ``kafka`` cluster (through Kafka's protocol, the
#: ``kafka`` side of ``workflows.kinds.cluster_writes``); the others' steps still speak the
#: agents' API only (#36), so a request of them on a kafka cluster is refused up front.
KAFKA_KINDS: tuple[str, ...] = (
    "elect_leaders",
    "expand_partitions",
    # log-dir recovery: cordon, the operator's disk replacement and restart, verify
    "recover_log_dir",
    # tiering as Kafka 3.9 shipped it (``workflows.kinds.tiering_kafka``): config changes mapped
    # by ``broker_agent.contract.kafka39``, verified by the configs and offsets read back
    "disable_tiering",
    "enable_tiering",
)


@dataclasses.dataclass(frozen=True)
class Capability:
    """One thing a cluster can or cannot do. ``known`` is false while the answer waits for the
    first sync (then ``supported`` is false and ``reason`` says so)."""

    key: str
    label: str
    supported: bool
    reason: str = ""
    known: bool = True

    @property
    def status(self) -> str:
        return "unknown" if not self.known else "supported" if self.supported else "unsupported"


def _kafka_tiered_offsets(features: dict, synced: bool) -> Capability:
    versions = features.get("api_versions")
    if versions is None:
        return _unknown(TIERED_OFFSETS, synced)
    span = versions.get(str(LIST_OFFSETS_API_KEY))
    if not span:
        return _no(TIERED_OFFSETS, "the brokers do not answer ListOffsets")
    if span[1] >= LIST_OFFSETS_TIERED_VERSION:
        refused = features.get("tiered_offsets_refused")
        if refused:
            return _no(
                TIERED_OFFSETS,
                f"the brokers advertise ListOffsets v{span[1]} but the last sync could not read "
                f"earliest-local / latest-tiered offsets ({refused})",
            )
        return _yes(TIERED_OFFSETS)
    return _no(
        TIERED_OFFSETS,
        f"the brokers answer ListOffsets up to v{span[1]}: earliest-local (-4) and "
        f"latest-tiered (-5) offsets need v{LIST_OFFSETS_TIERED_VERSION} (KIP-1005), so the "
        "remote and local ranges of a partition cannot be told apart",
    )


#: The capabilities that are one Kafka API each: the API key, and what is lost without it.
KAFKA_APIS = {
    LOG_DIRS: (
        DESCRIBE_LOG_DIRS_API_KEY,
        "the brokers do not answer DescribeLogDirs: no log dir, its state or a replica's size "
        "can be read, and replicas are listed from Metadata alone",
    ),
    LEADER_ELECTION: (
        ELECT_LEADERS_API_KEY,
        "the brokers do not answer ElectLeaders: leadership cannot be moved back to the "
        "preferred replicas from Strata",
    ),
    PARTITION_EXPANSION: (
        CREATE_PARTITIONS_API_KEY,
        "the brokers do not answer CreatePartitions: a topic's partitions cannot be added from "
        "Strata",
    ),
    ELIGIBLE_LEADER_REPLICAS: (
        DESCRIBE_TOPIC_PARTITIONS_API_KEY,
        "the brokers do not answer DescribeTopicPartitions (Kafka 3.7 and later): their "
        "eligible leader replicas (KIP-966) cannot be read; Metadata does not carry them",
    ),
}


def _kafka_api(key: str, api_key: int, missing: str, features: dict, synced: bool) -> Capability:
    """A capability that is one Kafka API: supported when the brokers advertise ``api_key`` in
    ApiVersions, unknown until a sync learnt their versions; ``missing`` says what is lost."""
    versions = features.get("api_versions")
    if versions is None:
        return _unknown(key, synced)
    if str(api_key) in versions:
        return _yes(key)
    return _no(key, missing)


def _kafka_cordon(features: dict, synced: bool) -> Capability:
    configs = features.get("broker_configs")
    if configs is None or "cordoned.log.dirs" not in configs:
        return _unknown(CORDON, synced)
    if configs["cordoned.log.dirs"]:
        return _yes(CORDON)
    return _no(
        CORDON,
        "the brokers have no cordoned.log.dirs config (KIP-1066, Kafka 4.3 and later): a log dir "
        "cannot be kept from receiving new replicas",
    )


def _yes(key: str) -> Capability:
    return Capability(key, LABELS[key], True)


def _no(key: str, reason: str) -> Capability:
    return Capability(key, LABELS[key], False, reason)


def _unknown(key: str, synced: bool) -> Capability:
    return Capability(key, LABELS[key], False, NOT_LEARNT if synced else NOT_KNOWN_YET, known=False)


def capabilities(cluster: Cluster) -> list[Capability]:
    """Every capability of ``cluster``, in :data:`KEYS` order. No query: it reads the row."""
    if cluster.backend != ClusterBackend.KAFKA:
        return [_no(key, AGENTS_NEVER[key]) if key in AGENTS_NEVER else _yes(key) for key in KEYS]
    features = cluster.backend_features or {}
    synced = cluster.synced_at is not None
    out = []
    for key in KEYS:
        if key in KAFKA_NEVER:
            out.append(_no(key, KAFKA_NEVER[key]))
        elif key == TIERED_OFFSETS:
            out.append(_kafka_tiered_offsets(features, synced))
        elif key == CORDON:
            out.append(_kafka_cordon(features, synced))
        elif key in KAFKA_APIS:
            api_key, missing = KAFKA_APIS[key]
            out.append(_kafka_api(key, api_key, missing, features, synced))
    return out


def by_key(cluster: Cluster) -> dict[str, Capability]:
    """:func:`capabilities` by key, for templates (``caps.probe_latency.supported``)."""
    return {c.key: c for c in capabilities(cluster)}


def kind_unsupported(cluster: Cluster, kind: str) -> Capability | None:
    """The first capability workflow ``kind`` needs that ``cluster`` lacks, else ``None``."""
    caps = by_key(cluster)
    for key in KIND_NEEDS.get(kind, ()):
        if not caps[key].supported:
            return caps[key]
    return None


def kind_runs_on(cluster: Cluster, kind: str) -> bool:
    """Whether ``cluster``'s backend has the steps of workflow ``kind`` at all (every kind on
    ``agents``; :data:`KAFKA_KINDS` on ``kafka``), whatever its capabilities."""
    return cluster.backend != ClusterBackend.KAFKA or kind in KAFKA_KINDS


def gauges_not_available(cluster: Cluster) -> dict[str, object]:
    """Where ``cluster`` cannot report KIP-963's gauges: each of them ``None`` (never 0) and
    ``not_available`` the reason, to lay over what the sync stored; ``{}`` where it can."""
    cap = by_key(cluster)[PROBE_LATENCY]
    if cap.supported:
        return {}
    return {**dict.fromkeys(KIP963_GAUGES), "not_available": cap.reason}


def task_states_not_available(cluster: Cluster) -> str:
    """Why ``cluster``'s brokers cannot report their KIP-950 copier / expiration task states
    (a kafka cluster: Kafka's RemoteLogManager keeps them to itself), ``""`` where they can."""
    return KAFKA_NO_TASK_STATES if cluster.backend == ClusterBackend.KAFKA else ""
