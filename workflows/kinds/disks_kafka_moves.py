"""``recover_log_dir`` on ``kafka`` with ``move_replicas`` (#36): re-protect a failed dir's
partitions for the days a disk replacement may take, as an SRE does with kafka-reassign-partitions.

Each partition with a replica on the dir is reassigned from broker N to a live broker outside its
replica set (AlterPartitionReassignments, N's place in the list, so the preferred order holds),
rack-aware where brokers name racks, chosen by KIP-827's usable bytes; the plan is refused, broker
by broker, when the leader's replica size does not fit. A replica on an OFFLINE dir cannot move to
another dir of N (AlterReplicaLogDirs answers KAFKA_STORAGE_ERROR until the restart): no in-broker
move. kafka-reassign-partitions' ``--throttle`` is set before and removed after. Every step is
idempotent: a re-run finds its configs listed, its reassignment under way or done.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from audit import targets
from broker_agent.contract.choices import TopicConfig
from broker_agent.contract.client import AgentError
from broker_agent.contract.models import partition_key
from workflows.kinds import ReviewRow, StepResult, size_text
from workflows.kinds.commands import run_command, waits_when_unreachable

if TYPE_CHECKING:
    from workflows.kinds.cluster_writes import KafkaWrites
    from workflows.kinds.disks_kafka import KafkaRecoverContext

__all__ = [
    "DEFAULT_THROTTLE_BYTES_PER_S",
    "NO_IN_BROKER_MOVES",
    "Candidate",
    "MoveAction",
    "Placement",
    "ReplicaMove",
    "ReplicationThrottle",
    "ToMove",
    "moves_review",
    "place_moves",
    "reassign_replicas",
    "remove_replication_throttle",
    "replication_throttle",
    "set_replication_throttle",
    "wait_reassignments",
]

#: RecoverParams.throttle_bytes_per_s's default, Kafka's documented example of --throttle
#: (bytes/s per broker and side): 40% of a 1 GbE link, ~3 GB a minute of catch-up, the rest left
#: to producers and consumers.
DEFAULT_THROTTLE_BYTES_PER_S = 50_000_000
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = TopicConfig.LEADER_THROTTLED_REPLICAS
FOLLOWER_REPLICAS = TopicConfig.FOLLOWER_THROTTLED_REPLICAS
POLL_SECONDS = 5.0
GIB = 2**30
NO_IN_BROKER_MOVES = (
    "no move to another dir of the same broker: a replica on an OFFLINE dir cannot be moved "
    "before the broker restarts (AlterReplicaLogDirs answers KAFKA_STORAGE_ERROR)"
)
REASSIGNMENT_CANCELLED = "REASSIGNMENT_CANCELLED"


class MoveAction:
    """Audit actions of the commands the moves send."""

    THROTTLE_SET = "disks.set_replication_throttle"
    REASSIGN = "disks.reassign_partitions"
    THROTTLE_REMOVE = "disks.remove_replication_throttle"


class ReplicaMove(TypedDict):
    topic: str
    partition: int
    replicas_before: list[int]
    replicas_after: list[int]
    target: int


class ReplicationThrottle(TypedDict):
    rate_bytes_per_s: int
    brokers: list[int]
    #: topic -> "partition:broker" entries (kafka-reassign-partitions' leader / follower lists)
    leader_replicas: dict[str, list[str]]
    follower_replicas: dict[str, list[str]]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A live broker a replica may go to: its rack (None: unknown) and the usable bytes of each
    of its good, uncordoned dirs (DescribeLogDirs, KIP-827)."""

    broker: int
    rack: str | None
    dirs: dict[str, int]


@dataclasses.dataclass(frozen=True)
class ToMove:
    topic: str
    partition: int
    replicas: list[int]
    leader: int
    size: int  # the leader's replica, DescribeLogDirs


