"""The group coordinator of the simulated cluster (it runs in the controller process).

Kafka's coordinator reduced to what KIP-253's consumer half needs. Marked and live partitions
are dealt round-robin *separately* (seed 002), so drained ones do not starve a member. Commits
are fenced by generation and member (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID) and refused on a
partition the topic lacks. **Removed partitions**: their committed offsets are dropped, as
Kafka's coordinator does, so a re-created partition starts fresh and gated, never past its end.
Committed offsets are the positions :mod:`broker_agent.contract.ordering` reads. Persisted in the
controller's SQLite (``group/<id>``). **Versions**: each saved change gets the next version, at
least wall-clock ms, so a ``since`` from a previous life is answered in full; groups are never
forgotten, so a delta lists changed groups only.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Literal

from fastapi import FastAPI, Query
from fastapi.responses import Response

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import (
    SNAPSHOT_TSV_MEDIA_TYPE,
    CommitOffsetsRequest,
    GroupAssignment,
    GroupMemberRequest,
    GroupView,
    JoinGroupRequest,
    group_changes_tsv,
)

__all__ = ["GROUP_ID_PATTERN", "GroupCoordinator", "Layout", "install_group_routes"]

GROUP_ID_PATTERN = r"[a-zA-Z0-9._-]{1,249}"
"""Group ids Strata accepts: a topic name's characters (they name files in the CLI's ledger)."""

#: topic -> (partitions not marked for deletion, partitions marked), or None if unknown.
Layout = Callable[[str], tuple[list[int], list[int]] | None]


def _deal(partitions: list[int], members: list[str], out: dict[str, list[int]]) -> None:
    for i, p in enumerate(sorted(partitions)):
        out[members[i % len(members)]].append(p)


class GroupCoordinator:
    def __init__(self, db: sqlite3.Connection, layout: Layout, session_timeout_ms: int = 10_000):
        self.db = db
        self.layout = layout
        self.session_timeout_ms = session_timeout_ms
        self.groups: dict[str, dict] = {}
        self.floor = self.version = _now_ms()  # see "Versions" in the module docstring
        self.changed_at: dict[str, int] = {}
        for (value,) in db.execute("SELECT value FROM kv WHERE key LIKE 'group/%'"):
            g = json.loads(value)
            now = time.monotonic()
            for m in g["members"].values():
                m["last_seen"] = now  # one session timeout of grace after a restart
            self.groups[g["group_id"]] = g

    # -- persistence -------------------------------------------------------------------------

    def _save(self, g: dict) -> None:
        self.version = max(self.version + 1, _now_ms())
        self.changed_at[g["group_id"]] = self.version
        obj = dict(g, members={k: {"topics": v["topics"]} for k, v in g["members"].items()})
        self.db.execute(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)", (f"group/{g['group_id']}", json.dumps(obj))
        )

    # -- membership and assignment -----------------------------------------------------------

    def _group(self, group_id: str, *, create: bool = False) -> dict:
        if not re.fullmatch(GROUP_ID_PATTERN, group_id):
            raise ApiError(400, ErrorCode.INVALID_GROUP_ID, f"illegal group id {group_id!r}")
        g = self.groups.get(group_id)
        if g is None:
            if not create:
                raise ApiError(404, ErrorCode.GROUP_ID_NOT_FOUND, f"unknown group {group_id!r}")
            g = {"group_id": group_id, "generation": 0, "members": {}, "offsets": {}}
            g["shape"] = {}
            self.groups[group_id] = g
        return g

    def _topics(self, g: dict) -> list[str]:
        return sorted({t for m in g["members"].values() for t in m["topics"]})

    def _refresh(self, g: dict) -> None:
        """A new generation if the members or a subscribed topic's layout changed."""
        layout = {}
        for topic in self._topics(g):
            live = self.layout(topic)
            layout[topic] = [sorted(live[0]), sorted(live[1])] if live else None
        key = {"members": sorted(g["members"]), "layout": layout}
        if key != g.get("shape"):
            g["shape"] = key
            g["generation"] += 1
            self._save(g)

    def _expire(self, g: dict) -> None:
        deadline = time.monotonic() - self.session_timeout_ms / 1000
        for mid in [m for m, v in g["members"].items() if v["last_seen"] < deadline]:
            del g["members"][mid]

    def assignment(self, g: dict) -> dict[str, dict[str, list[int]]]:
        """member -> topic -> partitions; deterministic for a given generation."""
        out: dict[str, dict[str, list[int]]] = {m: {} for m in g["members"]}
        for topic, layout in (g.get("shape") or {}).get("layout", {}).items():
            members = sorted(m for m, v in g["members"].items() if topic in v["topics"])
            if not members or layout is None:
                continue
            per: dict[str, list[int]] = {m: [] for m in members}
            _deal(layout[0], members, per)
            _deal(layout[1], members, per)
            for m, parts in per.items():
                out[m][topic] = sorted(parts)
        return out

    def _answer(self, g: dict, member_id: str) -> dict:
        return {
            "group_id": g["group_id"],
            "member_id": member_id,
            "generation": g["generation"],
            "assignment": self.assignment(g).get(member_id, {}),
            "members": sorted(g["members"]),
        }

    def join(self, group_id: str, member_id: str | None, topics: list[str]) -> dict:
        """JoinGroup + SyncGroup in one: (re)join with ``topics``; returns the assignment."""
        g = self._group(group_id, create=True)
        self._expire(g)
        if member_id is None or member_id not in g["members"]:
            member_id = f"member-{uuid.uuid4().hex[:12]}"
        g["members"][member_id] = {"topics": sorted(set(topics)), "last_seen": time.monotonic()}
        self._refresh(g)
        self._save(g)
        return self._answer(g, member_id)

    def heartbeat(self, group_id: str, member_id: str) -> dict:
        """Keeps the session; answers the current generation and this member's assignment (a
        member whose generation moved re-reads its partitions from here, Kafka's rebalance)."""
        g = self._group(group_id)
        self._expire(g)
        m = g["members"].get(member_id)
        if m is None:
            raise ApiError(409, ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not in {group_id}")
        m["last_seen"] = time.monotonic()
        self._refresh(g)
        return self._answer(g, member_id)

    def leave(self, group_id: str, member_id: str) -> dict:
        g = self._group(group_id)
        if g["members"].pop(member_id, None) is not None:
            self._refresh(g)
            self._save(g)
        return {"group_id": group_id, "generation": g["generation"]}

    def commit(
        self, group_id: str, member_id: str, generation: int, offsets: dict[str, dict[int, int]]
    ) -> dict:
        """OffsetCommit, fenced by generation."""
        g = self._group(group_id)
        self._expire(g)
        m = g["members"].get(member_id)
        if m is None:
            raise ApiError(409, ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id} is not in {group_id}")
        self._refresh(g)
        if generation != g["generation"]:
            raise ApiError(
                409,
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's {g['generation']}: rejoin",
            )
        for topic, parts in offsets.items():
            live = self.layout(topic)
            gone = sorted(
                int(p) for p in parts if live is None or int(p) not in {*live[0], *live[1]}
            )
            if gone:
                raise ApiError(
                    404,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{topic} has no partition(s) {gone} (removed after a shrink?)",
                )
        m["last_seen"] = time.monotonic()
        for topic, parts in offsets.items():
            committed = g["offsets"].setdefault(topic, {})
            for p, off in parts.items():
                committed[str(p)] = int(off)
        self._save(g)
        return {"group_id": group_id, "generation": g["generation"]}

    def forget_partitions(self, topic: str, partitions: list[int]) -> list[str]:
        """Drop every group's committed offset on ``partitions`` of ``topic``, which the
        controller removed (see "Removed partitions" in the module docstring). Returns the
        groups that held one; each is saved, so the console's next sync drops its rows."""
        drop = {str(p) for p in partitions}
        changed = []
        for gid, g in sorted(self.groups.items()):
            committed = g["offsets"].get(topic)
            if not committed or not drop & committed.keys():
                continue
            for p in drop:
                committed.pop(p, None)
            if not committed:
                del g["offsets"][topic]
            self._save(g)
            changed.append(gid)
        return changed

    # -- views -------------------------------------------------------------------------------

    def view(self, group_id: str) -> dict:
        g = self._group(group_id)
        self._expire(g)
        self._refresh(g)
        assignment = self.assignment(g)
        return {
            "group_id": group_id,
            "generation": g["generation"],
            "members": [
                {"member_id": m, "topics": v["topics"], "assignment": assignment.get(m, {})}
                for m, v in sorted(g["members"].items())
            ],
            "offsets": {
                t: {int(p): o for p, o in parts.items()} for t, parts in g["offsets"].items()
            },
        }

    def list(self, topic: str | None = None) -> list[dict]:
        """Every group, or with ``topic`` those with positions on it or subscribing to it."""
        return [
            self.view(gid)
            for gid, g in sorted(self.groups.items())
            if topic is None
            or topic in g["offsets"]
            or any(topic in m["topics"] for m in g["members"].values())
        ]

    def changes(self, since: int | None) -> bytes:
        """The groups changed after ``since`` (all of them without one, or for a ``since`` this
        coordinator cannot answer) as :func:`~broker_agent.contract.models.group_changes_tsv`."""
        for g in self.groups.values():  # lazy expiry made due, so a delta misses no generation
            self._expire(g)
            self._refresh(g)
        full = since is None or not self.floor <= since <= self.version
        changed = [
            gid
            for gid in sorted(self.groups)
            if full or self.changed_at.get(gid, self.floor) > since
        ]
        heads, rows = [], []
        for gid in changed:
            g = self.groups[gid]
            members = len(g["members"])
            heads.append((gid, g["generation"], members))
            for topic, parts in sorted(g["offsets"].items()):
                for p, offset in sorted(parts.items(), key=lambda kv: int(kv[0])):
                    rows.append((gid, topic, int(p), offset, g["generation"], members))
        return group_changes_tsv(self.version, full, heads, rows)


def _now_ms() -> int:
    return int(time.time() * 1000)


def install_group_routes(app: FastAPI, coordinator: Callable[[], GroupCoordinator]) -> None:
    """The coordinator's routes on the controller app (all signed, like the rest of it)."""

    @app.get("/v1/groups", response_model=list[GroupView])
    async def list_groups(
        since: int | None = Query(None, ge=-1, le=2**62),
        format: Literal["json", "tsv"] = Query("json"),
        topic: str | None = Query(None, max_length=249),
    ):
        """Every group (JSON), or those on ``topic``; ``format=tsv`` answers the groups changed
        ``since`` a version as rows (:meth:`GroupCoordinator.changes`, the console's sync)."""
        if format == "tsv":
            return Response(coordinator().changes(since), media_type=SNAPSHOT_TSV_MEDIA_TYPE)
        return coordinator().list(topic)

    @app.get("/v1/groups/{group}", response_model=GroupView)
    async def describe_group(group: str):
        return coordinator().view(group)

    @app.post("/v1/groups/{group}/join", response_model=GroupAssignment)
    async def join_group(group: str, req: JoinGroupRequest):
        return coordinator().join(group, req.member_id, req.topics)

    @app.post("/v1/groups/{group}/heartbeat", response_model=GroupAssignment)
    async def group_heartbeat(group: str, req: GroupMemberRequest):
        return coordinator().heartbeat(group, req.member_id)

    @app.post("/v1/groups/{group}/leave")
    async def leave_group(group: str, req: GroupMemberRequest) -> dict:
        return coordinator().leave(group, req.member_id)

    @app.post("/v1/groups/{group}/commit")
    async def commit_offsets(group: str, req: CommitOffsetsRequest) -> dict:
        return coordinator().commit(group, req.member_id, req.generation, req.offsets)
