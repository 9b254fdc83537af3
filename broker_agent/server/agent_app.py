"""The broker agent's HTTP API (FastAPI), versioned under ``/v1``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Annotated, Literal

from fastapi import Body, FastAPI, Query
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import Response, StreamingResponse

from broker_agent.contract.choices import ErrorCode, ExpirationMode
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import (
    SNAPSHOT_TSV_MEDIA_TYPE,
    BrokerSnapshot,
    CommandResult,
    FetchResponse,
    LogDirInfo,
    LogDirRemovalPlan,
    LogStartOffsetRequest,
    PartitionStateRow,
    ProduceRequest,
    ProduceResponse,
    RecreateStatus,
    RemoteSegmentRow,
    RemoteTopicCommand,
    SegmentStateRequest,
    snapshot_tsv,
)
from broker_agent.server.web import install

__all__ = ["create_app"]

INT = {"ge": 0, "le": 2**31 - 1}
TOPIC = {"min_length": 1, "max_length": 249}


def create_app(
    broker_factory,
    secret: bytes,
    *,
    audience: str,
    nonce_path: str | None = None,
    kafka_listener: tuple[str, int] | None = None,
) -> FastAPI:
    """The agent app; ``audience`` is its own ``host:port`` (``signing.audience_of`` of the URL
    it advertises), the only target a request signed for it may name. ``nonce_path`` keeps the
    replay cache across restarts (see :func:`broker_agent.server.web.install`). ``kafka_listener``
    (``(host, port)``): the broker also answers Kafka's protocol there
    (:mod:`broker_agent.kafka_wire`), on the same event loop. The running broker is
    ``app.state.broker``."""

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        b = broker_factory()
        b.start()
        _app.state.broker = b
        opening = None
        if kafka_listener is not None:
            from broker_agent.kafka_wire import open_when_caught_up

            opening = asyncio.create_task(open_when_caught_up(b, *kafka_listener))
        yield
        if opening is not None:
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                server = await opening
                server.close()
        b.stopped.set()

    app = FastAPI(
        title="Strata broker agent",
        version="1",
        lifespan=lifespan,
        description="One agent per broker. All requests but /v1/health are HMAC-signed "
        "(X-Strata-Timestamp, X-Strata-Nonce, X-Strata-Audience, X-Strata-Signature; see "
        "broker_agent/README.md).",
    )
    app.add_middleware(GZipMiddleware, minimum_size=2048)
    install(app, secret, audience=audience, nonce_path=nonce_path)

    def b():
        return app.state.broker

    @app.get("/v1/health")
    def health() -> dict:
        return {
            "status": "ok",
            "role": "broker",
            "broker_id": b().broker_id,
            "online": b().log_dirs.online,
            "incarnation": b().incarnation,
            "started_ms": b().started_ms,
            "kafka_listener_serving": b().kafka_listener_serving,
        }

    @app.get(
        "/v1/snapshot",
        response_model=BrokerSnapshot,
        responses={200: {"content": {SNAPSHOT_TSV_MEDIA_TYPE: {}}}},
    )
    def snapshot(
        since: int | None = Query(None, ge=0, le=2**62),
        format: Literal["json", "tsv"] = Query(
            "json",
            description="json (default): a BrokerSnapshot. tsv: line 1 the snapshot without "
            "its replicas as JSON plus replica_columns, then one replica per line in "
            "PostgreSQL COPY text format (what the console's sync loads).",
        ),
    ):
        snap = b().snapshots.take(since)
        if format == "tsv":  # the broker answers a dict: validated as the JSON answer would be
            body = snapshot_tsv(BrokerSnapshot.model_validate(snap))
            return Response(body, media_type=SNAPSHOT_TSV_MEDIA_TYPE)
        return snap

    @app.post("/v1/commands/disable-remote-topic", response_model=CommandResult)
    def disable_remote_topic(cmd: RemoteTopicCommand):
        return b().tiering.disable_remote_topic(cmd)

    @app.post("/v1/commands/enable-remote-topic", response_model=CommandResult)
    def enable_remote_topic(cmd: RemoteTopicCommand):
        if cmd.policy is not None:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "re-enablement takes no policy")
        return b().tiering.enable_remote_topic(cmd)

    @app.get("/v1/log-dirs", response_model=list[LogDirInfo])
    def log_dirs():
        dirs = b().log_dirs
        return [dirs.info(d) for d in dirs.dirs.values()]

    @app.post("/v1/log-dirs/{name}/cordon", response_model=LogDirInfo)
    def cordon(name: str):
        """KIP-1066 ``cordoned.log.dirs``: no new replica is placed on the dir; its replicas
        keep serving and its state is unchanged. Persisted; idempotent."""
        return b().log_dirs.cordon(name)

    @app.delete("/v1/log-dirs/{name}/cordon", response_model=LogDirInfo)
    def uncordon(name: str):
        """Lift the cordon: the dir takes new replicas again. Idempotent."""
        return b().log_dirs.cordon(name, cordoned=False)

    @app.post("/v1/sim/log-dirs/{name}/probe", response_model=LogDirInfo)
    def probe(name: str):
        """Simulator-only control (no Kafka counterpart): probe the dir now. A failed dir stays
        OFFLINE until the broker restarts, as in Kafka; ``probe_latency_ms`` says whether its
        disk works again."""
        return b().log_dirs.reprobe(name)

    @app.get("/v1/log-dirs/{name}/removal-plan", response_model=LogDirRemovalPlan)
    def removal_plan(name: str):
        """Check (never changes anything): the replicas that must move if ``name`` is removed
        from the broker's configuration, sized by their leaders, placed on the good dirs, and
        per good dir the space needed vs usable. ``removable`` / ``error`` say whether
        ``POST .../remove`` would succeed."""
        return b().log_dirs.removal_plan(name)

    @app.post("/v1/log-dirs/{name}/remove", response_model=LogDirRemovalPlan)
    def remove_log_dir(name: str, dry_run: bool = Query(False)):
        """KIP-112 recovery, option 2: remove a bad (OFFLINE) dir from the broker's
        configuration, persisted. Refused with 409 ``INSUFFICIENT_SPACE`` (body: ``plan``) when
        the good dirs lack usable space for its replicas, 409 ``LOG_DIR_NOT_OFFLINE``, 400
        ``LAST_LOG_DIR``. Then LogDirReset re-creates the replicas on the planned good dirs.
        ``dry_run=true`` answers the plan (or the refusal) and changes nothing."""
        return b().log_dirs.remove(name, dry_run)

    @app.post("/v1/log-dir-reset")
    def log_dir_reset() -> dict:
        """KIP-112 LogDirReset for this broker, sent to the controller; replicas missing from
        good dirs are then re-created and catch up (progress: /v1/recreate-status)."""
        return b().controller.log_dir_reset(b().broker_id)

    @app.get("/v1/recreate-status", response_model=RecreateStatus)
    def recreate_status():
        return b().snapshots.recreate_status()

    @app.post("/v1/produce", response_model=ProduceResponse)
    def produce(req: ProduceRequest):
        return b().partitions.produce(req)

    @app.get("/v1/partitions/{topic}/{partition}/records", response_model=FetchResponse)
    def fetch(
        topic: str,
        partition: int,
        offset: int = Query(0, ge=0, le=2**62),
        max_records: int = Query(5000, ge=1, le=100_000),
        undeleted_partition_count: int | None = Query(None, ge=1, le=1_000_000),
    ):
        """Records from ``offset`` up to the high watermark. ``undeleted_partition_count``
        (KIP-253 consumers): refused with INVALID_PARTITION_METADATA unless it is the leader's."""
        return b().partitions.fetch(
            topic, partition, offset, max_records, undeleted_partition_count
        )

    @app.post("/v1/partitions/{topic}/{partition}/roll")
    def roll(topic: str, partition: int) -> dict:
        return b().partitions.roll(topic, partition)

    @app.post("/v1/partitions/{topic}/{partition}/log-start-offset")
    def log_start_offset(topic: str, partition: int, req: LogStartOffsetRequest) -> dict:
        return b().partitions.publish_log_start_offset(topic, partition, req.log_start_offset)

    @app.post("/v1/replica/fetch", include_in_schema=False)
    def replica_fetch(req: Annotated[dict, Body()]) -> dict:
        try:
            return b().replication.replica_fetch(req)
        except (KeyError, TypeError):
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "malformed replica fetch") from None

    @app.get("/v1/replica/{topic}/{partition}/offsets-for-leader-epoch")
    def offsets_for_leader_epoch(
        topic: str,
        partition: int,
        leader_epoch: int = Query(ge=0, le=2**31),
        undeleted_partition_count: int | None = Query(None, ge=1, le=1_000_000),
    ) -> dict:
        return b().partitions.offsets_for_leader_epoch(
            topic, partition, leader_epoch, undeleted_partition_count
        )

    @app.get("/v1/remote/inventory")
    def inventory(
        topic: str | None = Query(None, max_length=249),
        offset: int = Query(0, ge=0, le=2**62),
        limit: int = Query(1000, ge=1, le=100_000),
        format: str = Query("json", pattern="^(json|ndjson)$"),
    ):
        """Remote-segment inventory (DESIGN.md schema). ``format=json`` pages with
        ``offset``/``limit`` and returns ``next_offset``; ``format=ndjson`` streams every row."""
        rows = b().tiering.inventory(topic)
        if format == "ndjson":
            return StreamingResponse(
                (json.dumps(r) + "\n" for r in rows), media_type="application/x-ndjson"
            )
        page = []
        for i, row in enumerate(rows):
            if i < offset:
                continue
            if len(page) == limit:
                return {"rows": page, "next_offset": i}
            page.append(RemoteSegmentRow.model_validate(row).model_dump())
        return {"rows": page, "next_offset": None}

    @app.get("/v1/remote/partition-states", response_model=list[PartitionStateRow])
    def partition_states(topic: str | None = Query(None, max_length=249)):
        return b().tiering.partition_states(topic)

    @app.post("/v1/remote/segments/{segment_id}/state", response_model=RemoteSegmentRow)
    def mark_segment(segment_id: str, req: SegmentStateRequest):
        return b().tiering.mark_segment(segment_id, req.state)

    @app.put("/v1/remote/expiration-mode")
    def expiration_mode(body: Annotated[dict, Body(examples=[{"mode": "external"}])]) -> dict:
        mode = body.get("mode") if isinstance(body, dict) else None
        if mode not in ExpirationMode.ALL:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "mode must be internal or external")
        b().tiering.expiration_mode = mode
        return {"mode": mode}

    return app
