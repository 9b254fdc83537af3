"""Typed HTTP clients for the agent and the controller (httpx + tenacity); the data-plane
producer and consumer the CLI, the tests and the benchmarks drive are :mod:`broker_agent.contract.producer`.

Every request is HMAC-signed (:mod:`broker_agent.contract.signing`) for its audience, the ``host:port``
of the client's base URL: an agent or the controller refuses a request meant for another one, so
use the URL the target advertises (the controller's metadata has every agent's). Transport errors
are retried with exponential backoff; every mutating call is safe to retry (idempotency keys,
producer sequence numbers, expected epochs).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Self, TypeVar
from urllib.parse import urlencode

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.models import (
    BrokerInfo,
    BrokerSnapshot,
    ClusterMetadata,
    CommandResult,
    FetchResponse,
    GroupAssignment,
    GroupView,
    LogDirInfo,
    LogDirRemovalPlan,
    PartitionStateRow,
    ProduceResponse,
    RecreateStatus,
    RemoteSegmentRow,
    TopicMetadata,
)
from broker_agent.contract.signing import audience_of, sign_headers

__all__ = ["AgentClient", "AgentError", "ControllerClient", "gc_paused"]

_T = TypeVar("_T")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Parse large answers (200,000 partitions) with the cyclic GC paused: the millions of
    short-lived objects otherwise trigger collections that cost more than the parse itself.
    Threads that pause it at once leave it enabled when the last that found it enabled is done
    (the console's Kafka source pauses it too)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class AgentError(Exception):
    """A non-2xx answer: ``status``, KIP ``error`` code and ``message``."""

    def __init__(self, status: int, error: str, message: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.body = body or {}

    @property
    def retriable(self) -> bool:
        return self.error in ErrorCode.RETRIABLE or self.status >= 500


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default verification context (its CA bundle, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``), built once per process: building it is most of the cost of a client
    (16 ms of a 17 ms call), and a workflow fan-out makes one client per broker (#17)."""
    return httpx.create_ssl_context()


