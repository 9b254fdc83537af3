"""The simulated cluster's process controls, offered to a worker through the controller.

Kafka brings a failed log dir back only when the broker restarts (KIP-112), so a recovery
runbook must restart the broker. The sim's controller advertises that it can
(``GET /v1/sim/controls``: a capability; elsewhere an operator is asked instead) and does it as
``sim restart-broker`` does: controlled shutdown, SIGTERM, start, wait for health. Idempotent
across a caller's crash: the caller sends the ``incarnation`` it saw before it first asked, and a
broker whose incarnation already differs has been restarted and is not restarted twice.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

import httpx
from fastapi import Body, FastAPI

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.simulator.processes import (
    ensure_secret,
    read_json,
    running_pid,
    start_broker,
    stop_process,
    wait_health,
)

__all__ = ["broker_incarnation", "install_sim_routes", "restart_broker", "sim_cluster_file"]

log = logging.getLogger("broker_agent.simulator.sim_controls")

#: how long a restarted broker may take to answer its health check (seconds)
START_TIMEOUT = 30.0


def sim_cluster_file(data: str) -> str:
    return os.path.join(data, "cluster.json")


def broker_incarnation(url: str) -> str | None:
    """The incarnation of the broker process at ``url``, or None when it does not answer."""
    try:
        r = httpx.get(url.rstrip("/") + "/v1/health", timeout=2)
    except httpx.HTTPError:
        return None
    return r.json().get("incarnation") if r.status_code == 200 else None


def restart_broker(
    data: str,
    broker_id: int,
    *,
    expected_incarnation: str | None = None,
    before_stop: Callable[[], None] | None = None,
) -> dict:
    """Restart broker ``broker_id``'s process of the simulated cluster in ``data``.

    ``expected_incarnation``: restart only the process with that incarnation; a broker already
    running another one was restarted since (answer ``restarted: false``). ``before_stop`` runs
    just before the process is stopped (the controller's controlled shutdown)."""
    c = read_json(sim_cluster_file(data))
    bid = str(broker_id)
    if c is None or bid not in c.get("brokers", {}):
        raise ApiError(404, ErrorCode.NOT_FOUND, f"the simulated cluster has no broker {bid}")
    url = c["brokers"][bid]["url"]
    current = broker_incarnation(url)
    running = running_pid(data, f"broker-{bid}") is not None
    if expected_incarnation and current and current != expected_incarnation:
        return {"broker_id": broker_id, "restarted": False, "incarnation": current}
    if running and before_stop is not None:
        before_stop()
    log.warning("restarting broker %s (incarnation %s)", bid, current)
    stop_process(data, f"broker-{bid}", signal.SIGTERM, wait=10)
    start_broker(c, bid, ensure_secret(data))
    if not wait_health(url, timeout=START_TIMEOUT):
        raise ApiError(503, ErrorCode.BROKER_NOT_AVAILABLE, f"broker {bid} did not start again")
    return {
        "broker_id": broker_id,
        "restarted": True,
        "incarnation_before": current,
        "incarnation": broker_incarnation(url),
    }


def install_sim_routes(app: FastAPI, data: str, fence: Callable[[int], None]) -> None:
    """The controller's ``/v1/sim/...`` routes, when it runs a simulated cluster (``data``
    holds ``cluster.json``). ``fence(broker_id)`` moves leaders off a broker before it stops."""
    if not os.path.exists(sim_cluster_file(data)):
        return

    @app.get("/v1/sim/controls")
    def controls() -> dict:
        """What this simulated cluster lets a worker do to its processes (a capability)."""
        return {"restart_broker": True}

    @app.post("/v1/sim/brokers/{broker_id}/restart")
    def restart(broker_id: int, body: dict | None = Body(None)) -> dict:  # noqa: B008
        """Restart a broker process (controlled shutdown, stop, start, healthy).
        ``{"expected_incarnation": ...}`` makes it idempotent: see the module docstring."""
        expected = (body or {}).get("expected_incarnation")
        if expected is not None and not isinstance(expected, str):
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "expected_incarnation: a string")
        return restart_broker(
            data, broker_id, expected_incarnation=expected, before_stop=lambda: fence(broker_id)
        )
