"""Replication: the leader's answer to followers' fetches and its ISR changes, and the follower
side — one fetcher thread per leader broker, as in Kafka.

:class:`Replication` is a part of :class:`broker_agent.simulator.broker.Broker`.
"""

from __future__ import annotations

import base64
import threading
import time

import httpx

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.simulator.broker.state import (
    OFFSET_MOVED_TO_TIERED_STORAGE,
    BrokerCore,
    Replica,
    log,
    update_high_watermark,
)
from broker_agent.simulator.storage import PartitionLog, StorageError, decode_batches

__all__ = ["Replication"]


class Replication:
    """Both sides of replication for one broker (module docstring). Owns the fetcher threads
    (``fetchers``, one per leader broker); reads the broker's ``core`` (replicas, broker
    URLs) and sends ISR changes (AlterPartition) with the ``controller`` client."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        controller: ControllerClient,
        secret: bytes,
        replica_lag_time_max_ms: int,
    ):
        self.core = core
        self.controller = controller
        self.secret = secret
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetchers: dict[int, threading.Thread] = {}

    def replica_fetch(self, req: dict) -> dict:
        """Leader side of follower fetching (long-poll up to ``max_wait_ms``)."""
        follower = req["replica_id"]
        deadline = time.monotonic() + min(req.get("max_wait_ms", 500), 2000) / 1000
        while True:
            out, has_data = [], False
            for p in req["partitions"]:
                res = self._replica_fetch_one(follower, p)
                has_data = has_data or bool(res.get("batches")) or bool(res.get("error"))
                out.append(res)
            remaining = deadline - time.monotonic()
            if has_data or remaining <= 0:
                return {"partitions": out}
            with self.core.data_cond:
                self.core.data_cond.wait(min(remaining, 0.2))

    def _replica_fetch_one(self, follower: int, p: dict) -> dict:
        topic, partition, offset = p["topic"], p["partition"], p["fetch_offset"]
        base = {"topic": topic, "partition": partition}
        r = self.core.replicas.get((topic, partition))
        if r is None or r.log is None or r.leader != self.core.broker_id:
            return dict(base, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if p["leader_epoch"] != r.leader_epoch:
            return dict(base, error=ErrorCode.FENCED_LEADER_EPOCH)
        plog = r.log
        leo = plog.log_end_offset
        if offset > leo:
            return dict(base, error=ErrorCode.OFFSET_OUT_OF_RANGE, log_end_offset=leo)
        if offset < plog.local_log_start_offset:
            return dict(
                base,
                error=OFFSET_MOVED_TO_TIERED_STORAGE,
                local_log_start_offset=plog.local_log_start_offset,
                log_start_offset=plog.log_start_offset,
            )
        now = time.monotonic() * 1000
        r.follower_leo[follower] = offset
        if offset >= leo:
            r.caught_up_ms[follower] = now
        update_high_watermark(r, self.core.broker_id)
        self._maybe_expand_isr(r, follower, offset)
        try:
            batches = plog.read(offset, 1 << 20) if offset < leo else []
        except StorageError:
            return dict(base, error=ErrorCode.KAFKA_STORAGE_ERROR)
        return dict(
            base,
            high_watermark=plog.high_watermark,
            log_start_offset=plog.log_start_offset,
            batches=[base64.b64encode(b.to_bytes()).decode() for b in batches],
        )

    def _maybe_expand_isr(self, r: Replica, follower: int, offset: int) -> None:
        if follower in r.isr or r.isr_inflight or follower not in r.replicas:
            return
        epoch_start = r.log.leader_epochs[-1][1] if r.log.leader_epochs else 0
        if offset >= r.log.high_watermark and offset >= epoch_start:
            self._propose_isr(r, [*r.isr, follower])

    def _propose_isr(self, r: Replica, isr: list[int]) -> None:
        r.isr_inflight = True
        r.pending_isr = list(isr)
        body = {
            "topic": r.topic,
            "partition": r.partition,
            "leader_id": self.core.broker_id,
            "leader_epoch": r.leader_epoch,
            "partition_epoch": r.partition_epoch,
            "isr": isr,
        }

        def _send():
            try:
                part = self.controller.request(
                    "POST", "/v1/partitions/alter-isr", body=body, retries=1
                )
                with self.core.lock:
                    # a newer leader epoch: the controller moved leadership in this change (a
                    # reassignment completed); the pending ISR holds until the metadata says so
                    if part["leader_epoch"] == r.leader_epoch:
                        r.isr, r.partition_epoch = part["isr"], part["partition_epoch"]
                        r.pending_isr = []
                        update_high_watermark(r, self.core.broker_id)
            except (AgentError, httpx.HTTPError) as exc:
                log.info("AlterPartition %s-%s failed: %s", r.topic, r.partition, exc)
                r.pending_isr = []
            finally:
                r.isr_inflight = False

        threading.Thread(target=_send, daemon=True).start()

    def maybe_shrink_isr(self, r: Replica) -> None:
        now = time.monotonic() * 1000
        lagging = [
            b
            for b in r.isr
            if b != self.core.broker_id
            and now - r.caught_up_ms.get(b, r.became_leader_ms) > self.replica_lag_time_max_ms
        ]
        if lagging and not r.isr_inflight:
            self._propose_isr(r, [b for b in r.isr if b not in lagging])

    def ensure_fetchers(self) -> None:
        with self.core.lock:
            leaders = {
                r.leader
                for r in self.core.replicas.values()
                if r.online and r.leader not in (-1, self.core.broker_id)
            }
            for leader in leaders:
                th = self.fetchers.get(leader)
                if th is None or not th.is_alive():
                    th = threading.Thread(
                        target=self._fetcher_loop,
                        args=(leader,),
                        name=f"fetcher-{leader}",
                        daemon=True,
                    )
                    self.fetchers[leader] = th
                    th.start()

    def _fetcher_loop(self, leader: int) -> None:
        client: AgentClient | None = None
        url = None
        idle = 0
        while not self.core.stopped.is_set():
            with self.core.lock:
                parts = [
                    r
                    for r in self.core.replicas.values()
                    if r.online and r.leader == leader and r.leader != self.core.broker_id
                ]
                leader_url = self.core.broker_urls.get(leader)
            if not parts or leader_url is None:
                idle += 1
                if idle > 50:
                    return
                time.sleep(0.1)
                continue
            idle = 0
            if url != leader_url:
                if client:
                    client.close()
                client, url = (
                    AgentClient(leader_url, self.secret, retries=0, timeout=10),
                    leader_url,
                )
            try:
                self._fetch_round(client, parts)
            except (AgentError, httpx.HTTPError) as exc:
                log.debug("fetch from %s failed: %s", leader, exc)
                time.sleep(0.2)
            except StorageError:
                time.sleep(0.05)

    def _fetch_round(self, client: AgentClient, parts: list[Replica]) -> None:
        """One fetch for ``parts``. ``Replica.log`` is set to None by other threads (a log dir
        fails, the replica moves or is deleted), so each replica's log is read once into a local
        and that object is used throughout; reading ``r.log`` again after a network round trip
        was the fetcher's ``AttributeError: 'NoneType' object has no attribute
        'log_end_offset'``. Work on a log taken away meanwhile is harmless: its answer is
        dropped below, and its storage raises StorageError if its directory failed."""
        logs: dict[tuple[str, int], tuple[Replica, PartitionLog]] = {}
        for r in parts:
            plog = r.log
            if plog is None:
                continue
            if r.needs_truncation:
                epoch = plog.latest_epoch
                if epoch >= 0:
                    res = client.request(
                        "GET",
                        f"/v1/replica/{r.topic}/{r.partition}/offsets-for-leader-epoch",
                        params={"leader_epoch": epoch},
                        retries=0,
                    )
                    end = res["end_offset"]
                    # Truncate to the leader's end offset for our latest epoch (KIP-101).
                    if 0 <= end < plog.log_end_offset:
                        log.info("truncating %s-%s to %s", r.topic, r.partition, end)
                        plog.truncate_to(end)
                r.needs_truncation = False
            logs[(r.topic, r.partition)] = (r, plog)
        req = {
            "replica_id": self.core.broker_id,
            "max_wait_ms": 500,
            "partitions": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "fetch_offset": plog.log_end_offset,
                    "leader_epoch": r.leader_epoch,
                }
                for r, plog in logs.values()
                if not r.needs_truncation
            ],
        }
        if not req["partitions"]:
            time.sleep(0.05)
            return
        resp = client.request("POST", "/v1/replica/fetch", body=req, retries=0, timeout=10)
        errors = 0
        for res in resp["partitions"]:
            r, plog = logs.get((res["topic"], res["partition"]), (None, None))
            if r is None or r.log is not plog:
                continue  # not asked for, or its log taken away while the fetch was in flight
            err = res.get("error")
            if err == OFFSET_MOVED_TO_TIERED_STORAGE:
                plog.truncate_fully_and_start_at(res["local_log_start_offset"])
                plog.advance_log_start_offset(res["log_start_offset"])
                continue
            if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                plog.truncate_to(res["log_end_offset"])
                continue
            if err:
                errors += 1
                continue
            for b64 in res["batches"]:
                for _, batch in decode_batches(base64.b64decode(b64)):
                    if batch.base_offset == plog.log_end_offset:
                        plog.append(batch, assign_offsets=False)
            with r.cond:
                plog.high_watermark = max(
                    plog.high_watermark, min(res["high_watermark"], plog.log_end_offset)
                )
            if res["log_start_offset"] > plog.log_start_offset:
                plog.advance_log_start_offset(min(res["log_start_offset"], plog.log_end_offset))
        if errors == len(resp["partitions"]):
            time.sleep(0.1)
