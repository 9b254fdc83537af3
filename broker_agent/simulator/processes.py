"""Process supervision of the simulated cluster: its data directory (cluster.json, the secret,
pid files), starting and stopping the controller, broker and synthetic processes, waiting for
their health. The process entry points ``sim up`` starts (``controller``, ``broker``,
``synthetic``) compose the simulator with its HTTP app, so they are the server's
(:mod:`broker_agent.server.entry`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import httpx

from broker_agent.contract.signing import load_secret, read_secret_file

__all__ = [
    "DEFAULT_DATA",
    "SIM_MODULE_ENV",
    "cluster_urls",
    "controller_client",
    "data_secret",
    "ensure_secret",
    "free_port",
    "free_ports",
    "kafka_bootstrap",
    "nonce_file",
    "read_cluster",
    "read_json",
    "running_pid",
    "setup_logging",
    "spawn",
    "start_broker",
    "stop_process",
    "wait_health",
    "write_json",
]


DEFAULT_DATA = ".run/sim"
#: The module the cluster's processes run as (``python -m``): ``broker_agent`` unless this names
#: another, such as the tests' entry point that adds their test-only endpoints
#: (``tests/broker_agent/agent_hooks.py``). Inherited by every process, so restarts keep it.
SIM_MODULE_ENV = "STRATA_SIM_MODULE"


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports. The sockets stay bound until all are chosen: closing
    each before asking for the next let the kernel hand out the same port twice (a cluster's
    controller and one of its brokers on one port, seen once in a full test run)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def read_json(path: str, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default


def write_json(path: str, obj) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(obj, fh, indent=2)
    os.replace(path + ".tmp", path)


def data_secret(data: str) -> bytes:
    """The cluster secret: the caller's (``STRATA_AGENT_SECRET[_FILE]``), else the one
    :func:`ensure_secret` wrote to ``<data>/secret``."""
    try:
        return load_secret()
    except RuntimeError:
        pass
    path = os.path.join(data, "secret")
    secret = read_secret_file(path)
    if secret is None:
        raise RuntimeError(f"{path} is empty: remove it and run `sim up` again")
    return secret.encode("utf-8", "surrogateescape")


def ensure_secret(data: str) -> dict[str, str]:
    """Env for child processes: the caller's secret, else ``<data>/secret`` (created once)."""
    env = {}
    if os.environ.get("STRATA_AGENT_SECRET") or os.environ.get("STRATA_AGENT_SECRET_FILE"):
        return env
    path = os.path.join(data, "secret")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    env["STRATA_AGENT_SECRET_FILE"] = os.path.abspath(path)
    return env


def _pid_path(data: str, name: str) -> str:
    return os.path.join(data, "pids", f"{name}.pid")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":
                return False
        return b"broker_agent" in cmd or (os.environ.get(SIM_MODULE_ENV) or "").encode() in cmd
    except FileNotFoundError:
        return False


def running_pid(data: str, name: str) -> int | None:
    try:
        with open(_pid_path(data, name)) as fh:
            pid = int(fh.read().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _pid_alive(pid) else None


def spawn(data: str, name: str, args: list[str], extra_env: dict[str, str]) -> int:
    os.makedirs(os.path.join(data, "logs"), exist_ok=True)
    os.makedirs(os.path.join(data, "pids"), exist_ok=True)
    env = dict(os.environ)
    env.update(extra_env)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    logf = open(os.path.join(data, "logs", f"{name}.log"), "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", os.environ.get(SIM_MODULE_ENV) or "broker_agent", *args],
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    logf.close()
    with open(_pid_path(data, name), "w") as fh:
        fh.write(str(proc.pid))
    return proc.pid


def stop_process(data: str, name: str, sig: int = signal.SIGTERM, wait: float = 5.0) -> bool:
    pid = running_pid(data, name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_pid_path(data, name))
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _pid_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        # gone before we return: a `sim up` right after must find its ports free
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _pid_alive(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
    return True


def wait_health(url: str, timeout: float = 30.0, until: str | None = None) -> bool:
    """``/v1/health`` answers 200 (and, with ``until``, says that field is true) in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url.rstrip("/") + "/v1/health", timeout=1)
            if r.status_code == 200 and (until is None or r.json().get(until)):
                return True
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    return False


def read_cluster(data: str) -> dict:
    c = read_json(os.path.join(data, "cluster.json"))
    if c is None:
        sys.exit(f"no simulated cluster in {data} (run: python -m broker_agent sim up)")
    return c


def kafka_bootstrap(c: dict) -> str | None:
    """The brokers' Kafka listeners as a bootstrap list (``host:port,...``), or ``None`` for a
    cluster without them."""
    listeners = [
        f"127.0.0.1:{b['kafka_port']}"
        for _, b in sorted(c["brokers"].items())
        if b.get("kafka_port")
    ]
    return ",".join(listeners) or None


def cluster_urls(c: dict) -> dict:
    return {
        "cluster_id": c["cluster_id"],
        "mode": c["mode"],
        "controller": c["controller"]["url"],
        "brokers": {bid: b["url"] for bid, b in c["brokers"].items()},
        "kafka_bootstrap": kafka_bootstrap(c),
        "secret_file": c.get("secret_file"),
    }


def controller_client(data: str):
    from broker_agent.contract.client import ControllerClient

    c = read_cluster(data)
    return ControllerClient(c["controller"]["url"], data_secret(data))


def setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("STRATA_AGENT_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)


def nonce_file(data: str, name: str) -> str:
    """Where process ``name`` keeps the nonces it has seen (replays stay refused across its
    restarts); beside the cluster's other files, outside any log dir."""
    return os.path.join(data, f"nonces-{name}.log")


def _broker_args(c: dict, bid: str) -> list[str]:
    b = c["brokers"][bid]
    args = [
        "broker",
        "--id",
        bid,
        "--data",
        c["data"],
        "--port",
        str(b["port"]),
        "--controller",
        c["controller"]["url"],
        "--cluster-id",
        c["cluster_id"],
        "--log-dirs",
        str(c["log_dirs"]),
        "--segment-bytes",
        str(c["segment_bytes"]),
        "--expiration",
        c["expiration"],
        "--probe-interval",
        str(c.get("probe_interval", 1.0)),
        "--replica-lag-time-max-ms",
        str(c.get("replica_lag_time_max_ms", 5000)),
    ]
    if c.get("webhook"):
        args += ["--webhook", c["webhook"]]
    if c.get("log_dir_capacity_bytes"):
        args += ["--log-dir-capacity-bytes", str(c["log_dir_capacity_bytes"])]
    if c.get("remote_store"):
        args += ["--remote-store", c["remote_store"]]
    if b.get("kafka_port"):
        args += ["--kafka-port", str(b["kafka_port"])]
    return args


def start_broker(c: dict, bid: str, env: dict) -> None:
    if running_pid(c["data"], f"broker-{bid}") is None:
        spawn(c["data"], f"broker-{bid}", _broker_args(c, bid), env)
