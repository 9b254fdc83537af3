"""The simulated controller's HTTP API: the routes over :class:`broker_agent.simulator.controller.Controller`
(its state and rules), signed as every agent route is (:func:`broker_agent.server.web.install`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

import anyio.from_thread
from fastapi import FastAPI, Query
from fastapi.responses import Response

from broker_agent.contract.choices import TieredState
from broker_agent.contract.hashing import murmur2, partition_for_key, to_positive
from broker_agent.contract.metadata_rows import METADATA_TSV_HELP, metadata_tsv
from broker_agent.contract.models import (
    SNAPSHOT_TSV_MEDIA_TYPE,
    AlterConfigsRequest,
    AlterIsrRequest,
    AlterPartitionCountRequest,
    BrokerHeartbeat,
    BrokerInfo,
    ClusterMetadata,
    CreateTopicRequest,
    LogDirEvent,
    PartitionForKeyResponse,
    TieringCommandRequest,
    TopicMetadata,
)
from broker_agent.server.web import install
from broker_agent.simulator.controller import Controller
from broker_agent.simulator.elections import install_election_routes
from broker_agent.simulator.groups import install_group_routes
from broker_agent.simulator.reassignment import install_reassignment_routes
from broker_agent.simulator.sim_controls import install_sim_routes

__all__ = ["create_app"]


def create_app(
    controller_factory,
    secret: bytes,
    *,
    audience: str,
    nonce_path: str | None = None,
    sim_data: str | None = None,
) -> FastAPI:
    """The controller app; ``audience`` is its own ``host:port`` (``signing.audience_of`` of its
    URL), the only target a request signed for it may name. ``nonce_path``: see
    :func:`broker_agent.server.web.install`."""
    state: dict = {}
    drivers: set[asyncio.Task] = set()

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["c"] = controller_factory()
        reaper = asyncio.create_task(state["c"].session_reaper())
        resumer = asyncio.create_task(state["c"].resume_disablements(secret))
        yield
        reaper.cancel()
        resumer.cancel()
        for task in list(drivers):
            task.cancel()

    app = FastAPI(
        title="Strata simulated controller",
        version="1",
        lifespan=lifespan,
        description="KRaft stand-in of the Strata simulated cluster. All requests but /v1/health "
        "are HMAC-signed (see broker_agent/README.md).",
    )
    install(app, secret, audience=audience, nonce_path=nonce_path)

    def c() -> Controller:
        return state["c"]

    @app.get("/v1/health")
    async def health() -> dict:
        return {"status": "ok", "role": "controller", "version": c().version}

    @app.get("/v1/metadata", response_model=ClusterMetadata)
    async def metadata(
        since: int | None = Query(None, ge=-1, le=2**62),
        wait_ms: int = Query(0, ge=0, le=30_000),
        delta: bool = Query(False, description="Partition-level deltas: answered in full here"),
        format: Literal["json", "tsv"] = Query("json", description=METADATA_TSV_HELP),
    ):
        ctl = c()
        if since is not None and ctl.version <= since and wait_ms:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctl._changed.wait(), wait_ms / 1000)
        if since is not None and ctl.version <= since:
            body = dict(cluster_id=ctl.cluster_id, version=ctl.version, brokers=[], topics=[])
            body["changed"] = False
        else:
            body = ctl.metadata()
        if format == "json":
            return body
        md = metadata_tsv(ClusterMetadata.model_validate(body))
        return Response(md, media_type=SNAPSHOT_TSV_MEDIA_TYPE)

    @app.get("/v1/brokers", response_model=list[BrokerInfo])
    async def list_brokers():
        return [c().broker_view(b) for _, b in sorted(c().brokers.items())]

    @app.get("/v1/topics", response_model=list[TopicMetadata])
    async def list_topics():
        return [c().topic_view(t) for _, t in sorted(c().topics.items())]

    @app.post("/v1/topics", response_model=TopicMetadata, status_code=201)
    async def create_topic(req: CreateTopicRequest):
        return c().topic_view(c().create_topic(req))

    @app.get("/v1/topics/{topic}", response_model=TopicMetadata)
    async def get_topic(topic: str):
        return c().topic_view(c().topic(topic))

    @app.post("/v1/topics/{topic}/configs", response_model=TopicMetadata)
    async def alter_configs(topic: str, req: AlterConfigsRequest):
        was = c().topic(topic)["tiered_state"]
        t = c().alter_configs(topic, req)
        now, driver = t["tiered_state"], None
        if req.drive_brokers and now == TieredState.DISABLING:
            driver = c().resume_disablements(secret, only={topic})
        elif req.drive_brokers and (was, now) == (TieredState.DISABLED, TieredState.ENABLED):
            driver = c().drive_enablement(secret, topic)
        if driver is not None:
            task = asyncio.create_task(driver)
            drivers.add(task)  # held until done (the loop keeps only weak references)
            task.add_done_callback(drivers.discard)
        return c().topic_view(t)

    @app.post("/v1/topics/{topic}/tiering/disable", response_model=TopicMetadata)
    async def start_disable(topic: str, req: TieringCommandRequest):
        return c().topic_view(c().start_disable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/complete", response_model=TopicMetadata)
    async def complete_disable(topic: str, req: TieringCommandRequest):
        return c().topic_view(c().complete_disable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/enable", response_model=TopicMetadata)
    async def enable(topic: str, req: TieringCommandRequest):
        return c().topic_view(c().enable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/ack", response_model=TopicMetadata)
    async def ack(
        topic: str,
        broker_id: int = Query(ge=0, le=2**31),
        tiered_epoch: int = Query(ge=0, le=2**31),
    ):
        return c().topic_view(c().ack_disable(topic, broker_id, tiered_epoch))

    @app.post("/v1/topics/{topic}/partition-count", response_model=TopicMetadata)
    async def partition_count(topic: str, req: AlterPartitionCountRequest):
        return c().topic_view(c().alter_partition_count(topic, req))

    @app.get("/v1/topics/{topic}/partition-for-key", response_model=PartitionForKeyResponse)
    async def partition_for(topic: str, key: str = Query(max_length=10_000)):
        t = c().topic(topic)
        raw = key.encode()
        n, u = t["initial_partition_count"], t["undeleted_partition_count"]
        return {
            "topic": topic,
            "key": key,
            "partition": partition_for_key(raw, n, u),
            "hash": to_positive(murmur2(raw)),
            "initial_partition_count": n,
            "undeleted_partition_count": u,
        }

    @app.post("/v1/brokers/heartbeat")
    async def heartbeat(hb: BrokerHeartbeat) -> dict:
        return c().heartbeat(hb)

    @app.post("/v1/brokers/{broker_id}/log-dir-events")
    async def log_dir_event(broker_id: int, ev: LogDirEvent) -> dict:
        return c().log_dir_event(ev)

    @app.post("/v1/brokers/{broker_id}/log-dir-reset")
    async def log_dir_reset(broker_id: int) -> dict:
        return c().log_dir_reset(broker_id)

    @app.post("/v1/partitions/alter-isr")
    async def alter_isr(req: AlterIsrRequest) -> dict:
        return c().alter_isr(req)

    @app.post("/v1/producer-ids")
    async def producer_ids() -> dict:
        return {"producer_id": c().allocate_producer_id()}

    install_group_routes(app, lambda: c().groups)
    install_election_routes(
        app, lambda: c().topics, lambda t, p: c()._offline_replicas(t, p), lambda *t: c()._bump(*t)
    )
    install_reassignment_routes(
        app, lambda: c().topics, lambda: set(c().brokers), lambda *t: c()._bump(*t)
    )
    if sim_data:  # the simulated cluster's process controls (broker_agent.simulator.sim_controls)
        install_sim_routes(app, sim_data, lambda bid: anyio.from_thread.run_sync(c().fence, bid))
    return app
