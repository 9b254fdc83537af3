"""The Kafka listener of a simulated broker: framing (an int32 size, then the request), the
request header, dispatch by api key and version, and ApiVersions.

Messages are kafka-python's classes at the request's version, answered with Kafka's header for
it (v1 for flexible versions, v0 always for ApiVersions), in order, one at a time per
connection, as Kafka does. Handlers run in a worker thread under the broker's locks (or in the
listener's ``executor``), never on the event loop the agent's HTTP API shares. An unimplemented api key or version closes the
connection, except ApiVersions, answered at v0 with UNSUPPORTED_VERSION (KIP-511) so the client
retries. SASL/PLAIN (:mod:`.sasl`) comes first: until then only ApiVersions and SASL are served.
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
from concurrent.futures import Executor

import kafka.errors as Errors
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.schemas.fields.codecs import Int32

from broker_agent.contract.client import gc_paused
from broker_agent.kafka_wire import (
    alter_configs,
    cluster,
    configs,
    groups,
    logdirs,
    offsets,
    partitions,
    reassign,
    sasl,
    topic_partitions,
)
from broker_agent.kafka_wire.api import Api

__all__ = ["APIS", "api_versions", "respond", "start_listener"]

log = logging.getLogger("broker_agent.kafka_wire")

#: Kafka's ``socket.request.max.bytes`` default: a larger frame closes the connection.
MAX_REQUEST_BYTES = 100 * 1024 * 1024


def api_versions(apis: dict) -> ApiVersionsResponse:
    """ApiVersions' answer for a listener that implements ``apis``."""
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[
            ApiVersionsResponse.ApiVersion(
                api_key=int(key), min_version=api.min_version, max_version=api.max_version
            )
            for key, api in sorted(apis.items())
        ],
        throttle_time_ms=0,
    )


def _api_versions(_broker, _request, _version):
    return api_versions(APIS)


#: api key -> :class:`Api`: exactly what ApiVersions advertises.
APIS: dict[int, Api] = {
    ApiKey.ApiVersions: Api(ApiVersionsRequest, ApiVersionsResponse, 0, 3, _api_versions),
    **cluster.APIS,
    **topic_partitions.APIS,
    **configs.APIS,
    **alter_configs.APIS,
    **logdirs.APIS,
    **offsets.APIS,
    **groups.APIS,
    **partitions.APIS,
    **reassign.APIS,
    **sasl.APIS,
}


def respond(broker, payload: bytes, session: dict, apis: dict | None = None) -> bytes | None:
    """The framed response to one request (``payload``: the request without its size), or
    ``None`` to close the connection. ``session``: the connection's SASL state (:mod:`.sasl`;
    ``close`` set: close the connection after this answer). ``apis``: what this listener
    implements (default :data:`APIS`; the synthetic fleet answers a subset) - ApiVersions lists
    exactly those."""
    apis = APIS if apis is None else apis
    header = RequestHeader.decode(io.BytesIO(payload), flexible=False)
    key, version = header.request_api_key, header.request_api_version
    api = apis.get(key)
    if api is None or not api.min_version <= version <= api.max_version:
        if key == ApiKey.ApiVersions:  # KIP-511: answer at v0 with the versions we have
            resp = api_versions(apis)
            resp.error_code = Errors.UnsupportedVersionError.errno
            return _encode(resp, 0, header.correlation_id)
        log.info(
            "unsupported request api_key=%s version=%s from %r: closing the connection",
            key,
            version,
            header.client_id,
        )
        return None
    if key in sasl.APIS:
        if session.get("authenticated"):
            log.info("SASL request %s on an authenticated connection: closing it", key)
            return None
        request = api.request.decode(payload, version=version, header=True)
        resp = api.handle(broker, request, version, session)
        return _encode(resp, version, header.correlation_id)
    if key != ApiKey.ApiVersions and not session.get("authenticated"):
        log.info("api_key=%s before SASL authentication from %r: closing", key, header.client_id)
        return None
    if key == ApiKey.ApiVersions:
        api.request.decode(payload, version=version, header=True)
        return _encode(api_versions(apis), version, header.correlation_id)
    # A leader's ListOffsets or a broker's DescribeLogDirs names 10,000 partitions of a
    # 200,000-partition fleet: the objects of its decode, answer and encode would otherwise
    # set off collections that walk all the state a broker (or the whole synthetic fleet)
    # keeps, most of the call's CPU at that size (as the console's Kafka source pauses it).
    # The request is let go before the collector resumes: alive then, its objects would be
    # what the collection that follows walks (a second of the fleet's CPU a first sync).
    with gc_paused():
        request = api.request.decode(payload, version=version, header=True)
        out = _encode(api.handle(broker, request, version), version, header.correlation_id)
        del request
    return out


def _encode(resp, version: int, correlation_id: int) -> bytes:
    resp.API_VERSION = version  # before the header: a header takes the version along
    resp.with_header(correlation_id=correlation_id)
    return bytes(resp.encode(header=True, framed=True))


async def _serve(
    broker,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    apis: dict | None,
    executor: Executor | None,
) -> None:
    session: dict = {}
    loop = asyncio.get_running_loop()
    try:
        while True:
            size = Int32.decode(io.BytesIO(await reader.readexactly(4)))
            if not 0 < size <= MAX_REQUEST_BYTES:
                log.info("request of %d bytes: closing the connection", size)
                break
            payload = await reader.readexactly(size)
            try:
                answer = functools.partial(respond, broker, payload, session, apis)
                out = await loop.run_in_executor(executor, answer)
            except Exception:
                log.exception("Kafka request failed: closing the connection")
                break
            if out is None:
                break
            writer.write(out)
            await writer.drain()
            if session.get("close"):
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def start_listener(
    broker, host: str, port: int, apis: dict | None = None, executor: Executor | None = None
) -> asyncio.Server:
    """Listen on ``host:port`` for Kafka clients of ``broker`` (until the server is closed),
    answering ``apis`` (default :data:`APIS`) in ``executor``'s threads (default: the event
    loop's default executor)."""
    server = await asyncio.start_server(
        lambda r, w: _serve(broker, r, w, apis, executor), host, port
    )
    log.info("Kafka listener of broker %s on %s:%s", broker.broker_id, host, port)
    return server


def caught_up(broker) -> bool:
    """The metadata this broker applied lists it live (unfenced) with its Kafka listener."""
    return any(
        b["broker_id"] == broker.broker_id and b.get("alive") and b.get("kafka_listener")
        for b in broker.cluster_brokers
    )


async def open_when_caught_up(broker, host: str, port: int) -> asyncio.Server:
    """Open the listener once the broker has caught up, as Kafka's ``BrokerServer.startup``
    enables its acceptors only after the broker has replayed the metadata log and been
    unfenced: a client never finds a broker whose Metadata lacks the broker it asked."""
    while not caught_up(broker):
        await asyncio.sleep(0.05)
    server = await start_listener(broker, host, port)
    broker.kafka_listener_serving = True
    return server
