"""A consumer-group member with KIP-253's in-order delivery (the consumer half).

:class:`GroupConsumer` reads its assigned partitions from the leaders, holds back what
:mod:`broker_agent.contract.ordering` gates, hands each batch to a sink and only then commits:
at-least-once. A commit refused for an older generation is redone if the partition is still
ours, else the next owner re-delivers (``sim consume --verify`` counts duplicates). Fetches and
OffsetsForLeaderEpoch name the undeleted partition count the decision used (seed step 6), so a
leader that has not applied the same change refuses and the member retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from broker_agent.contract.choices import ErrorCode, TopicConfig
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.models import ClusterMetadata, PartitionMetadata, TopicMetadata
from broker_agent.contract.ordering import (
    Gate,
    creation_barrier,
    creation_gate_applies,
    deletion_blockers,
    split_parent,
)

__all__ = ["Delivered", "GroupConsumer", "ordered_delivery"]

log = logging.getLogger("broker_agent.simulator.group_consumer")


class _Retry(Exception):
    """A transient answer (no leader, a leader behind the metadata, a broker down)."""


@dataclass(frozen=True)
class Delivered:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: str


def ordered_delivery(t: TopicMetadata) -> bool:
    return t.configs.get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"


class GroupConsumer:
    """One member of ``group`` subscribed to ``topics``.

    ``sink`` receives each delivered batch before its offsets are committed (the CLI appends it
    to the group's delivery ledger). ``gates`` holds, after each poll, the gate of every assigned
    partition that is held back: topic -> partition -> :class:`~broker_agent.contract.ordering.Gate`.
    """

    def __init__(
        self,
        controller: ControllerClient,
        secret: bytes | str,
        group: str,
        topics: list[str],
        *,
        sink: Callable[[list[Delivered]], None] | None = None,
    ):
        self.controller = controller
        self.secret = secret
        self.group = group
        self.topics = sorted(set(topics))
        self.sink = sink
        self.member_id: str | None = None
        self.generation = -1
        self.assignment: dict[str, list[int]] = {}
        self.gates: dict[str, dict[int, Gate]] = {}
        self._agents: dict[str, AgentClient] = {}
        self._split_offsets: dict[tuple[str, int, int, int], int] = {}

    # -- membership --------------------------------------------------------------------------

    def _take(self, answer) -> None:
        self.member_id = answer.member_id
        self.generation = answer.generation
        self.assignment = answer.assignment

    def join(self) -> None:
        self._take(self.controller.join_group(self.group, self.topics, self.member_id))

    def _heartbeat(self) -> None:
        if self.member_id is None:
            self.join()
            return
        try:
            self._take(self.controller.group_heartbeat(self.group, self.member_id))
        except AgentError as exc:
            if exc.error not in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND):
                raise
            self.join()

    def leave(self) -> None:
        if self.member_id is not None:
            self.controller.leave_group(self.group, self.member_id)
            self.member_id = None
        for a in self._agents.values():
            a.close()
        self._agents.clear()

    def _commit(self, topic: str, partition: int, offset: int) -> None:
        offsets = {topic: {partition: offset}}
        try:
            self.controller.commit_offsets(self.group, self.member_id, self.generation, offsets)
        except AgentError as exc:
            if exc.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                # removed after it was drained: its offsets are gone with it (groups.py)
                log.info("%s-%s removed; its position is not kept", topic, partition)
                return
            if exc.error not in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                raise
            self._heartbeat()  # the new generation; commit again if the partition is still ours
            if partition in self.assignment.get(topic, []):
                self.controller.commit_offsets(self.group, self.member_id, self.generation, offsets)

    # -- leader requests ---------------------------------------------------------------------

    def _agent(self, md: ClusterMetadata, part: PartitionMetadata) -> AgentClient:
        if part.leader < 0:
            raise _Retry(f"partition {part.partition} has no leader")
        url = next((b.url for b in md.brokers if b.broker_id == part.leader), None)
        if url is None:
            raise _Retry(f"leader {part.leader} unknown")
        if url not in self._agents:
            self._agents[url] = AgentClient(url, self.secret, retries=0, timeout=30)
        return self._agents[url]

    @staticmethod
    def _count(t: TopicMetadata) -> int | None:
        return t.undeleted_partition_count if ordered_delivery(t) else None

    def _call(self, fn):
        try:
            return fn()
        except AgentError as exc:
            if exc.retriable:
                raise _Retry(f"{exc.error}: {exc.message}") from None
            raise
        except httpx.TransportError as exc:
            raise _Retry(type(exc).__name__) from None

    def _fetch(self, md, t: TopicMetadata, part: PartitionMetadata, offset: int, n: int = 5000):
        """A fetch at ``offset``; below the log start it reads from the log start
        (auto.offset.reset=earliest)."""
        agent = self._agent(md, part)
        try:
            return self._call(
                lambda: agent.fetch(
                    t.name, part.partition, offset, n, undeleted_partition_count=self._count(t)
                )
            )
        except AgentError as exc:
            lso = exc.body.get("log_start_offset")
            if exc.error != ErrorCode.OFFSET_OUT_OF_RANGE or lso is None or offset >= lso:
                raise
            return self._call(
                lambda: agent.fetch(
                    t.name, part.partition, lso, n, undeleted_partition_count=self._count(t)
                )
            )

    def _split_offset(self, md, t: TopicMetadata, part: PartitionMetadata, epoch: int) -> int:
        """End offset in ``part`` of leader epoch ``epoch`` (OffsetsForLeaderEpoch), cached: with
        the count checked, the leader already holds the later epoch, so the answer is final."""
        key = (t.topic_id, part.partition, epoch, t.undeleted_partition_count)
        if key not in self._split_offsets:
            agent = self._agent(md, part)
            answer = self._call(
                lambda: agent.offsets_for_leader_epoch(
                    t.name, part.partition, epoch, undeleted_partition_count=self._count(t)
                )
            )
            self._split_offsets[key] = max(0, int(answer["end_offset"]))
        return self._split_offsets[key]

    # -- the gates ---------------------------------------------------------------------------

    def gate(
        self,
        md: ClusterMetadata,
        t: TopicMetadata,
        partition: int,
        position: int | None,
        log_start: int,
        positions: dict[int, int],
    ) -> Gate:
        """What the group may deliver of ``partition`` now (see :mod:`broker_agent.contract.ordering`).
        Raises ``_Retry`` when a leader it must ask is behind or away."""
        if not ordered_delivery(t):
            return Gate()
        n, u = t.initial_partition_count, t.undeleted_partition_count
        parts = {x.partition: x for x in t.partitions}
        if creation_gate_applies(partition, n, position, log_start):
            after_creation = parts[partition].leader_epoch_after_creation
            barrier = creation_barrier(partition, n, after_creation)
            if barrier in parts:
                epoch = after_creation[str(barrier)]
                split = self._split_offset(md, t, parts[barrier], epoch)
                reached = positions.get(barrier)
                if reached is None:
                    reached = self._fetch(md, t, parts[barrier], 0, 1).log_start_offset
                if reached < split:
                    what = "first ancestor that existed before the expansion"
                    if barrier == split_parent(partition, n):
                        what = "split parent"
                    return Gate(
                        open=False,
                        waits_on=(barrier,),
                        reason=f"waits until the group reaches offset {split} of partition "
                        f"{barrier}, its {what} (at {reached})",
                    )
        marked = [x.partition for x in t.partitions if x.marked_for_deletion]
        waits, limit = [], None
        for m in deletion_blockers(partition, marked, n, u):
            probe = self._fetch(md, t, parts[m], positions.get(m, 0), 1)
            reached = max(positions.get(m, 0), probe.log_start_offset)
            if reached >= probe.log_end_offset:
                continue  # drained: nothing can be appended to a marked partition
            epoch = parts[m].leader_epoch_before_deletion.get(str(partition))
            upper = 0 if epoch is None else self._split_offset(md, t, parts[partition], epoch)
            limit = upper if limit is None else min(limit, upper)
            waits.append(m)
        if waits:
            return Gate(
                limit=limit,
                waits_on=tuple(waits),
                reason=f"delivers below offset {limit} until the group has drained partition(s) "
                f"{', '.join(map(str, waits))}, marked for deletion",
            )
        return Gate()

    # -- polling -----------------------------------------------------------------------------

    def poll(self, max_records: int | None = None) -> tuple[list[Delivered], bool]:
        """One round over the assigned partitions: deliver what the gates allow and commit.
        Returns the delivered records and whether something transient held a partition back."""
        self._heartbeat()
        md = self.controller.metadata()
        topics = {t.name: t for t in md.topics}
        view = self.controller.group(self.group)
        delivered: list[Delivered] = []
        transient = False
        self.gates = {}
        for name in sorted(self.assignment):
            t = topics.get(name)
            if t is None:
                continue
            positions = dict(view.offsets.get(name, {}))
            parts = {x.partition: x for x in t.partitions}
            for p in sorted(self.assignment[name]):
                if max_records is not None and len(delivered) >= max_records:
                    return delivered, transient
                if p not in parts:
                    continue  # removed after it was drained
                try:
                    batch = self._poll_partition(md, t, parts[p], positions)
                except _Retry as exc:
                    log.debug("%s-%s: %s", name, p, exc)
                    transient = True
                    continue
                if max_records is not None:
                    batch = batch[: max_records - len(delivered)]
                if batch:
                    if self.sink is not None:
                        self.sink(batch)
                    self._commit(name, p, batch[-1].offset + 1)
                    positions[p] = batch[-1].offset + 1
                    delivered.extend(batch)
        return delivered, transient

    def _poll_partition(self, md, t: TopicMetadata, part, positions) -> list[Delivered]:
        position = positions.get(part.partition)
        resp = self._fetch(md, t, part, position or 0)
        g = self.gate(md, t, part.partition, position, resp.log_start_offset, positions)
        out = []
        for r in resp.records:
            if not g.allows(r.offset):
                break
            out.append(Delivered(t.name, part.partition, r.offset, r.key, r.value))
        if g.waits_on:
            self.gates.setdefault(t.name, {})[part.partition] = g
        return out

    def run(self, max_records: int | None = None, timeout: float = 30.0) -> list[Delivered]:
        """Poll until ``max_records`` are delivered or nothing more can be: every assigned
        partition is at its high watermark or held by a gate that only another member's
        progress can open. Transient refusals are retried for ``timeout`` seconds."""
        if self.member_id is None:
            self.join()
        out: list[Delivered] = []
        deadline = time.monotonic() + timeout
        while max_records is None or len(out) < max_records:
            left = None if max_records is None else max_records - len(out)
            batch, transient = self.poll(left)
            out.extend(batch)
            if batch:
                deadline = time.monotonic() + timeout
                continue
            if transient and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            break
        return out
