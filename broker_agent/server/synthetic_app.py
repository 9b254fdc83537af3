"""The synthetic scale mode's HTTP app: the routes of :mod:`broker_agent.simulator.synthetic` (whose
docstring lists them) over one :class:`~broker_agent.simulator.synthetic.SyntheticCluster`, signed as the
real controller's and agents' (:func:`broker_agent.server.web.install`), with the KIP-950 routes of
:mod:`broker_agent.simulator.synthetic_tiering`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import SNAPSHOT_TSV_MEDIA_TYPE, AlterPartitionCountRequest
from broker_agent.contract.signing import audience_of
from broker_agent.kafka_wire.synthetic import SyntheticKafka
from broker_agent.server.web import PUBLIC_PATHS, install
from broker_agent.simulator.synthetic import SyntheticCluster, fleet_topic_sizes
from broker_agent.simulator.synthetic_groups import DEFAULT_FLEET_GROUPS, SyntheticGroups
from broker_agent.simulator.synthetic_tiering import install_tiering_routes

__all__ = ["create_app"]


def create_app(
    secret: bytes,
    *,
    cluster_id: str,
    brokers: int,
    log_dirs: int,
    topics: int,
    partitions_per_topic: int,
    base_url: str,
    tick_interval: float = 5.0,
    nonce_path: str | None = None,
    fleet_partitions: int | None = None,
    groups: int | None = None,
    kafka_listeners: list[tuple[str, int]] | None = None,
) -> FastAPI:
    """The synthetic cluster's app: ``topics`` x ``partitions_per_topic``, or with
    ``fleet_partitions`` the fleet layout (:func:`fleet_topic_sizes`) of that many partitions;
    ``groups`` consumer groups (default: :data:`DEFAULT_FLEET_GROUPS` in the fleet layout, none
    otherwise; with none ``/v1/groups`` answers 404, as a controller without a coordinator).
    ``kafka_listeners``: ``(host, port)`` of each broker's Kafka listener, by broker id
    (:mod:`broker_agent.kafka_wire.synthetic`), opened before the app answers."""
    cluster = SyntheticCluster(
        cluster_id,
        brokers,
        log_dirs,
        topics,
        partitions_per_topic,
        base_url=base_url,
        topic_sizes=fleet_topic_sizes(fleet_partitions) if fleet_partitions else None,
    )
    if groups is None:
        groups = DEFAULT_FLEET_GROUPS if fleet_partitions else 0
    if groups > 0:
        cluster.groups = SyntheticGroups(cluster, groups)

    kafka = SyntheticKafka(cluster, secret, kafka_listeners) if kafka_listeners else None

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async def ticker():
            while True:
                await asyncio.sleep(tick_interval)
                await asyncio.to_thread(cluster.tick)

        task = asyncio.create_task(ticker()) if tick_interval > 0 else None
        if kafka is not None:
            await kafka.start()
        yield
        if kafka is not None:
            kafka.close()
        if task:
            task.cancel()

    app = FastAPI(
        title="Strata synthetic cluster",
        version="1",
        lifespan=lifespan,
        description="Synthetic scale mode: controller metadata and per-broker snapshots of a "
        "metadata-only cluster. All requests but /v1/health are HMAC-signed.",
    )
    # One authority for the controller and every broker: the broker id is in the signed path
    # (/brokers/<id>/v1/...), so a request signed for one broker does not verify at another.
    install(
        app,
        secret,
        audience=audience_of(base_url),
        public_paths=PUBLIC_PATHS | {f"/brokers/{b}/v1/health" for b in range(1, brokers + 1)},
        nonce_path=nonce_path,
    )

    def _respond(
        request: Request, key: tuple, build, media_type: str = "application/json"
    ) -> Response:
        gz = "gzip" in request.headers.get("accept-encoding", "")
        body, length = cluster.cached(key, build, gz)
        if gz:
            return Response(
                body,
                media_type=media_type,
                headers={"Content-Encoding": "gzip", "X-Uncompressed-Length": str(length)},
            )
        return Response(body, media_type=media_type)

    since_q = Query(None, ge=-1, le=2**62)

    @app.get("/v1/health")
    def health() -> dict:
        return {
            "status": "ok",
            "role": "synthetic",
            "brokers": brokers,
            "partitions": cluster.n,
            "version": cluster.version,
            "metadata_version": cluster.metadata_version,
            "kafka_listener_serving": kafka is not None and len(kafka.servers) == brokers,
        }

    @app.get("/v1/metadata")
    def metadata(
        request: Request,
        since: int | None = since_q,
        delta: bool = Query(False),
        wait_ms: int = Query(0, ge=0, le=30_000),
        format: Literal["json", "tsv"] = Query("json"),
    ):
        """Controller metadata (``ClusterMetadata``); ``delta=true`` for partition-level deltas;
        ``format=tsv`` as rows (:mod:`broker_agent.contract.metadata_rows`). ``wait_ms`` is accepted
        for compatibility and ignored (nothing here long-polls)."""
        tsv = format == "tsv"
        return _respond(
            request,
            ("metadata", since, delta, tsv),
            lambda: cluster.metadata_body(since, delta, tsv),
            SNAPSHOT_TSV_MEDIA_TYPE if tsv else "application/json",
        )

    @app.get("/v1/topics")
    def list_topics(request: Request):
        return _respond(request, ("topics",), lambda: cluster.topic_body(None))

    @app.get("/v1/topics/{topic}")
    def get_topic(request: Request, topic: str):
        body = cluster.topic_body(topic)
        return _respond(request, ("topic", topic), lambda: body)

    @app.post("/v1/topics/{topic}/partition-count")
    def partition_count(topic: str, req: AlterPartitionCountRequest):
        """KIP-253 expansion (the real controller's route and models); see
        :meth:`SyntheticCluster.alter_partition_count`."""
        body = cluster.alter_partition_count(topic, req.undeleted_partition_count)
        return Response(body, media_type="application/json")

    @app.get("/v1/brokers")
    def list_brokers(request: Request):
        """Every broker with its log dirs (``BrokerMetadata``), as in ``/v1/metadata``."""
        return _respond(request, ("brokers",), cluster.brokers_body)

    @app.get("/v1/groups")
    def list_groups(
        request: Request,
        since: int | None = since_q,
        format: Literal["json", "tsv"] = Query("json"),
    ):
        """The real coordinator's route (:mod:`broker_agent.simulator.synthetic_groups`)."""
        synthetic = cluster.groups
        if synthetic is None:
            raise ApiError(404, ErrorCode.GROUP_ID_NOT_FOUND, "no group coordinator")
        if format == "tsv":
            return _respond(
                request,
                ("groups-tsv", since),
                lambda: synthetic.changes_body(since),
                SNAPSHOT_TSV_MEDIA_TYPE,
            )
        return _respond(request, ("groups",), synthetic.list_body)

    @app.get("/v1/snapshot")
    def snapshot(request: Request, since: int | None = since_q):
        return _respond(request, ("snapshot", since), lambda: cluster.cluster_snapshot(since))

    @app.post("/v1/tick")
    def tick() -> dict:
        return {"version": cluster.tick()}

    @app.post("/v1/synthetic/churn")
    def churn(
        fraction: float = Query(0.01, gt=0, le=1),
        seed: int | None = Query(None, ge=0, le=2**62),
    ) -> dict:
        return cluster.churn(fraction, seed)

    @app.get("/brokers/{broker_id}/v1/health")
    def broker_health(broker_id: int) -> dict:
        cluster._check_broker(broker_id)
        return {"status": "ok", "role": "broker", "broker_id": broker_id, "online": True}

    @app.get("/brokers/{broker_id}/v1/snapshot")
    def broker_snapshot(
        request: Request,
        broker_id: int,
        since: int | None = since_q,
        format: Literal["json", "tsv"] = Query("json"),
    ):
        cluster._check_broker(broker_id)
        if format == "tsv":
            return _respond(
                request,
                ("broker-tsv", broker_id, since),
                lambda: cluster.broker_snapshot(broker_id, since, rows=True),
                SNAPSHOT_TSV_MEDIA_TYPE,
            )
        return _respond(
            request,
            ("broker", broker_id, since),
            lambda: cluster.broker_snapshot(broker_id, since),
        )

    @app.get("/brokers/{broker_id}/v1/log-dirs")
    def broker_log_dirs(request: Request, broker_id: int):
        return Response(cluster.log_dirs_body(broker_id), media_type="application/json")

    cluster.tiering = install_tiering_routes(app, cluster)
    return app
