"""Leader elections an operator asks for (Kafka's ElectLeaders), on the simulated controller.

The controller elects by itself when a leader goes offline (first online ISR replica, never
unclean); this is the other kind, with Kafka 3.9's rules (``ReplicationControlManager.electLeader``,
``PartitionChangeBuilder``). PREFERRED: the first replica if in the ISR and online
(ELECTION_NOT_NEEDED / PREFERRED_LEADER_NOT_AVAILABLE otherwise). UNCLEAN: only a leaderless
partition; the first online ISR replica, else the first online replica with a new ISR of itself
(data only the old ISR had is lost, as unclean election accepts). ``partitions`` null asks for
all and leaves not-needed ones out of the answer. A new leader bumps both epochs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from broker_agent.contract.choices import ErrorCode

__all__ = ["ElectLeadersRequest", "elect_leader", "install_election_routes"]

PREFERRED, UNCLEAN = "PREFERRED", "UNCLEAN"


class TopicPartitions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(max_length=249)
    partitions: list[int] = Field(max_length=100_000)


class ElectLeadersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    election_type: Literal["PREFERRED", "UNCLEAN"]
    partitions: list[TopicPartitions] | None = Field(None, max_length=100_000)
    """``None``: every partition of every topic."""


def elect_leader(part: dict, election_type: str, offline: list[int]) -> str | None:
    """Elect ``part``'s leader in place (Kafka's ``electLeader``); the error code, or ``None``
    when a new leader was elected. ``offline``: its replicas on fenced brokers or failed
    dirs."""
    leader, replicas, isr = part["leader"], part["replicas"], part["isr"]
    if election_type == PREFERRED:
        if leader == replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED
        if replicas[0] not in isr or replicas[0] in offline:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        new = replicas[0]
    else:
        if leader != -1:
            return ErrorCode.ELECTION_NOT_NEEDED
        online = [r for r in replicas if r not in offline]
        clean = [r for r in online if r in isr]
        if not online:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        new = (clean or online)[0]
        if new not in isr:
            part["isr"] = [new]
    part["leader"] = new
    part["leader_epoch"] += 1
    part["partition_epoch"] += 1
    return None


def _elect(
    topics: dict[str, dict],
    offline: Callable[[str, dict], list[int]],
    req: ElectLeadersRequest,
) -> tuple[list[dict], list[dict]]:
    """The per-partition results and the topics changed."""
    asked = req.partitions
    if asked is None:
        asked = [
            TopicPartitions(topic=name, partitions=sorted(t["partitions"]))
            for name, t in sorted(topics.items())
        ]
    results, changed = [], {}
    for tp in asked:
        t = topics.get(tp.topic)
        rows = []
        for p in tp.partitions:
            part = t["partitions"].get(p) if t else None
            if part is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = (
                    f"No such partition as {tp.topic}-{p}" if t else f"No such topic as {tp.topic}"
                )
            else:
                error = elect_leader(part, req.election_type, offline(tp.topic, part))
                message = None
                if error is None:
                    changed[tp.topic] = t
            if req.partitions is None and error == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            rows.append({"partition": p, "error": error, "message": message})
        results.append({"topic": tp.topic, "partitions": rows})
    return results, list(changed.values())


def install_election_routes(
    app: FastAPI,
    topics: Callable[[], dict[str, dict]],
    offline: Callable[[str, dict], list[int]],
    commit: Callable[..., None],
) -> None:
    """``POST /v1/partitions/elect-leaders`` on the controller app: ``topics`` its topics,
    ``offline(topic, part)`` a partition's offline replicas, ``commit(*topics)`` persists and
    publishes the changed topics (one metadata version)."""

    @app.post("/v1/partitions/elect-leaders")
    async def elect_leaders(req: ElectLeadersRequest) -> dict:
        results, changed = _elect(topics(), offline, req)
        if changed:
            commit(*changed)
        return {"results": results}
