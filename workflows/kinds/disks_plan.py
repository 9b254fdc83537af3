"""``recover_log_dir``'s pre-flight (KIP-112): the refusal codes, the recovery modes, and the plan
- which replicas the dir held, where they go (the agent's own rule,
:func:`broker_agent.contract.placement.place_replicas`), whether they fit, what replacing a still-serving
(DEGRADED) dir takes away, and how the broker is restarted (the controller's sim control when it
advertises one, else an operator). Reads the controller and the broker's agent; changes nothing. The kind and its steps
are in :mod:`workflows.kinds.disks`.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from typing_extensions import TypedDict

from broker_agent.contract.choices import ErrorCode as AgentErrorCode
from broker_agent.contract.choices import LogDirState, ReplicaState, TopicConfig
from broker_agent.contract.models import (
    BrokerSnapshot,
    ClusterMetadata,
    PartitionMetadata,
    ReplicaInfo,
    TopicMetadata,
    partition_key,
)
from broker_agent.contract.placement import leader_sizes, place_replicas
from workflows.kinds import Actions, Params, Plan, Refusal, choice, flag, integer, text
from workflows.kinds.cluster_access import agent, controller
from workflows.kinds.commands import (
    preflight_reads,
)

__all__ = [
    "DiskRefusal",
    "RecoverParams",
    "RecoverPlan",
    "RecoveryMode",
    "RestartVia",
    "partitions_by_key",
    "plan_recovery",
    "replicas_on",
    "sizes_on_leaders",
    "space_refusal",
    "topic_min_isr",
]


class RecoveryMode:
    """KIP-112 "the disk gets fixed": replace the bad disk, or remove the dir from the config."""

    REPLACE: Final = "replace"
    REMOVE: Final = "remove"
    ALL = (REPLACE, REMOVE)


class RestartVia:
    """Who restarts the broker: the worker through the simulated cluster's control (the
    controller advertises ``restart_broker`` on ``GET /v1/sim/controls``), or an operator who
    confirms it in the console (any cluster without that control)."""

    SIM: Final = "sim"
    MANUAL: Final = "manual"


class RecoverParams(Params):
    broker: int = integer("Broker", ge=0, le=2**31 - 1, help="Broker id.")
    log_dir: str = text("Log dir", help="The log dir's name, e.g. logdir-0.")
    # RecoveryMode.ALL
    mode: Literal["replace", "remove"] = choice(
        "Mode",
        default="replace",
        help="replace: a new disk at the same path (human gate); remove: drop the dir from "
        "the broker's config (needs room on the good dirs, two approvals). Either way the "
        "broker then restarts: Kafka brings a failed dir back only at a restart.",
    )
    # Off by default: Kafka itself moves nothing off a failed dir (the restarted broker re-creates
    # its replicas from their leaders, KIP-112's runbook); a move copies every affected
    # partition across the network now, and the replicas do not come back to broker N by
    # themselves (a rebalance, another copy), which a replacement of hours does not repay. It
    # pays when the replacement takes days or the partitions sit at min.insync.replicas.
    move_replicas: bool = flag(
        "Move replicas off the broker (kafka)",
        default=False,
        help="kafka clusters: before the disk is replaced, reassign each partition with a "
        "replica on the failed dir to another broker (AlterPartitionReassignments, rack-aware, "
        "within the usable bytes DescribeLogDirs reports, throttled), restoring its "
        "replication factor for the days a replacement may take. Off: the restarted broker "
        "re-creates the replicas, as Kafka does.",
    )
    throttle_bytes_per_s: int = integer(
        "Replication throttle (bytes/s)",
        ge=1024,
        le=2**62,
        default=50_000_000,
        help="With move_replicas: leader/follower.replication.throttled.rate on each broker "
        "involved while the replicas move (as kafka-reassign-partitions --throttle), removed "
        "once they finished.",
    )


class ReplicaRef(TypedDict):
    topic: str
    partition: int


class GoodDir(TypedDict):
    name: str
    fits: bool


class RecoverPlan(Actions):
    summary: str
    broker: int
    log_dir: str
    mode: Literal["replace", "remove"]
    restart: Literal["sim", "manual"]  # RestartVia
    replica_count: int
    replicas: list[ReplicaRef]
    steps: list[str]
    good_log_dirs: list[GoodDir] | None = None  # mode remove: where the replicas go


class DiskRefusal:
    """Pre-flight and step refusal codes of this kind (Kafka's names where it has one)."""

    UNKNOWN_BROKER = "UNKNOWN_BROKER"
    LOG_DIR_NOT_FOUND = "LOG_DIR_NOT_FOUND"  # KIP-113
    LOG_DIR_NOT_OFFLINE = AgentErrorCode.LOG_DIR_NOT_OFFLINE
    LAST_LOG_DIR = AgentErrorCode.LAST_LOG_DIR
    INSUFFICIENT_SPACE = AgentErrorCode.INSUFFICIENT_SPACE
    LOG_DIR_STILL_OFFLINE = "LOG_DIR_STILL_OFFLINE"
    OFFLINE_REPLICAS_REMAIN = "OFFLINE_REPLICAS_REMAIN"
    RECORDS_LOST = "RECORDS_LOST"


def topic_min_isr(topic: TopicMetadata) -> int:
    default = TopicConfig.DEFAULTS[TopicConfig.MIN_INSYNC_REPLICAS]
    return int(topic.configs.get(TopicConfig.MIN_INSYNC_REPLICAS, default))


def partitions_by_key(md: ClusterMetadata) -> dict[str, tuple[TopicMetadata, PartitionMetadata]]:
    return {partition_key(t.name, p.partition): (t, p) for t in md.topics for p in t.partitions}


def sizes_on_leaders(
    cluster: str, md: ClusterMetadata, keys: set[str], broker: int
) -> dict[str, int]:
    """Local size of each partition on its current leader (what catching up will write)."""
    by_leader: dict[int, set[str]] = {}
    parts = partitions_by_key(md)
    for key in keys:
        if key in parts and parts[key][1].leader not in (-1, broker):
            by_leader.setdefault(parts[key][1].leader, set()).add(key)
    sizes: dict[str, int] = {}
    for leader, wanted in sorted(by_leader.items()):
        with agent(cluster, leader) as a:
            snap = a.snapshot()
        sizes.update(leader_sizes(snap.replicas, wanted))
    return sizes


def replicas_on(snap: BrokerSnapshot, log_dir: str) -> list[ReplicaInfo]:
    """Replicas on the dir, plus offline replicas whose dir the broker could not read (it
    booted with the dir already bad), as the agent's removal plan counts them."""
    return sorted(
        (
            r
            for r in snap.replicas
            if r.log_dir == log_dir or (r.log_dir is None and r.state == ReplicaState.OFFLINE)
        ),
        key=lambda r: (r.topic, r.partition),
    )


def space_refusal(needed: int, good: list[dict[str, Any]], unplaced: int, total: int) -> Refusal:
    per_dir = "; ".join(
        f"{d['name']}: {d['usable_bytes']} usable, {d['needed_bytes']} needed" for d in good
    )
    return Refusal(
        DiskRefusal.INSUFFICIENT_SPACE,
        f"The good log dirs lack usable space for {unplaced} of {total} replicas: "
        f"{needed} bytes needed, {sum(d['usable_bytes'] for d in good)} usable "
        f"({per_dir or 'no good dir'}). KIP-112: remove a bad dir only when the good dirs "
        "have room; replace the disk instead.",
        409,
    )


# --- pre-flight -----------------------------------------------------------------------------


def plan_recovery(params: RecoverParams) -> Plan[RecoverPlan]:
    """The plan of ``recover_log_dir`` (see the module docstring): refuse, or the plan.

    Reads the controller's metadata, the broker's snapshot (and for an OFFLINE dir its removal
    plan) and the leaders' snapshots for the sizes to re-create; changes nothing."""
    cluster, broker = params.cluster, params.broker
    name, mode = params.log_dir, params.mode
    with preflight_reads(cluster):
        with controller(cluster) as ctl:
            md = ctl.metadata()
            can_restart = bool(ctl.sim_controls().get("restart_broker"))
        if broker not in {b.broker_id for b in md.brokers}:
            known = ", ".join(str(b.broker_id) for b in md.brokers)
            raise Refusal(
                DiskRefusal.UNKNOWN_BROKER,
                f"Broker {broker} is not registered with the controller of {cluster} "
                f"(brokers: {known}).",
            )
        with agent(cluster, broker) as a:
            snap = a.snapshot()
            dirs = {d.name: d for d in snap.log_dirs}
            if name not in dirs:
                raise Refusal(
                    DiskRefusal.LOG_DIR_NOT_FOUND,
                    f"Broker {broker} has no log dir {name!r} (log dirs: "
                    f"{', '.join(sorted(dirs)) or 'none'}).",
                )
            state = dirs[name].state
            if state == LogDirState.ONLINE:
                raise Refusal(
                    DiskRefusal.LOG_DIR_NOT_OFFLINE,
                    f"{name} on broker {broker} is ONLINE and healthy: only an OFFLINE "
                    "(failed) or DEGRADED (slow) log dir is recovered.",
                    409,
                )
            if mode == RecoveryMode.REMOVE and len(dirs) == 1:
                raise Refusal(
                    DiskRefusal.LAST_LOG_DIR,
                    f"{name} is broker {broker}'s only log dir: replace the disk instead.",
                )
            removal = a.log_dir_removal_plan(name) if state == LogDirState.OFFLINE else None
        replicas = replicas_on(snap, name)
        keys = {partition_key(r.topic, r.partition) for r in replicas}
        from_leaders = sizes_on_leaders(cluster, md, keys, broker)
    removal_sizes = {
        partition_key(r.topic, r.partition): r.size_bytes
        for r in (removal.replicas if removal else [])
    }
    parts = partitions_by_key(md)
    rows: list[dict[str, Any]] = []
    sizes: dict[tuple[str, int], int] = {}
    for r in replicas:
        key = partition_key(r.topic, r.partition)
        t, p = parts.get(key, (None, None))
        if t is None or p is None:
            continue  # the partition is gone (topic deleted, KIP-253 partition removed)
        size = from_leaders.get(key, removal_sizes.get(key, r.size_bytes))
        sizes[(r.topic, r.partition)] = size
        min_isr = topic_min_isr(t)
        isr_after = [b for b in p.isr if b != broker]
        rows.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "replica_state": r.state,
                "leader": p.leader,
                "isr_size": len(p.isr),
                "min_insync_replicas": min_isr,
                "leader_lost": p.leader < 0 or (state != LogDirState.OFFLINE and p.isr == [broker]),
                "under_min_isr": len(p.isr) < min_isr,
                "under_min_isr_after_replacement": len(isr_after) < min_isr,
                "bytes": size,
            }
        )
    good = []
    targets = {
        d.name: d.usable_bytes
        for d in snap.log_dirs
        if d.name != name and d.state in LogDirState.GOOD
    }
    placement = place_replicas(sizes, targets)
    needed_per_dir, unplaced = placement.needed_bytes, len(placement.unplaced)
    if removal is not None:  # the agent's own plan decides for an OFFLINE dir
        needed_per_dir = {g.name: g.needed_bytes for g in removal.good_dirs}
        targets = {g.name: g.usable_bytes for g in removal.good_dirs}
        unplaced = sum(1 for x in removal.replicas if x.target_dir is None)
    for d in snap.log_dirs:
        if d.name == name or d.state not in LogDirState.GOOD:
            continue
        entry: dict[str, Any] = {
            "name": d.name,
            "state": d.state,
            "usable_bytes": d.usable_bytes,
            "replica_count": d.replica_count,
        }
        if mode == RecoveryMode.REMOVE and d.name in targets:
            entry["needed_bytes"] = needed_per_dir.get(d.name, 0)
            entry["usable_bytes"] = targets[d.name]
            entry["fits"] = needed_per_dir.get(d.name, 0) <= targets[d.name]
        good.append(entry)
    total = sum(sizes.values())
    if mode == RecoveryMode.REMOVE and unplaced:
        raise space_refusal(total, [g for g in good if "fits" in g], unplaced, len(sizes))
    leader_lost = [partition_key(x["topic"], x["partition"]) for x in rows if x["leader_lost"]]
    under_min = [partition_key(x["topic"], x["partition"]) for x in rows if x["under_min_isr"]]
    under_after = [
        partition_key(x["topic"], x["partition"])
        for x in rows
        if x["under_min_isr_after_replacement"]
    ]
    restart: Literal["sim", "manual"] = RestartVia.SIM if can_restart else RestartVia.MANUAL
    steps = ["cordon_log_dir"]
    steps += (
        ["confirm_disk_replaced", "uncordon_log_dir"]
        if mode == RecoveryMode.REPLACE
        else ["remove_log_dir"]
    )
    steps += ["restart_broker", "recreate_replicas", "verify"]
    how = (
        "wait for an operator to confirm the disk was replaced, lift the cordon"
        if mode == RecoveryMode.REPLACE
        else "remove it from the broker's configuration"
    )
    who = "the worker restarts" if restart == RestartVia.SIM else "an operator restarts"
    good_dirs: dict[str, Any] = {}
    if mode == RecoveryMode.REMOVE:
        good_dirs["good_log_dirs"] = [
            GoodDir(name=g["name"], fits=g["fits"]) for g in good if "fits" in g
        ]
    actions = RecoverPlan(
        summary=(
            f"Recover {name} on broker {broker} by {mode}: cordon it, {how}, {who} broker "
            f"{broker}, re-create {len(rows)} replica(s) from their leaders and verify "
            "OfflineReplicaCount = 0 and a produce / consume round trip."
        ),
        broker=broker,
        log_dir=name,
        mode=mode,
        restart=restart,
        replica_count=len(rows),
        replicas=[ReplicaRef(topic=x["topic"], partition=x["partition"]) for x in rows],
        steps=steps,
        **good_dirs,
    )
    information: dict[str, Any] = {
        "log_dir_state": state,
        "still_serving": state == LogDirState.DEGRADED,
        "replicas": rows,
        "partitions_leader_lost": leader_lost,
        "partitions_under_min_isr": under_min,
        "partitions_under_min_isr_after_replacement": under_after,
        "bytes_to_recreate": total,
        "good_log_dirs": good,
    }
    if leader_lost:
        information["warning"] = (
            f"{len(leader_lost)} partition(s) have no other in-sync replica; their data is "
            "only on this dir."
        )
    return Plan(actions, information)


# --- steps ------------------------------------------------------------------------------------
