"""The simulated cluster's data-plane clients: an idempotent producer with KIP-253 linear
hashing, and a consumer that reads from the leaders (the demo load, the CLI and the tests drive
them). Control-plane calls are :mod:`broker_agent.contract.client`'s."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.hashing import partition_for_key
from broker_agent.contract.models import (
    ClusterMetadata,
    FetchedRecord,
    FetchResponse,
    TopicMetadata,
)

__all__ = ["Consumer", "Producer"]


class Producer:
    """An idempotent, acks=all producer with KIP-253 linear hashing.

    Records are grouped per partition and sent as batches with the producer id and a per-
    partition sequence, so a retry after a lost answer or a leader change is appended once.
    ``INVALID_PARTITION_METADATA`` (stale ``undeleted_partition_count``) refreshes metadata and
    re-hashes the batch, as KIP-253 asks of producers.
    """

    def __init__(self, controller: ControllerClient, secret: bytes | str, *, timeout: float = 60.0):
        self.controller = controller
        self.secret = secret
        self.timeout = timeout
        self.producer_id = controller.allocate_producer_id()
        self.sequences: dict[tuple[str, int], int] = {}
        self.agents: dict[str, AgentClient] = {}
        self.metadata: ClusterMetadata = controller.metadata()
        self._rr = itertools.count()

    def close(self) -> None:
        for a in self.agents.values():
            a.close()

    def _agent(self, broker_id: int) -> AgentClient:
        url = next(b.url for b in self.metadata.brokers if b.broker_id == broker_id)
        if url not in self.agents:
            self.agents[url] = AgentClient(url, self.secret, retries=0, timeout=30)
        return self.agents[url]

    def _topic(self, name: str) -> TopicMetadata:
        for t in self.metadata.topics:
            if t.name == name:
                return t
        raise AgentError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)

    def refresh(self) -> None:
        self.metadata = self.controller.metadata()

    def partition_for(self, topic: TopicMetadata, key: str | None) -> int:
        n, u = topic.initial_partition_count, topic.undeleted_partition_count
        if key is None:
            return next(self._rr) % u
        return partition_for_key(key.encode(), n, u)

    def send(self, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
        """Send ``records`` (dicts with key / value); return (partition, offset) per record once
        every one is acknowledged by all in-sync replicas."""
        results: list[tuple[int, int] | None] = [None] * len(records)
        pending = list(range(len(records)))
        deadline = time.monotonic() + self.timeout
        while pending:
            t = self._topic(topic)
            groups: dict[int, list[int]] = {}
            for i in pending:
                groups.setdefault(self.partition_for(t, records[i].get("key")), []).append(i)
            pending = []
            for partition, idxs in groups.items():
                try:
                    offsets = self._send_batch(t, partition, [records[i] for i in idxs], deadline)
                except AgentError as exc:
                    if exc.error != ErrorCode.INVALID_PARTITION_METADATA:
                        raise
                    pending.extend(idxs)
                    self._wait_refresh(deadline)
                    continue
                for i, off in zip(idxs, offsets, strict=True):
                    results[i] = (partition, off)
        return results  # type: ignore[return-value]

    def _wait_refresh(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError("produce timed out")
        time.sleep(0.05)
        self.refresh()

    def _send_batch(
        self, t: TopicMetadata, partition: int, batch: list[dict[str, Any]], deadline: float
    ) -> list[int]:
        key = (t.name, partition)
        seq = self.sequences.get(key, 0)
        while True:
            part = next((p for p in t.partitions if p.partition == partition), None)
            try:
                if part is None or part.leader < 0:
                    raise AgentError(503, ErrorCode.NOT_LEADER_OR_FOLLOWER, "no leader")
                resp = self._agent(part.leader).produce(
                    t.name,
                    partition,
                    batch,
                    producer_id=self.producer_id,
                    base_sequence=seq,
                    undeleted_partition_count=t.undeleted_partition_count,
                )
                self.sequences[key] = seq + len(batch)
                return [resp.base_offset + i for i in range(len(batch))]
            except AgentError as exc:
                if exc.error == ErrorCode.INVALID_PARTITION_METADATA or not exc.retriable:
                    raise
            except httpx.TransportError:
                pass
            self._wait_refresh(deadline)
            t = self._topic(t.name)


class Consumer:
    """Reads partitions from the leaders, from the log start offset up to the high watermark."""

    def __init__(self, controller: ControllerClient, secret: bytes | str):
        self.controller = controller
        self.secret = secret
        self.agents: dict[str, AgentClient] = {}

    def close(self) -> None:
        for a in self.agents.values():
            a.close()

    def _agent(self, md: ClusterMetadata, broker_id: int) -> AgentClient:
        url = next(b.url for b in md.brokers if b.broker_id == broker_id)
        if url not in self.agents:
            self.agents[url] = AgentClient(url, self.secret, retries=0, timeout=30)
        return self.agents[url]

    def fetch_once(
        self, topic: str, partition: int, offset: int, timeout: float = 30.0
    ) -> FetchResponse:
        deadline = time.monotonic() + timeout
        while True:
            md = self.controller.metadata()
            t = next((x for x in md.topics if x.name == topic), None)
            part = next((p for p in t.partitions if p.partition == partition), None) if t else None
            try:
                if part is None or part.leader < 0:
                    raise AgentError(503, ErrorCode.NOT_LEADER_OR_FOLLOWER, "no leader")
                return self._agent(md, part.leader).fetch(topic, partition, offset)
            except AgentError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def read_partition(
        self, topic: str, partition: int, start: int | None = None, until: int | None = None
    ) -> list[FetchedRecord]:
        """All records from ``start`` (default: log start) to the high watermark (or ``until``).

        From the log start: a fetch at 0 is out of range once retention or a delete-policy
        disablement moved the log start offset up; the answer names it and reading goes on from
        there (it used to raise). A start below the log start does the same."""
        out: list[FetchedRecord] = []
        offset = 0 if start is None else start
        while True:
            try:
                resp = self.fetch_once(topic, partition, offset)
            except AgentError as exc:
                lso = exc.body.get("log_start_offset")
                if exc.error == ErrorCode.OFFSET_OUT_OF_RANGE and lso is not None and offset < lso:
                    offset = lso
                    continue
                raise
            out.extend(resp.records)
            offset = resp.next_offset
            target = until if until is not None else resp.high_watermark
            if offset >= target:
                return out

    def read_topic(self, topic: str) -> dict[int, list[FetchedRecord]]:
        t = self.controller.topic(topic)
        return {p.partition: self.read_partition(topic, p.partition) for p in t.partitions}