def _pick(
    tiers: list[list[Candidate]], room: dict[int, dict[str, int]], size: int, taken: dict[int, int]
) -> tuple[int, str] | None:
    """The broker (and dir) with the most usable bytes in the first tier where one fits. Bytes
    are compared in whole GiB, then the fewest moves taken so far, then the lowest id: usable
    bytes drift with every write, and the approved moves must be the planned ones."""
    for tier in tiers:
        best = [
            (max(room[c.broker].values()) // GIB, -taken.get(c.broker, 0), -c.broker, c.broker)
            for c in tier
            if room[c.broker] and max(room[c.broker].values()) >= size
        ]
        if best:
            broker = max(best)[3]
            path = max(sorted(room[broker]), key=lambda d: room[broker][d])
            return broker, path
    return None


def _why_not(pool: list[Candidate], room: dict[int, dict[str, int]], size: int) -> str:
    return "; ".join(
        f"broker {c.broker}: "
        + (
            f"its largest good dir has {size_text(max(room[c.broker].values()))} usable, "
            f"{size_text(size)} needed"
            if room[c.broker]
            else "no good, uncordoned log dir"
        )
        for c in pool
    )


@dataclasses.dataclass
class Placement:
    """:func:`place_moves`' answer: the moves, the partitions that stay on the broker (no
    broker can take them; re-created there at the restart, as without moves) and those refused
    for want of room, each with its reason."""

    moves: list[ReplicaMove]
    stays: dict[str, str]
    refused: list[str]


def place_moves(
    broker: int, partitions: list[ToMove], candidates: dict[int, Candidate]
) -> Placement:
    """Where each partition's replica on ``broker`` goes, largest first. A target holds no
    replica of the partition; where racks are known, a rack none of the other replicas is on
    is preferred. A partition without a leader (its new replica could not catch up) or with
    a replica on every live broker stays; one that fits on no candidate is refused."""
    room = {b: dict(c.dirs) for b, c in candidates.items()}
    taken: dict[int, int] = {}
    out = Placement([], {}, [])
    for m in sorted(partitions, key=lambda x: (-x.size, x.topic, x.partition)):
        key = partition_key(m.topic, m.partition)
        if m.leader < 0:
            out.stays[key] = (
                "no leader (its only in-sync replica was on the failed dir): a new replica "
                "could not catch up"
            )
            continue
        pool = [c for b, c in sorted(candidates.items()) if b not in m.replicas]
        if not pool:
            out.stays[key] = f"every live broker already holds a replica ({m.replicas})"
            continue
        racks = {candidates[r].rack for r in m.replicas if r != broker and r in candidates}
        known = None not in racks and all(c.rack is not None for c in pool)
        diverse = [c for c in pool if c.rack not in racks] if known else []
        chosen = _pick([diverse, [c for c in pool if c not in diverse]], room, m.size, taken)
        if chosen is None:
            out.refused.append(
                f"{key} ({size_text(m.size)} on its leader {m.leader}) fits on no broker: "
                + _why_not(pool, room, m.size)
            )
            continue
        target, path = chosen
        room[target][path] -= m.size
        taken[target] = taken.get(target, 0) + 1
        out.moves.append(
            ReplicaMove(
                topic=m.topic,
                partition=m.partition,
                replicas_before=list(m.replicas),
                replicas_after=[target if r == broker else r for r in m.replicas],
                target=target,
            )
        )
    out.moves.sort(key=lambda x: (x["topic"], x["partition"]))
    return out


def replication_throttle(moves: list[ReplicaMove], rate: int) -> ReplicationThrottle:
    """kafka-reassign-partitions' throttle of ``moves``: the leader side on the existing
    replicas, the follower side on the added ones, the rates on every broker involved."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for m in moves:
        p, before, after = m["partition"], m["replicas_before"], m["replicas_after"]
        leader.setdefault(m["topic"], []).extend(f"{p}:{b}" for b in before)
        follower.setdefault(m["topic"], []).extend(f"{p}:{b}" for b in after if b not in before)
        brokers.update(before)
        brokers.update(after)
    return ReplicationThrottle(
        rate_bytes_per_s=rate,
        brokers=sorted(brokers),
        leader_replicas=leader,
        follower_replicas=follower,
    )


def moves_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    """The moves (partition: old set -> new set, bytes) and their throttle, in red: they copy
    each partition across the network and take the replica off broker N for good."""
    moves, throttle = actions.get("moves") or [], actions.get("throttle")
    stays = information.get("not_moved") or {}
    stay_rows = [
        ReviewRow(
            f"Not moved (re-created on broker {actions['broker']} at the restart)",
            ", ".join(f"{k}: {why}" for k, why in sorted(stays.items())[:10])
            + (f" and {len(stays) - 10} more" if len(stays) > 10 else ""),
        )
    ]
    if not moves or not throttle:
        return [
            ReviewRow(
                "Move replicas to other brokers",
                f"{actions['replica_count']} replicas",
                "",
                "none",
                actions["replica_moves"],
            ),
            *(stay_rows if stays else []),
        ]
    sizes = information.get("move_bytes") or {}
    rate = throttle["rate_bytes_per_s"]
    rows = [
        ReviewRow(
            "Throttle replication (kafka-reassign-partitions --throttle): leader/follower."
            "replication.throttled.replicas on the topics, .rate on the brokers; removed once "
            "the moves finished",
            f"brokers {', '.join(map(str, throttle['brokers']))}; topics "
            + ", ".join(sorted(throttle["leader_replicas"])),
            "unthrottled",
            f"{size_text(rate)}/s per broker",
            destructive=True,
        )
    ]
    for m in moves[:50]:
        key = partition_key(m["topic"], m["partition"])
        rows.append(
            ReviewRow(
                f"Reassign {key} off broker {actions['broker']} (AlterPartitionReassignments; "
                "the copy loads the leader and the target)",
                key,
                str(m["replicas_before"]),
                str(m["replicas_after"]),
                size_text(sizes.get(key)),
                destructive=True,
            )
        )
    if len(moves) > 50:
        rows.append(ReviewRow(f"... and {len(moves) - 50} more reassignments", destructive=True))
    rows.append(
        ReviewRow("No move between dirs of the same broker", "", "", "", NO_IN_BROKER_MOVES)
    )
    return rows + (stay_rows if stays else [])


# --- steps ------------------------------------------------------------------------------------


@contextmanager
def _kafka(cluster: str) -> Iterator[KafkaWrites]:
    from workflows.kinds.cluster_writes import KafkaWrites, writes_for

    with writes_for(cluster) as writes:
        assert isinstance(writes, KafkaWrites)
        yield writes


def _throttle_of(ctx: KafkaRecoverContext) -> ReplicationThrottle:
    throttle = ctx.plan.throttle
    assert throttle is not None, "a plan with moves has a throttle"
    return throttle


def _topic_state(kafka: KafkaWrites, topic: str, keys: list[str]) -> dict[str, Any]:
    return {k: v for k, v in kafka.topic_configs(topic).items() if k in keys}


def _rates(kafka: KafkaWrites, broker: int) -> dict[str, Any]:
    got = kafka.broker_configs(broker)
    return {LEADER_RATE: got.get(LEADER_RATE), FOLLOWER_RATE: got.get(FOLLOWER_RATE)}


def _alter_topic(kafka: KafkaWrites, topic: str, ops: dict[str, Any]) -> dict[str, Any]:
    kafka.alter_configs("topic", topic, ops)
    return _topic_state(kafka, topic, list(ops))


def _alter_rates(kafka: KafkaWrites, broker: int, ops: dict[str, Any]) -> dict[str, Any]:
    kafka.alter_configs("broker", str(broker), ops)
    return _rates(kafka, broker)


def _throttle_step(ctx: KafkaRecoverContext, on: bool) -> StepResult:
    """Each topic's lists (APPEND / SUBTRACT its entries) and each broker's rates (SET /
    DELETE), one audited command per resource, each idempotent on Kafka's side."""
    cluster, throttle = ctx.params.cluster, _throttle_of(ctx)
    action = MoveAction.THROTTLE_SET if on else MoveAction.THROTTLE_REMOVE
    op = "APPEND" if on else "SUBTRACT"
    rate = str(throttle["rate_bytes_per_s"])
    applied = 0
    with _kafka(cluster) as kafka:
        for topic in sorted(throttle["leader_replicas"]):
            ops: dict[str, tuple[str, str | None]] = {
                LEADER_REPLICAS: (op, ",".join(throttle["leader_replicas"][topic]))
            }
            if throttle["follower_replicas"].get(topic):
                ops[FOLLOWER_REPLICAS] = (op, ",".join(throttle["follower_replicas"][topic]))
            _, now = run_command(
                ctx,
                action,
                functools.partial(_alter_topic, kafka, topic, ops),
                **targets.topic(cluster, topic),
                before=functools.partial(_topic_state, kafka, topic, list(ops)),
                key=f"{ctx.idempotency_key}:topic:{topic}",
            )
            applied += now
        side: tuple[str, str | None] = ("SET", rate) if on else ("DELETE", None)
        for broker in throttle["brokers"]:
            _, now = run_command(
                ctx,
                action,
                functools.partial(
                    _alter_rates, kafka, broker, {LEADER_RATE: side, FOLLOWER_RATE: side}
                ),
                **targets.broker(cluster, broker),
                before=functools.partial(_rates, kafka, broker),
                key=f"{ctx.idempotency_key}:broker:{broker}",
            )
            applied += now
    return StepResult.done(
        {
            "throttled": on,
            "rate_bytes_per_s": throttle["rate_bytes_per_s"] if on else None,
            "topics": sorted(throttle["leader_replicas"]),
            "brokers": throttle["brokers"],
            "applied_now": applied,
        }
    )


def _refused(exc: AgentError) -> StepResult:
    if exc.retriable or exc.status >= 500:
        raise exc
    return StepResult.fail(exc.error, exc.message)


@waits_when_unreachable
def set_replication_throttle(ctx: KafkaRecoverContext) -> StepResult:
    """Before any replica moves: the topics' throttled replicas and the brokers' rates."""
    try:
        return _throttle_step(ctx, on=True)
    except AgentError as exc:
        return _refused(exc)


@waits_when_unreachable
def remove_replication_throttle(ctx: KafkaRecoverContext) -> StepResult:
    """Once every reassignment finished: the entries this workflow listed, and the rates."""
    try:
        return _throttle_step(ctx, on=False)
    except AgentError as exc:
        return _refused(exc)


def _keys(ctx: KafkaRecoverContext) -> dict[tuple[str, int], list[int]]:
    return {(m["topic"], m["partition"]): list(m["replicas_after"]) for m in ctx.plan.moves or []}


@waits_when_unreachable
def reassign_replicas(ctx: KafkaRecoverContext) -> StepResult:
    """One AlterPartitionReassignments for the partitions not already at (or moving to) their
    target: a re-run after a kill between the request and its audit sends none again."""
    cluster, wanted = ctx.params.cluster, _keys(ctx)

    with _kafka(cluster) as kafka:

        def state() -> dict[str, Any]:
            parts = kafka.topics_partitions([t for t, _ in wanted])
            listed = kafka.reassignments(list(wanted))
            return {
                partition_key(t, p): {
                    "replicas": parts.get(t, {}).get(p, (None, [], []))[1],
                    "reassigning": (t, p) in listed,
                }
                for t, p in wanted
            }

        def call() -> dict[str, Any]:
            now = state()
            pending = {
                k: target
                for k, target in wanted.items()
                if not now[partition_key(*k)]["reassigning"]
                and now[partition_key(*k)]["replicas"] != target
            }
            answers = kafka.reassign(pending) if pending else {}
            refused = {partition_key(*k): e for k, e in answers.items() if e}
            if refused:
                first = next(iter(refused.values()))
                raise AgentError(400, str(first), f"AlterPartitionReassignments refused {refused}")
            return {
                "sent": sorted(partition_key(*k) for k in pending),
                "already": sorted(partition_key(*k) for k in wanted if k not in pending),
            }

        try:
            after, now = run_command(
                ctx,
                MoveAction.REASSIGN,
                call,
                **targets.broker(cluster, ctx.params.broker),
                before=state,
            )
        except AgentError as exc:
            return _refused(exc)
    return StepResult.done({**after, "applied_now": now})


@waits_when_unreachable
def wait_reassignments(ctx: KafkaRecoverContext) -> StepResult:
    """Until ListPartitionReassignments lists none of the moves and Metadata shows each target
    set, its new replica in the ISR: a wait the engine re-schedules, no worker held."""
    cluster, wanted = ctx.params.cluster, _keys(ctx)
    added = {(m["topic"], m["partition"]): m["target"] for m in ctx.plan.moves or []}
    with _kafka(cluster) as kafka:
        listed = kafka.reassignments(list(wanted))
        parts = kafka.topics_partitions([t for t, _ in wanted])
    done, lost = [], []
    for (t, p), replicas in wanted.items():
        now = parts.get(t, {}).get(p)
        if now is None:
            continue  # the topic was deleted meanwhile: nothing left to protect
        if (t, p) in listed:
            continue
        if added[(t, p)] not in now.replicas:
            lost.append(f"{partition_key(t, p)} (replicas {now.replicas}, planned {replicas})")
        elif now.replicas == replicas and added[(t, p)] in now.isr:
            done.append(partition_key(t, p))
    if lost and ctx.step.attempts >= 2:  # not a Metadata answer lagging the controller's
        return StepResult.fail(
            REASSIGNMENT_CANCELLED,
            f"No reassignment under way and the planned replica is missing: {', '.join(lost)}; "
            "it was cancelled or replaced by someone else.",
        )
    ctx.progress(len(done), len(wanted), "partitions")
    if len(done) < len(wanted):
        return StepResult.wait(
            f"{len(done)} of {len(wanted)} partitions moved ({len(listed)} being reassigned).",
            retry_in=POLL_SECONDS,
        )
    return StepResult.done({"moved": done})


def refusal_text(refused: list[str]) -> str:
    shown = "; ".join(refused[:10])
    more = f"; and {len(refused) - 10} more" if len(refused) > 10 else ""
    return (
        f"move_replicas: {len(refused)} partition(s) fit on no other broker (usable bytes, "
        f"DescribeLogDirs): {shown}{more}. Free space or add a broker, or recover without "
        "moving replicas."
    )
