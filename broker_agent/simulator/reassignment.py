"""Partition reassignment on the simulated controller (KIP-455; Kafka 3.9's
``ReplicationControlManager.alterPartitionReassignments`` / ``listPartitionReassignments``).

Replicas widen to ``target + removing``; added brokers catch up like any follower, and
:func:`maybe_complete` finishes in the partition change that brings every target replica into
the ISR (a removed leader is replaced by the first target replica in the ISR). As Kafka: a new
reassignment replaces one under way, computed from the widened replicas; cancelling reverts the
adding replicas, and a revert that needs an unclean election is INVALID_REPLICA_ASSIGNMENT;
listing names only partitions under way. Every change bumps the partition epoch; a new leader
bumps the leader epoch.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from broker_agent.contract.choices import ErrorCode

__all__ = [
    "AlterReassignmentsRequest",
    "ListReassignmentsRequest",
    "in_progress",
    "install_reassignment_routes",
    "maybe_complete",
]


class ReassignablePartition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(max_length=249)
    partition: int
    replicas: list[int] | None = Field(max_length=1000)
    """The target replicas; ``None`` cancels the reassignment under way."""


class AlterReassignmentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: list[ReassignablePartition] = Field(max_length=100_000)


class TopicPartitions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(max_length=249)
    partitions: list[int] = Field(max_length=100_000)


class ListReassignmentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: list[TopicPartitions] | None = Field(None, max_length=100_000)
    """``None``: every partition."""


class _Refused(Exception):
    def __init__(self, error: str, message: str | None = None):
        super().__init__(message or error)
        self.error, self.message = error, message


def in_progress(part: dict) -> bool:
    return bool(part.get("adding_replicas") or part.get("removing_replicas"))


def _change(part: dict, replicas: list[int], isr: list[int], adding, removing) -> None:
    part["replicas"], part["isr"] = replicas, isr
    part["adding_replicas"], part["removing_replicas"] = adding, removing
    if part["leader"] >= 0 and (part["leader"] not in isr or part["leader"] not in replicas):
        new = next((r for r in replicas if r in isr), -1)  # the removed leader's successor
        if new != part["leader"]:
            part["leader"] = new
            part["leader_epoch"] += 1
    part["created"] = [b for b in part.get("created", []) if b in replicas]
    part["partition_epoch"] += 1


def maybe_complete(part: dict) -> bool:
    """Complete the partition's reassignment if every target replica is in the ISR (Kafka's
    ``PartitionReassignmentReplicas.maybeCompleteReassignment``); True when it did."""
    if not in_progress(part):
        return False
    removing = part["removing_replicas"]
    isr = [r for r in part["isr"] if r not in removing]
    replicas = [r for r in part["replicas"] if r not in removing]
    if not isr or not all(r in isr for r in replicas):
        return False
    _change(part, replicas, isr, [], [])
    return True


def _start(part: dict, target: list[int], registered: set[int]) -> None:
    if not target:
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    for b in target:
        if target.count(b) > 1:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {b} more than once.",
            )
        if b not in registered:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {b}, but no such broker is "
                "registered.",
            )
    current = part["replicas"]
    removing = [r for r in current if r not in target]
    adding = [r for r in target if r not in current]
    replicas = [*target, *removing]
    if (replicas, adding, removing) == (
        current,
        part.get("adding_replicas", []),
        part.get("removing_replicas", []),
    ):
        return  # nothing changes
    _change(part, replicas, list(part["isr"]), adding, removing)
    maybe_complete(part)


def _cancel(name: str, part: dict) -> None:
    if not in_progress(part):
        raise _Refused(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
        )
    adding = part["adding_replicas"]
    replicas = [r for r in part["replicas"] if r not in adding]
    isr = [r for r in part["isr"] if r not in adding]
    if not isr:
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Unable to revert partition assignment for {name}:{part['partition']} because it "
            "would require an unclean leader election.",
        )
    _change(part, replicas, isr, [], [])


def _alter(
    topics: dict[str, dict], registered: set[int], req: AlterReassignmentsRequest
) -> tuple[list[dict], list[dict]]:
    results, changed = [], {}
    for asked in req.partitions:
        t = topics.get(asked.topic)
        part = t["partitions"].get(asked.partition) if t else None
        error = message = None
        try:
            if part is None:
                raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            before = part["partition_epoch"]
            if asked.replicas is None:
                _cancel(asked.topic, part)
            else:
                _start(part, asked.replicas, registered)
            if part["partition_epoch"] != before:
                changed[asked.topic] = t
        except _Refused as exc:
            error, message = exc.error, exc.message
        results.append(
            {"topic": asked.topic, "partition": asked.partition, "error": error, "message": message}
        )
    return results, list(changed.values())


def _listing(topics: dict[str, dict], asked: dict[str, set[int]] | None) -> list[dict]:
    out = []
    for name, t in sorted(topics.items()):
        if asked is not None and name not in asked:
            continue
        for p, part in sorted(t["partitions"].items()):
            if (asked is None or p in asked[name]) and in_progress(part):
                out.append(
                    {
                        "topic": name,
                        "partition": p,
                        "replicas": part["replicas"],
                        "adding_replicas": part["adding_replicas"],
                        "removing_replicas": part["removing_replicas"],
                    }
                )
    return out


def install_reassignment_routes(
    app: FastAPI,
    topics: Callable[[], dict[str, dict]],
    registered: Callable[[], set[int]],
    commit: Callable[..., None],
) -> None:
    """The controller's reassignment routes: ``topics`` its topics, ``registered`` the ids of
    the registered brokers, ``commit(*topics)`` persists and publishes changed topics."""

    @app.post("/v1/partitions/reassignments")
    async def alter_reassignments(req: AlterReassignmentsRequest) -> dict:
        results, changed = _alter(topics(), registered(), req)
        if changed:
            commit(*changed)
        return {"results": results}

    @app.post("/v1/partitions/reassignments/list")
    async def list_reassignments(req: ListReassignmentsRequest) -> dict:
        """Every reassignment under way, or those of the partitions asked for."""
        asked = None
        if req.partitions is not None:
            asked = {}
            for tp in req.partitions:
                asked.setdefault(tp.topic, set()).update(tp.partitions)
        return {"reassignments": _listing(topics(), asked)}
