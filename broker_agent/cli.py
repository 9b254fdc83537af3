"""``python -m broker_agent ...``: the simulated cluster's CLI and process entry points.

Process entry points (used by ``sim up``; not meant to be typed): ``controller``, ``broker``,
``synthetic`` (:mod:`broker_agent.server.entry`), ``demo-load-worker``. Everything else is under
``sim``. The commands live here; :mod:`broker_agent.simulator.processes` supervises the processes
and :mod:`broker_agent.simulator.demo` makes traffic. The CLI sits above broker_agent's four
packages: it drives the simulator and starts the server's processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import uuid

import httpx

from broker_agent.contract.choices import ExpirationMode, LogDirState, TieredState, TopicConfig
from broker_agent.contract.objectstore import remote_store_uri
from broker_agent.server.entry import run_broker, run_controller, run_synthetic
from broker_agent.simulator.demo import cmd_consume, cmd_demo_load, cmd_demo_worker, cmd_produce
from broker_agent.simulator.processes import (
    DEFAULT_DATA,
    cluster_urls,
    controller_client,
    data_secret,
    ensure_secret,
    free_ports,
    read_cluster,
    read_json,
    running_pid,
    spawn,
    start_broker,
    stop_process,
    wait_health,
    write_json,
)

__all__ = ["main"]


def cmd_up(args) -> int:
    data = os.path.abspath(args.data)
    os.makedirs(data, exist_ok=True)
    env = ensure_secret(data)
    path = os.path.join(data, "cluster.json")
    c = read_json(path)
    synthetic = args.synthetic_topics is not None or args.synthetic_fleet is not None
    if c is None:
        host = "127.0.0.1"
        base = args.base_port
        # the controller's port, every broker's and every broker's Kafka listener, chosen at
        # once so that they differ
        n = 2 * args.brokers + 1
        ports = [base + i for i in range(n)] if base else free_ports(n)
        ctl_port = ports[0]
        c = {
            "cluster_id": args.cluster_id or f"sim-{uuid.uuid4().hex[:8]}",
            "mode": "synthetic" if synthetic else "real",
            "data": data,
            "log_dirs": args.log_dirs,
            "segment_bytes": args.segment_bytes,
            "expiration": args.expiration,
            "webhook": args.webhook,
            "probe_interval": args.probe_interval,
            "replica_lag_time_max_ms": args.replica_lag_time_max_ms,
            "session_timeout_ms": args.session_timeout_ms,
            "log_dir_capacity_bytes": args.log_dir_capacity_bytes,
            "restart_control": not args.no_restart_control,
            "secret_file": env.get("STRATA_AGENT_SECRET_FILE"),
            "controller": {"port": ctl_port, "url": f"http://{host}:{ctl_port}"},
            "brokers": {},
        }
        if synthetic:
            c["synthetic"] = {
                "topics": args.synthetic_topics,
                "partitions_per_topic": args.partitions_per_topic,
                "tick_interval": args.synthetic_tick_interval,
                "fleet_partitions": args.synthetic_fleet,
                "groups": args.synthetic_groups,
            }
            c["controller"]["url"] = f"http://{host}:{ctl_port}"
            for i in range(1, args.brokers + 1):
                c["brokers"][str(i)] = {
                    "port": ctl_port,
                    "url": f"http://{host}:{ctl_port}/brokers/{i}",
                    "kafka_port": ports[args.brokers + i],  # served by the synthetic process
                }
        else:
            for i in range(1, args.brokers + 1):
                port = ports[i]
                c["brokers"][str(i)] = {
                    "port": port,
                    "url": f"http://{host}:{port}",
                    "kafka_port": ports[args.brokers + i],
                }
        write_json(path, c)
    if not all(b.get("kafka_port") for b in c["brokers"].values()):
        # a manifest from before the Kafka listeners gets them now (free ports)
        for b, port in zip(c["brokers"].values(), free_ports(len(c["brokers"])), strict=True):
            b.setdefault("kafka_port", port)
        write_json(path, c)
    if c["mode"] != "synthetic" and not c.get("remote_store"):
        # the cluster's remote tier, fixed at creation (an older manifest gets it now)
        c["remote_store"] = remote_store_uri(c["cluster_id"], args.remote_store)
        write_json(path, c)
    if c["mode"] == "synthetic":
        if running_pid(data, "synthetic") is None:
            s = c["synthetic"]
            spawn(
                data,
                "synthetic",
                [
                    "synthetic",
                    "--port",
                    str(c["controller"]["port"]),
                    "--cluster-id",
                    c["cluster_id"],
                    "--brokers",
                    str(len(c["brokers"])),
                    "--log-dirs",
                    str(c["log_dirs"]),
                    "--topics",
                    str(s["topics"] or 1),
                    "--partitions-per-topic",
                    str(s["partitions_per_topic"]),
                    "--tick-interval",
                    str(s.get("tick_interval", 5.0)),
                    *(
                        ["--fleet-partitions", str(s["fleet_partitions"])]
                        if s.get("fleet_partitions")
                        else []
                    ),
                    *(["--groups", str(s["groups"])] if s.get("groups") is not None else []),
                    "--kafka-ports",
                    ",".join(
                        str(b["kafka_port"])
                        for _, b in sorted(c["brokers"].items(), key=lambda kv: int(kv[0]))
                    ),
                    "--data",
                    data,
                ],
                env,
            )
        if not wait_health(c["controller"]["url"], 120):
            print(json.dumps({"error": "synthetic cluster did not answer"}), file=sys.stderr)
            return 1
        if not wait_health(c["controller"]["url"], 10, until="kafka_listener_serving"):
            # a synthetic process started before the listeners: `sim down` and `up` again
            print(json.dumps({"error": "synthetic Kafka listeners not serving"}), file=sys.stderr)
            return 1
        print(json.dumps(cluster_urls(c)))
        return 0
    if running_pid(data, "controller") is None:
        spawn(
            data,
            "controller",
            [
                "controller",
                "--data",
                data,
                "--port",
                str(c["controller"]["port"]),
                "--cluster-id",
                c["cluster_id"],
                "--session-timeout-ms",
                str(c.get("session_timeout_ms", 3000)),
                *([] if c.get("restart_control", True) else ["--no-restart-control"]),
            ],
            env,
        )
    for bid in c["brokers"]:
        start_broker(c, bid, env)
    urls = [c["controller"]["url"], *(b["url"] for b in c["brokers"].values())]
    for url in urls:
        if not wait_health(url):
            print(json.dumps({"error": f"{url} did not answer"}), file=sys.stderr)
            return 1
    ctl = controller_client(data)
    try:
        ctl.wait_for(
            lambda md: sum(1 for b in md.brokers if b.alive) >= len(c["brokers"]), timeout=30
        )
    except TimeoutError:
        print(json.dumps({"error": "brokers did not register"}), file=sys.stderr)
        return 1
    for b in c["brokers"].values():  # a listener opens once its broker has caught up
        if b.get("kafka_port") and not wait_health(b["url"], until="kafka_listener_serving"):
            print(json.dumps({"error": f"{b['url']}: Kafka listener not serving"}), file=sys.stderr)
            return 1
    print(json.dumps(cluster_urls(c)))
    return 0


def cmd_down(args) -> int:
    data = os.path.abspath(args.data)
    pids = os.path.join(data, "pids")
    names = (
        sorted(n[:-4] for n in os.listdir(pids) if n.endswith(".pid"))
        if os.path.isdir(pids)
        else []
    )
    # brokers first, then the controller, so brokers do not spin on a dead controller
    names.sort(key=lambda n: (n == "controller", n))
    stopped = [n for n in names if stop_process(data, n)]
    print(json.dumps({"stopped": stopped}))
    return 0


def cmd_kill_broker(args) -> int:
    data = os.path.abspath(args.data)
    ok = stop_process(data, f"broker-{args.id}", signal.SIGKILL, wait=5)
    print(json.dumps({"killed": ok, "broker": args.id}))
    return 0 if ok else 1


def cmd_start_broker(args) -> int:
    data = os.path.abspath(args.data)
    c = read_cluster(data)
    bid = str(args.id)
    if bid not in c["brokers"]:
        sys.exit(f"unknown broker {bid}")
    start_broker(c, bid, ensure_secret(data))
    ok = wait_health(c["brokers"][bid]["url"])
    print(json.dumps({"started": ok, "broker": args.id, "url": c["brokers"][bid]["url"]}))
    return 0 if ok else 1


def cmd_restart_broker(args) -> int:
    """Through the controller's sim control (controlled shutdown first, as a worker does); a
    controller started with ``--no-restart-control`` offers none: then the process is restarted
    from here, as an operator would, and its leaders move when its session expires."""
    from broker_agent.contract.client import AgentError
    from broker_agent.simulator.sim_controls import restart_broker

    data = os.path.abspath(args.data)
    try:
        out = controller_client(data).request(
            "POST", f"/v1/sim/brokers/{args.id}/restart", body={}, timeout=60
        )
    except AgentError as exc:
        if exc.status != 404:
            raise
        out = restart_broker(data, args.id)
    print(json.dumps(out))
    return 0


def _status(data: str) -> dict:
    from broker_agent.contract.client import AgentClient

    c = read_cluster(data)
    secret = data_secret(data)
    out = {
        "cluster_id": c["cluster_id"],
        "mode": c["mode"],
        "controller": c["controller"]["url"],
        "brokers": [],
        "topics": [],
    }
    try:
        md = controller_client(data).metadata()
    except Exception as exc:  # report, do not crash: status is for humans and scripts
        out["error"] = f"controller unreachable: {exc}"
        return out
    for bid, b in sorted(c["brokers"].items(), key=lambda kv: int(kv[0])):
        info = next((x for x in md.brokers if x.broker_id == int(bid)), None)
        entry = {
            "broker_id": int(bid),
            "url": b["url"],
            "running": c["mode"] == "synthetic" or running_pid(data, f"broker-{bid}") is not None,
            "alive": bool(info and info.alive),
            "log_dirs": [],
            "offline_log_directory_count": 0,
            "offline_replica_count": info.offline_replica_count if info else 0,
        }
        with (
            contextlib.suppress(Exception),
            AgentClient(b["url"], secret, retries=0, timeout=3) as a,
        ):
            dirs = a.log_dirs()
            entry["log_dirs"] = [
                {"name": d.name, "path": d.path, "state": d.state, "error": d.error} for d in dirs
            ]
            entry["offline_log_directory_count"] = sum(
                1 for d in dirs if d.state == LogDirState.OFFLINE
            )
        out["brokers"].append(entry)
    for t in md.topics:
        out["topics"].append(
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "partitions": len(t.partitions),
                "initial_partition_count": t.initial_partition_count,
                "undeleted_partition_count": t.undeleted_partition_count,
                "tiered_state": t.tiered_state,
                "tiered_epoch": t.tiered_epoch,
                "disable_policy": t.disable_policy,
                "offline_partitions": sum(1 for p in t.partitions if p.leader < 0),
            }
        )
    return out


def cmd_status(args) -> int:
    st = _status(os.path.abspath(args.data))
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        for b in st["brokers"]:
            dirs = ", ".join(f"{d['name']}={d['state']}" for d in b["log_dirs"])
            print(
                f"broker {b['broker_id']}: alive={b['alive']} {dirs} offline_replicas={b['offline_replica_count']}"
            )
        for t in st["topics"]:
            print(
                f"topic {t['name']}: {t['partitions']} partitions, tiering {t['tiered_state']} epoch {t['tiered_epoch']}"
            )
    return 0


def cmd_create_topic(args) -> int:
    configs = dict(kv.split("=", 1) for kv in args.config or [])
    if args.tiered:
        configs[TopicConfig.REMOTE_STORAGE_ENABLE] = "true"
    if args.segment_bytes:
        configs[TopicConfig.SEGMENT_BYTES] = str(args.segment_bytes)
    t = controller_client(os.path.abspath(args.data)).create_topic(
        args.topic, args.partitions, args.replication_factor, configs
    )
    print(json.dumps({"name": t.name, "topic_id": t.topic_id, "tiered_state": t.tiered_state}))
    return 0


def cmd_disable_tiering(args) -> int:
    """Drive a whole KIP-950 disablement: start, DisableRemoteTopic to every hosting broker
    (retried until each answers), complete. Resumes a topic left in DISABLING."""
    from broker_agent.contract.client import AgentClient, AgentError

    data = os.path.abspath(args.data)
    ctl = controller_client(data)
    t = ctl.topic(args.topic)
    if t.tiered_state != TieredState.DISABLING:
        t = ctl.start_disable(args.topic, args.policy)
    md = ctl.metadata()
    urls = {b.broker_id: b.url for b in md.brokers}
    hosts = sorted({r for p in t.partitions for r in p.replicas})
    deadline = time.monotonic() + args.timeout
    for bid in hosts:
        key = f"disable-{t.topic_id}-{t.tiered_epoch}-{bid}"
        while True:
            try:
                with AgentClient(urls[bid], data_secret(data), retries=1, timeout=5) as a:
                    a.disable_remote_topic(
                        t.name, t.topic_id, t.tiered_epoch, t.disable_policy, key
                    )
                break
            except (AgentError, httpx.HTTPError) as exc:
                if time.monotonic() > deadline:
                    print(json.dumps({"error": f"broker {bid}: {exc}"}))
                    return 1
                time.sleep(0.5)
    t = ctl.complete_disable(args.topic, t.tiered_epoch)
    print(
        json.dumps(
            {"topic": t.name, "tiered_state": t.tiered_state, "tiered_epoch": t.tiered_epoch}
        )
    )
    return 0


def cmd_enable_tiering(args) -> int:
    from broker_agent.contract.client import AgentClient

    data = os.path.abspath(args.data)
    ctl = controller_client(data)
    t = ctl.enable(args.topic)
    md = ctl.metadata()
    urls = {b.broker_id: b.url for b in md.brokers}
    for bid in sorted({r for p in t.partitions for r in p.replicas}):
        with AgentClient(urls[bid], data_secret(data)) as a:
            a.enable_remote_topic(
                t.name, t.topic_id, t.tiered_epoch, f"enable-{t.topic_id}-{t.tiered_epoch}-{bid}"
            )
    print(
        json.dumps(
            {"topic": t.name, "tiered_state": t.tiered_state, "tiered_epoch": t.tiered_epoch}
        )
    )
    return 0


def cmd_churn(args) -> int:
    """Synthetic mode: mutate ``--fraction`` of the partitions (leaders, ISR, offsets) in one new
    metadata version, for incremental-sync benchmarks."""
    from broker_agent.contract.client import AgentError, _SignedClient

    data = os.path.abspath(args.data)
    c = read_cluster(data)
    if c["mode"] != "synthetic":
        print(
            json.dumps({"error": "sim churn needs a synthetic cluster (sim up --synthetic-topics)"})
        )
        return 2
    params = {"fraction": args.fraction, "seed": args.seed}
    try:
        with _SignedClient(c["controller"]["url"], data_secret(data), timeout=60) as client:
            out = client.request("POST", "/v1/synthetic/churn", params=params, retries=0)
    except AgentError as exc:
        print(json.dumps({"error": exc.error, "message": exc.message}))
        return 1
    print(json.dumps(out))
    return 0


def _alter_partition_count(args, grow: bool) -> int:
    ctl = controller_client(os.path.abspath(args.data))
    t = ctl.topic(args.topic)
    u = t.undeleted_partition_count
    if (grow and args.to <= u) or (not grow and args.to >= u):
        word = "above" if grow else "below"
        print(f"error: --to must be {word} the current count {u}", file=sys.stderr)
        return 1
    t = ctl.alter_partition_count(args.topic, args.to)
    print(
        json.dumps(
            {
                "topic": t.name,
                "initial_partition_count": t.initial_partition_count,
                "undeleted_partition_count": t.undeleted_partition_count,
                "marked_for_deletion": [p.partition for p in t.partitions if p.marked_for_deletion],
            }
        )
    )
    return 0


def cmd_expand_partitions(args) -> int:
    return _alter_partition_count(args, grow=True)


def cmd_shrink_partitions(args) -> int:
    return _alter_partition_count(args, grow=False)


def cmd_cordon_log_dir(args) -> int:
    """KIP-1066 ``cordoned.log.dirs`` on one broker: no new replicas on the dir (its replicas
    keep serving); ``--lift`` removes the cordon."""
    from broker_agent.contract.client import AgentClient

    data = os.path.abspath(args.data)
    c = read_cluster(data)
    with AgentClient(c["brokers"][str(args.id)]["url"], data_secret(data)) as a:
        info = a.uncordon_log_dir(args.log_dir) if args.lift else a.cordon_log_dir(args.log_dir)
    print(info.model_dump_json())
    return 0


def cmd_log_dir_reset(args) -> int:
    print(json.dumps(controller_client(os.path.abspath(args.data)).log_dir_reset(args.id)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m broker_agent")
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("controller", help="run the controller process")
    c.add_argument("--data", default=DEFAULT_DATA)
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--cluster-id", default="sim")
    c.add_argument("--session-timeout-ms", type=int, default=3000)
    c.add_argument("--no-restart-control", action="store_true")
    c.set_defaults(func=lambda a: run_controller(a) or 0)

    b = sub.add_parser("broker", help="run one broker agent process")
    b.add_argument("--id", type=int, required=True)
    b.add_argument("--data", default=DEFAULT_DATA)
    b.add_argument("--host", default="127.0.0.1")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--controller", required=True)
    b.add_argument("--cluster-id", default="sim")
    b.add_argument("--log-dirs", type=int, default=2)
    b.add_argument("--segment-bytes", type=int, default=1 << 20)
    b.add_argument("--expiration", choices=ExpirationMode.ALL, default=ExpirationMode.INTERNAL)
    b.add_argument("--webhook")
    b.add_argument("--probe-interval", type=float, default=1.0)
    b.add_argument("--replica-lag-time-max-ms", type=int, default=5000)
    b.add_argument("--log-dir-capacity-bytes", type=int, default=0)
    b.add_argument(
        "--kafka-port", type=int, default=0, help="port of the Kafka-protocol listener (0: none)"
    )
    b.add_argument(
        "--remote-store",
        help="s3://BUCKET/PREFIX of the cluster's remote tier "
        "(default: $STRATA_REMOTE_STORE/<cluster id>)",
    )
    b.set_defaults(func=lambda a: run_broker(a) or 0)

    s = sub.add_parser("synthetic", help="run the synthetic-scale cluster process")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--cluster-id", default="synthetic")
    s.add_argument("--brokers", type=int, default=60)
    s.add_argument("--log-dirs", type=int, default=4)
    s.add_argument("--topics", type=int, default=100)
    s.add_argument("--partitions-per-topic", type=int, default=2000)
    s.add_argument("--tick-interval", type=float, default=5.0)
    s.add_argument(
        "--fleet-partitions",
        type=int,
        default=None,
        help="the fleet layout: this many partitions in topics of 1 to 10,000 partitions "
        "(replaces --topics / --partitions-per-topic)",
    )
    s.add_argument(
        "--groups",
        type=int,
        default=None,
        help="consumer groups (default: 20,000 with --fleet-partitions, else none)",
    )
    s.add_argument(
        "--kafka-ports",
        default="",
        help="comma-separated Kafka listener ports, one per broker id from 1 (empty: none)",
    )
    s.add_argument("--data", default=None, help="where to keep the replay cache (nonces)")
    s.set_defaults(func=lambda a: run_synthetic(a) or 0)

    w = sub.add_parser("demo-load-worker", help=argparse.SUPPRESS)
    w.add_argument("--data", default=DEFAULT_DATA)
    w.add_argument("--rate", type=float, default=20)
    w.add_argument("--duration", type=float, default=0)
    w.set_defaults(func=cmd_demo_worker)

    sim = sub.add_parser("sim", help="manage the simulated cluster")
    ss = sim.add_subparsers(dest="sim_cmd", required=True)

    def add(name, func, help_):
        sp = ss.add_parser(name, help=help_)
        sp.add_argument("--data", default=DEFAULT_DATA)
        sp.set_defaults(func=func)
        return sp

    up = add("up", cmd_up, "start controller + brokers (idempotent)")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--log-dirs", type=int, default=2)
    up.add_argument("--synthetic-topics", type=int)
    up.add_argument(
        "--synthetic-fleet",
        type=int,
        metavar="PARTITIONS",
        help="synthetic mode, fleet layout: PARTITIONS partitions in a mix of topic sizes "
        "from 1 to 10,000 (broker_agent.simulator.synthetic.FLEET_MIX)",
    )
    up.add_argument(
        "--synthetic-groups",
        type=int,
        metavar="GROUPS",
        help="synthetic mode: consumer groups, each consuming one topic "
        "(default: 20,000 with --synthetic-fleet, else none)",
    )
    up.add_argument("--partitions-per-topic", type=int, default=100)
    up.add_argument(
        "--synthetic-tick-interval",
        type=float,
        default=5.0,
        help="synthetic mode: seconds between background offset ticks (0: none)",
    )
    up.add_argument("--base-port", type=int, default=0)
    up.add_argument("--segment-bytes", type=int, default=1 << 20)
    up.add_argument("--expiration", choices=ExpirationMode.ALL, default=ExpirationMode.INTERNAL)
    up.add_argument("--webhook", default=os.environ.get("STRATA_EVENTS_WEBHOOK_URL"))
    up.add_argument("--cluster-id")
    up.add_argument("--probe-interval", type=float, default=1.0)
    up.add_argument("--replica-lag-time-max-ms", type=int, default=5000)
    up.add_argument("--session-timeout-ms", type=int, default=3000)
    up.add_argument(
        "--log-dir-capacity-bytes",
        type=int,
        default=0,
        help="simulated size of every log dir (usable = size - replica bytes); 0: the real disk",
    )
    up.add_argument(
        "--no-restart-control",
        action="store_true",
        help="the controller does not offer its broker restart control (GET /v1/sim/controls "
        "404), as a real cluster: a recovery's restart is then an operator's confirmed step",
    )
    up.add_argument(
        "--remote-store",
        help="s3://BUCKET/PREFIX of the remote tier (default: $STRATA_REMOTE_STORE/<cluster id>)",
    )

    st = add("status", cmd_status, "cluster status")
    st.add_argument("--json", action="store_true")
    add("down", cmd_down, "stop every process of the cluster")
    kb = add("kill-broker", cmd_kill_broker, "SIGKILL one broker")
    kb.add_argument("id", type=int)
    sb = add("start-broker", cmd_start_broker, "start one broker again")
    sb.add_argument("id", type=int)
    rb = add(
        "restart-broker",
        cmd_restart_broker,
        "restart one broker process (a failed log dir comes back only this way, as in Kafka)",
    )
    rb.add_argument("id", type=int)
    ct = add("create-topic", cmd_create_topic, "create a topic")
    ct.add_argument("topic")
    ct.add_argument("--partitions", type=int, required=True)
    ct.add_argument("--replication-factor", type=int, required=True)
    ct.add_argument("--tiered", action="store_true")
    ct.add_argument("--segment-bytes", type=int)
    ct.add_argument("--config", action="append", help="k=v topic config, repeatable")
    pr = add("produce", cmd_produce, "produce records (acks=all, idempotent)")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--records", type=int, required=True)
    pr.add_argument("--keyed", action="store_true")
    pr.add_argument("--batch-size", type=int, default=1000)
    pr.add_argument("--value-size", type=int, default=20)
    co = add("consume", cmd_consume, "consume a topic; --verify checks against the ack ledger")
    co.add_argument("--topic", required=True)
    co.add_argument("--verify", action="store_true")
    co.add_argument(
        "--group", help="consume as this group: resume from its positions, in KIP-253 order"
    )
    co.add_argument("--max-records", type=int, help="with --group: stop after this many")
    ex = add("expand-partitions", cmd_expand_partitions, "KIP-253: raise the partition count")
    ex.add_argument("topic")
    ex.add_argument("--to", type=int, required=True, help="the new undeleted partition count")
    sh = add("shrink-partitions", cmd_shrink_partitions, "KIP-253: mark partitions for deletion")
    sh.add_argument("topic")
    sh.add_argument("--to", type=int, required=True, help="the new undeleted partition count")
    dt = add("disable-tiering", cmd_disable_tiering, "KIP-950 disablement, driven to DISABLED")
    dt.add_argument("topic")
    dt.add_argument("--policy", choices=["retain", "delete"])
    dt.add_argument("--timeout", type=float, default=60)
    et = add("enable-tiering", cmd_enable_tiering, "re-enable tiering")
    et.add_argument("topic")
    ch = add("churn", cmd_churn, "synthetic mode: change a fraction of the partitions")
    ch.add_argument("--fraction", type=float, default=0.01)
    ch.add_argument("--seed", type=int)
    cd = add(
        "cordon-log-dir",
        cmd_cordon_log_dir,
        "KIP-1066 cordon: no new replicas on a dir, its replicas keep serving (--lift: undo)",
    )
    cd.add_argument("id", type=int)
    cd.add_argument("log_dir")
    cd.add_argument("--lift", action="store_true")
    lr = add(
        "log-dir-reset",
        cmd_log_dir_reset,
        "LogDirReset (superseded KIP-112 draft; a restart re-creates replicas) for a broker",
    )
    lr.add_argument("id", type=int)
    dl = add("demo-load", cmd_demo_load, "create demo topics and run a gentle produce load")
    dl.add_argument("--rate", type=float, default=20, help="records per second (total)")
    dl.add_argument("--duration", type=float, default=0, help="seconds; 0 = until sim down")
    dl.add_argument("--detach", action="store_true", help="run the load as a background process")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one CLI command. A refusal from the controller or an agent, or a process that does not
    answer, is one line on stderr (``error: CODE: message``) and exit 1, never a traceback:
    these are the operator's input or the cluster's state, not a bug in the CLI."""
    from broker_agent.contract.client import AgentError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AgentError as exc:
        print(f"error: {exc.error}: {exc.message}", file=sys.stderr)
    except httpx.TransportError as exc:
        try:
            where = str(exc.request.url)
        except RuntimeError:  # an error raised before a request was bound to it
            where = "the cluster"
        print(
            f"error: {where} did not answer ({type(exc).__name__}); is the cluster up?",
            file=sys.stderr,
        )
    return 1
