"""The tests' entry point of the simulated cluster: ``python -m broker_agent``'s CLI whose broker
agents also serve two test-only endpoints. The product's agent app never has them.

With ``STRATA_SIM_MODULE=tests.broker_agent.agent_hooks`` (:data:`ENV`; the ``agent_test_hooks``
fixture sets it), ``sim up`` starts every
process as ``python -m tests.broker_agent.agent_hooks`` (and restarts them so):

- ``PUT /v1/test/log-dirs/{name}/probe-delay`` ``{"delay_ms": N}``: latency injected into every
  probe of a dir (deterministic DEGRADED, KIP-112 dir health);
- ``PUT /v1/test/copier-paused`` ``{"paused": true}``: this broker's copiers hold while tiering
  stays ENABLED, so copy lag grows (KIP-963 metrics).

Both are signed like every agent request and left out of the OpenAPI document.
"""

from __future__ import annotations

import sys
from typing import Annotated

from fastapi import Body, FastAPI, Request

from broker_agent import cli
from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.server import entry
from broker_agent.simulator import processes

__all__ = ["ENV", "MODULE", "install_test_hooks", "main"]

MODULE = "tests.broker_agent.agent_hooks"
#: The environment that makes ``sim up`` run this module instead of ``broker_agent``.
ENV = {processes.SIM_MODULE_ENV: MODULE}


def install_test_hooks(app: FastAPI) -> None:
    """The test-only routes on an agent app (:func:`broker_agent.server.agent_app.create_app`)."""

    @app.put("/v1/test/log-dirs/{name}/probe-delay", include_in_schema=False)
    def probe_delay(request: Request, name: str, body: Annotated[dict, Body()]) -> dict:
        delay = body.get("delay_ms") if isinstance(body, dict) else None
        if not isinstance(delay, int | float) or not 0 <= delay <= 60_000:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "delay_ms: 0..60000")
        return request.app.state.broker.log_dirs.set_probe_delay(name, float(delay))

    @app.put("/v1/test/copier-paused", include_in_schema=False)
    def copier_paused(request: Request, body: Annotated[dict, Body()]) -> dict:
        paused = body.get("paused") if isinstance(body, dict) else None
        if not isinstance(paused, bool):
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "paused: true or false")
        request.app.state.broker.tiering.copier_paused = paused
        return {"copier_paused": paused}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["broker"]:
        return cli.main(argv)
    args = cli.build_parser().parse_args(argv)
    app = entry.broker_app(args)
    install_test_hooks(app)
    entry.serve_broker(app, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