class _SignedClient:
    def __init__(
        self,
        base_url: str,
        secret: bytes | str,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        try:
            self.audience: str | None = audience_of(self.base_url)
        except ValueError:  # not an http(s) URL: httpx refuses it when a request is sent
            self.audience = None
        self.secret = secret
        self.retries = retries
        self._http = httpx.Client(timeout=timeout, transport=transport, verify=_ssl_context())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def signed_headers(self, method: str, target: str, body: bytes = b"") -> dict[str, str]:
        """Signature headers for ``method`` on ``target`` (path below the base URL, with its
        query) carrying ``body``, for callers that send the request themselves (a stream)."""
        path = httpx.URL(self.base_url + target).raw_path.decode()
        return sign_headers(self.secret, method, path, body, audience=self.audience)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: object | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """The JSON answer (``raw``: the ``httpx.Response``); a non-2xx answer raises
        :class:`AgentError`."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.base_url + path + (f"?{urlencode(query)}" if query else "")
        content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()

        def _once() -> httpx.Response:
            req = self._http.build_request(
                method,
                url,
                content=content,
                headers={"Content-Type": "application/json"} if body is not None else None,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
            req.headers.update(
                sign_headers(
                    self.secret, method, req.url.raw_path.decode(), content, audience=self.audience
                )
            )
            return self._http.send(req)

        attempts = (self.retries if retries is None else retries) + 1
        for attempt in Retrying(
            retry=retry_if_exception_type(httpx.TransportError),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        ):
            with attempt:
                resp = _once()
        if resp.status_code >= 400:
            try:
                payload = resp.json()
            except ValueError:
                payload = {"error": ErrorCode.INTERNAL_ERROR, "message": resp.text[:500]}
            raise AgentError(
                resp.status_code,
                payload.get("error", f"HTTP_{resp.status_code}"),
                payload.get("message", ""),
                payload,
            )
        return resp if raw else resp.json()


class ControllerClient(_SignedClient):
    """The simulated controller's API (cluster metadata, KRaft stand-in)."""

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def metadata(
        self, since: int | None = None, wait_ms: int = 0, *, delta: bool = False
    ) -> ClusterMetadata:
        """Cluster metadata; ``changed=False`` when nothing moved after ``since``.

        ``delta=True`` asks for a partition-level delta (``full=False``: only changed partitions
        of changed topics, see :class:`~broker_agent.contract.models.ClusterMetadata`); a controller that
        cannot (the real simulated one, or a ``since`` it does not know) answers in full
        (``full=True``), so callers must look at ``full``.
        """
        timeout = 30.0 + wait_ms / 1000
        resp = self.request(
            "GET",
            "/v1/metadata",
            params={"since": since, "wait_ms": wait_ms or None, "delta": "true" if delta else None},
            timeout=timeout,
            raw=True,
        )
        with gc_paused():
            return ClusterMetadata.model_validate_json(resp.content)

    def brokers(self) -> list[BrokerInfo]:
        """Every broker with its log dirs: ``/v1/metadata``'s brokers without the topics."""
        return [BrokerInfo.model_validate(b) for b in self.request("GET", "/v1/brokers")]

    def topics(self) -> list[TopicMetadata]:
        return [TopicMetadata.model_validate(t) for t in self.request("GET", "/v1/topics")]

    def topic(self, name: str) -> TopicMetadata:
        return TopicMetadata.model_validate(self.request("GET", f"/v1/topics/{name}"))

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, Any] | None = None,
    ) -> TopicMetadata:
        return TopicMetadata.model_validate(
            self.request(
                "POST",
                "/v1/topics",
                body={
                    "name": name,
                    "partitions": partitions,
                    "replication_factor": replication_factor,
                    "configs": configs or {},
                },
                retries=0,
            )
        )

    def alter_configs(
        self,
        topic: str,
        configs: dict[str, Any],
        expected_tiered_epoch: int | None = None,
        *,
        drive_brokers: bool = False,
    ) -> TopicMetadata:
        body: dict[str, Any] = {"configs": configs, "expected_tiered_epoch": expected_tiered_epoch}
        if drive_brokers:
            body["drive_brokers"] = True
        return TopicMetadata.model_validate(
            self.request("POST", f"/v1/topics/{topic}/configs", body=body)
        )

    def start_disable(
        self, topic: str, policy: str | None = None, expected_tiered_epoch: int | None = None
    ) -> TopicMetadata:
        return TopicMetadata.model_validate(
            self.request(
                "POST",
                f"/v1/topics/{topic}/tiering/disable",
                body={"policy": policy, "expected_tiered_epoch": expected_tiered_epoch},
            )
        )

    def complete_disable(
        self, topic: str, expected_tiered_epoch: int | None = None
    ) -> TopicMetadata:
        return TopicMetadata.model_validate(
            self.request(
                "POST",
                f"/v1/topics/{topic}/tiering/complete",
                body={"expected_tiered_epoch": expected_tiered_epoch},
            )
        )

    def enable(self, topic: str, expected_tiered_epoch: int | None = None) -> TopicMetadata:
        return TopicMetadata.model_validate(
            self.request(
                "POST",
                f"/v1/topics/{topic}/tiering/enable",
                body={"expected_tiered_epoch": expected_tiered_epoch},
            )
        )

    def ack_disable(self, topic: str, broker_id: int, tiered_epoch: int) -> dict[str, Any]:
        return self.request(
            "POST",
            f"/v1/topics/{topic}/tiering/ack",
            params={"broker_id": broker_id, "tiered_epoch": tiered_epoch},
        )

    def alter_partition_count(
        self, topic: str, undeleted_partition_count: int, *, increase_only: bool = False
    ) -> TopicMetadata:
        """KIP-253's expand or shrink; ``increase_only`` is Kafka's CreatePartitions (a count
        that does not grow is INVALID_PARTITIONS)."""
        body: dict[str, Any] = {"undeleted_partition_count": undeleted_partition_count}
        if increase_only:
            body["increase_only"] = True
        return TopicMetadata.model_validate(
            self.request("POST", f"/v1/topics/{topic}/partition-count", body=body)
        )

    def elect_leaders(
        self, election_type: str, partitions: dict[str, list[int]] | None
    ) -> dict[str, dict[int, str | None]]:
        """Kafka's ElectLeaders (``PREFERRED`` or ``UNCLEAN``, :mod:`broker_agent.simulator.elections`):
        ``{topic: {partition: error code or None}}``, None where a new leader was elected.
        ``partitions`` None asks for every partition (those not needing one are left out)."""
        body = {
            "election_type": election_type,
            "partitions": None
            if partitions is None
            else [{"topic": t, "partitions": ps} for t, ps in partitions.items()],
        }
        answer = self.request("POST", "/v1/partitions/elect-leaders", body=body)
        return {
            r["topic"]: {int(p["partition"]): p["error"] for p in r["partitions"]}
            for r in answer["results"]
        }

    def partition_for_key(self, topic: str, key: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/topics/{topic}/partition-for-key", params={"key": key})

    def log_dir_reset(self, broker_id: int) -> dict[str, Any]:
        return self.request("POST", f"/v1/brokers/{broker_id}/log-dir-reset")

    def sim_controls(self) -> dict[str, Any]:
        """The simulated cluster's process controls (``{"restart_broker": true}``); ``{}``
        from a controller that offers none (it answers 404)."""
        try:
            return self.request("GET", "/v1/sim/controls")
        except AgentError as exc:
            if exc.status in (404, 405):
                return {}
            raise

    def restart_broker(self, broker_id: int, expected_incarnation: str | None) -> dict[str, Any]:
        """Restart a simulated broker's process unless it no longer runs
        ``expected_incarnation`` (restarted since): ``broker_agent.simulator.sim_controls``."""
        return self.request(
            "POST",
            f"/v1/sim/brokers/{broker_id}/restart",
            body={"expected_incarnation": expected_incarnation},
            timeout=90,
        )

    def allocate_producer_id(self) -> int:
        return self.request("POST", "/v1/producer-ids")["producer_id"]

    # -- consumer groups (broker_agent.simulator.groups) ---------------------------------------------------

    def groups(self, topic: str | None = None) -> list[GroupView]:
        """Every consumer group, or those with positions on ``topic`` or subscribing to it."""
        listed = self.request("GET", "/v1/groups", params={"topic": topic})
        return [GroupView.model_validate(g) for g in listed]

    def group_changes_tsv(self, since: int | None = None) -> bytes:
        """The groups changed after ``since`` as rows, as the coordinator sent them (see
        ``models.group_changes_tsv``; ``models.split_group_tsv`` reads it)."""
        params = {"since": since, "format": "tsv"}
        return self.request("GET", "/v1/groups", params=params, timeout=30.0, raw=True).content

    def group(self, group: str) -> GroupView:
        return GroupView.model_validate(self.request("GET", f"/v1/groups/{group}"))

    def join_group(
        self, group: str, topics: list[str], member_id: str | None = None
    ) -> GroupAssignment:
        return GroupAssignment.model_validate(
            self.request(
                "POST",
                f"/v1/groups/{group}/join",
                body={"member_id": member_id, "topics": topics},
            )
        )

    def group_heartbeat(self, group: str, member_id: str) -> GroupAssignment:
        return GroupAssignment.model_validate(
            self.request("POST", f"/v1/groups/{group}/heartbeat", body={"member_id": member_id})
        )

    def leave_group(self, group: str, member_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/groups/{group}/leave", body={"member_id": member_id})

    def commit_offsets(
        self, group: str, member_id: str, generation: int, offsets: dict[str, dict[int, int]]
    ) -> dict[str, Any]:
        return self.request(
            "POST",
            f"/v1/groups/{group}/commit",
            body={
                "member_id": member_id,
                "generation": generation,
                "offsets": {
                    t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()
                },
            },
        )

    def wait_for(
        self,
        predicate: Callable[[ClusterMetadata], _T],
        timeout: float = 30.0,
        interval: float = 0.1,
    ) -> _T:
        """Poll metadata until ``predicate(metadata)`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.metadata()
            value = predicate(last)
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(
            f"condition not met within {timeout}s (metadata v{last and last.version})"
        )


class AgentClient(_SignedClient):
    """One broker agent's API."""

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def snapshot(self, since: int | None = None) -> BrokerSnapshot:
        resp = self.request("GET", "/v1/snapshot", params={"since": since}, raw=True)
        with gc_paused():
            return BrokerSnapshot.model_validate_json(resp.content)

    def snapshot_tsv(self, since: int | None = None) -> bytes:
        """The snapshot in ``format=tsv`` as the agent sent it (see ``models.snapshot_tsv``;
        ``models.split_snapshot_tsv`` reads it)."""
        return self.request(
            "GET", "/v1/snapshot", params={"since": since, "format": "tsv"}, raw=True
        ).content

    def disable_remote_topic(
        self,
        topic: str,
        topic_id: str,
        tiered_epoch: int,
        policy: str | None = None,
        idempotency_key: str | None = None,
    ) -> CommandResult:
        return CommandResult.model_validate(
            self.request(
                "POST",
                "/v1/commands/disable-remote-topic",
                body={
                    "topic": topic,
                    "topic_id": topic_id,
                    "tiered_epoch": tiered_epoch,
                    "policy": policy,
                    "idempotency_key": idempotency_key or uuid.uuid4().hex,
                },
            )
        )

    def enable_remote_topic(
        self, topic: str, topic_id: str, tiered_epoch: int, idempotency_key: str | None = None
    ) -> CommandResult:
        return CommandResult.model_validate(
            self.request(
                "POST",
                "/v1/commands/enable-remote-topic",
                body={
                    "topic": topic,
                    "topic_id": topic_id,
                    "tiered_epoch": tiered_epoch,
                    "idempotency_key": idempotency_key or uuid.uuid4().hex,
                },
            )
        )

    def log_dirs(self) -> list[LogDirInfo]:
        return [LogDirInfo.model_validate(d) for d in self.request("GET", "/v1/log-dirs")]

    def cordon_log_dir(self, name: str) -> LogDirInfo:
        """KIP-1066 cordon: no new replica is placed on the dir; its replicas keep serving."""
        return LogDirInfo.model_validate(self.request("POST", f"/v1/log-dirs/{name}/cordon"))

    def uncordon_log_dir(self, name: str) -> LogDirInfo:
        """Lift a cordon: the dir takes new replicas again."""
        return LogDirInfo.model_validate(self.request("DELETE", f"/v1/log-dirs/{name}/cordon"))

    def probe_log_dir(self, name: str) -> LogDirInfo:
        """Simulator-only: probe a dir now. A failed dir stays OFFLINE until the broker
        restarts (as in Kafka); ``probe_latency_ms`` says whether its disk works again."""
        return LogDirInfo.model_validate(self.request("POST", f"/v1/sim/log-dirs/{name}/probe"))

    def incarnation(self) -> str | None:
        """The broker process's incarnation (new at every start; ``/v1/health``)."""
        return self.health().get("incarnation")

    def log_dir_removal_plan(self, name: str) -> LogDirRemovalPlan:
        """Space needed vs usable per good dir if ``name`` were removed (changes nothing)."""
        return LogDirRemovalPlan.model_validate(
            self.request("GET", f"/v1/log-dirs/{name}/removal-plan")
        )

    def remove_log_dir(self, name: str, *, dry_run: bool = False) -> LogDirRemovalPlan:
        """Remove a bad dir from the broker's configuration; ``AgentError`` with
        ``INSUFFICIENT_SPACE`` (``body["plan"]``), ``LOG_DIR_NOT_OFFLINE`` or ``LAST_LOG_DIR``
        when refused."""
        return LogDirRemovalPlan.model_validate(
            self.request(
                "POST",
                f"/v1/log-dirs/{name}/remove",
                params={"dry_run": "true" if dry_run else None},
                retries=0,
            )
        )

    def log_dir_reset(self) -> dict[str, Any]:
        return self.request("POST", "/v1/log-dir-reset")

    def recreate_status(self) -> RecreateStatus:
        return RecreateStatus.model_validate(self.request("GET", "/v1/recreate-status"))

    def produce(
        self,
        topic: str,
        partition: int,
        records: list[dict[str, Any]],
        *,
        producer_id: int = -1,
        base_sequence: int = -1,
        undeleted_partition_count: int | None = None,
        acks: int = -1,
        timeout_ms: int = 15_000,
    ) -> ProduceResponse:
        body = {
            "topic": topic,
            "partition": partition,
            "records": records,
            "acks": acks,
            "producer_id": producer_id,
            "base_sequence": base_sequence,
            "undeleted_partition_count": undeleted_partition_count,
            "timeout_ms": timeout_ms,
        }
        return ProduceResponse.model_validate(
            self.request(
                "POST", "/v1/produce", body=body, retries=0, timeout=timeout_ms / 1000 + 10
            )
        )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 5000,
        *,
        undeleted_partition_count: int | None = None,
    ) -> FetchResponse:
        params = {"offset": offset, "max_records": max_records}
        if undeleted_partition_count is not None:
            params["undeleted_partition_count"] = undeleted_partition_count
        return FetchResponse.model_validate(
            self.request(
                "GET", f"/v1/partitions/{topic}/{partition}/records", params=params, retries=0
            )
        )

    def offsets_for_leader_epoch(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        *,
        undeleted_partition_count: int | None = None,
    ) -> dict[str, Any]:
        """OffsetsForLeaderEpoch on the leader: ``{leader_epoch, end_offset}``."""
        params = {"leader_epoch": leader_epoch}
        if undeleted_partition_count is not None:
            params["undeleted_partition_count"] = undeleted_partition_count
        return self.request(
            "GET",
            f"/v1/replica/{topic}/{partition}/offsets-for-leader-epoch",
            params=params,
            retries=0,
        )

    def roll(self, topic: str, partition: int) -> dict[str, Any]:
        return self.request("POST", f"/v1/partitions/{topic}/{partition}/roll")

    def publish_log_start_offset(
        self, topic: str, partition: int, log_start_offset: int
    ) -> dict[str, Any]:
        return self.request(
            "POST",
            f"/v1/partitions/{topic}/{partition}/log-start-offset",
            body={"log_start_offset": log_start_offset},
        )

    def mark_segment(self, segment_id: str, state: str) -> RemoteSegmentRow:
        return RemoteSegmentRow.model_validate(
            self.request("POST", f"/v1/remote/segments/{segment_id}/state", body={"state": state})
        )

    def inventory(
        self, topic: str | None = None, page_size: int = 1000
    ) -> Iterator[RemoteSegmentRow]:
        """Every remote segment metadata record, paged (``next_offset`` cursor)."""
        offset = 0
        while True:
            page = self.request(
                "GET",
                "/v1/remote/inventory",
                params={"topic": topic, "offset": offset, "limit": page_size},
            )
            for row in page["rows"]:
                yield RemoteSegmentRow.model_validate(row)
            if page["next_offset"] is None:
                return
            offset = page["next_offset"]

    def partition_states(self, topic: str | None = None) -> list[PartitionStateRow]:
        return [
            PartitionStateRow.model_validate(r)
            for r in self.request("GET", "/v1/remote/partition-states", params={"topic": topic})
        ]

    def set_expiration_mode(self, mode: str) -> dict[str, Any]:
        return self.request("PUT", "/v1/remote/expiration-mode", body={"mode": mode})
