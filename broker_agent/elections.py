"""Leader elections an operator asks for (Kafka's ElectLeaders), on the simulated controller.

The controller elects leaders by itself when a leader goes offline (``Controller._reelect``:
the first online ISR replica, never an unclean one). This module is the other kind: an election
asked for, with Kafka 3.9's rules (``ReplicationControlManager.electLeader`` and
``PartitionChangeBuilder``):

- PREFERRED: the preferred replica (the first of ``replicas``) becomes leader if it is in the
  ISR and online; already leader: ELECTION_NOT_NEEDED; not electable:
  PREFERRED_LEADER_NOT_AVAILABLE (the leader stays).
- UNCLEAN: only for a partition without a leader (one with a leader: ELECTION_NOT_NEEDED);
  the first online ISR replica if any, else the first online replica, which starts a new ISR
  of itself alone (the records only the old ISR had are lost, as unclean election accepts);
  no online replica: ELIGIBLE_LEADERS_NOT_AVAILABLE.
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION.
- ``partitions`` null asks for every partition, and then, as Kafka, the partitions whose
  election was not needed are left out of the answer.

A new leader bumps the leader epoch and the partition epoch, as any leader change; brokers
learn it from the metadata long-poll.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from broker_agent.choices import ErrorCode

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
