"""The process entry points ``sim up`` starts (``python -m broker_agent controller | broker |
synthetic``): each composes a part of the simulated cluster (the controller, one broker, the
synthetic fleet) with the HTTP app that serves it, and runs it under uvicorn. Supervising those
processes (data directory, pid files, health) is the simulator's
(:mod:`broker_agent.simulator.processes`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from broker_agent.contract.signing import audience_of, load_secret
from broker_agent.simulator.processes import nonce_file, setup_logging

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["broker_app", "run_broker", "run_controller", "run_synthetic", "serve_broker"]


def run_controller(args) -> None:
    import uvicorn

    from broker_agent.server.controller_app import create_app
    from broker_agent.simulator.controller import Controller

    setup_logging()
    secret = load_secret()
    app = create_app(
        lambda: Controller(
            os.path.join(args.data, "controller"), args.cluster_id, args.session_timeout_ms
        ),
        secret,
        audience=audience_of(f"http://{args.host}:{args.port}"),
        nonce_path=nonce_file(args.data, "controller"),
        sim_data=None if getattr(args, "no_restart_control", False) else args.data,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def run_broker(args) -> None:
    serve_broker(broker_app(args), args)


def broker_app(args) -> FastAPI:
    """The agent app of the broker ``args`` describe (``python -m broker_agent broker``)."""
    from broker_agent.server.agent_app import create_app
    from broker_agent.simulator.broker import Broker

    secret = load_secret()
    names = [f"logdir-{i}" for i in range(args.log_dirs)]
    url = f"http://{args.host}:{args.port}"
    kafka_port = getattr(args, "kafka_port", None)
    return create_app(
        lambda: Broker(
            broker_id=args.id,
            data_dir=args.data,
            log_dir_names=names,
            controller_url=args.controller,
            secret=secret,
            url=url,
            cluster_id=args.cluster_id,
            segment_bytes=args.segment_bytes,
            expiration_mode=args.expiration,
            webhook_url=args.webhook or os.environ.get("STRATA_EVENTS_WEBHOOK_URL"),
            probe_interval=args.probe_interval,
            replica_lag_time_max_ms=args.replica_lag_time_max_ms,
            log_dir_capacity_bytes=args.log_dir_capacity_bytes or None,
            remote_store=args.remote_store or None,
            kafka_listener=f"{args.host}:{kafka_port}" if kafka_port else None,
        ),
        secret,
        audience=audience_of(url),  # the URL it registers with the controller
        nonce_path=nonce_file(args.data, f"broker-{args.id}"),
        kafka_listener=(args.host, kafka_port) if kafka_port else None,
    )


def serve_broker(app: FastAPI, args) -> None:
    import uvicorn

    setup_logging()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", limit_concurrency=500)


def run_synthetic(args) -> None:
    import uvicorn

    from broker_agent.server.synthetic_app import create_app

    setup_logging()
    app = create_app(
        load_secret(),
        cluster_id=args.cluster_id,
        brokers=args.brokers,
        log_dirs=args.log_dirs,
        topics=args.topics,
        partitions_per_topic=args.partitions_per_topic,
        base_url=f"http://{args.host}:{args.port}",
        tick_interval=args.tick_interval,
        nonce_path=nonce_file(args.data, "synthetic") if getattr(args, "data", None) else None,
        fleet_partitions=getattr(args, "fleet_partitions", None),
        groups=getattr(args, "groups", None),
        kafka_listeners=[(args.host, int(p)) for p in args.kafka_ports.split(",") if p]
        if getattr(args, "kafka_ports", None)
        else None,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
