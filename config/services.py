"""PostgreSQL and Redis for ``make run``: use the configured servers, or start our own.

Decision: Strata starts its own server only when the URL is the default one (the variable is
unset) and nothing answers there. A URL the user set explicitly is never second-guessed: when it
does not answer, ``make run`` says which variable is wrong and how to fix it, and stops.

A server started here logs under ``run_dir/logs/`` (``postgres.log``, ``redis.log``), like every
process of ``make run``.

This module imports neither Django nor the project settings, so it can run before either works.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import redis
from psycopg import sql

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/strata"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

__all__ = ["ServiceError", "Started", "ensure_postgres", "ensure_redis", "started", "stop_started"]


class ServiceError(Exception):
    """A service is unreachable or misconfigured; the message says what to do."""


@dataclasses.dataclass
class Started:
    """A server this process started: how to stop it and how it was started (both run as
    ``user`` when set; ``make chaos`` stops and starts its private servers with them)."""

    name: str
    stop: list[str]
    user: str | None = None
    start: list[str] = dataclasses.field(default_factory=list)

    def command(self, which: str) -> list[str]:
        return _as_user(self.start if which == "start" else self.stop, self.user)


_started: list[Started] = []


def _as_user(cmd: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _apt_install(*packages: str) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(
            f"Needed {' '.join(packages)} but cannot install it (not root or no apt-get). "
            f"Install it, or point the URL at a running server."
        )
    print(f"Installing {' '.join(packages)} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, env=env)


def _pg_conninfo(url: str, dbname: str | None = None) -> dict:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ServiceError(
            f"DATABASE_URL={url!r} is not a PostgreSQL URL. Use postgres://USER[:PASSWORD]@HOST:PORT/DBNAME, "
            f"e.g. {DEFAULT_DATABASE_URL}."
        )
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 5432,
        "user": parts.username or "postgres",
        "password": parts.password or None,
        "dbname": dbname or (parts.path.lstrip("/") or "strata"),
        "connect_timeout": 3,
    }


def _pg_connect(url: str, dbname: str | None = None) -> psycopg.Connection:
    info = {k: v for k, v in _pg_conninfo(url, dbname).items() if v is not None}
    return psycopg.connect(**info, autocommit=True)


def postgres_home(run_dir: Path) -> Path:
    """Where our own PostgreSQL keeps its files: ``run_dir``, unless we are root and the postgres
    user cannot reach it (e.g. a clone under /root); then a folder of its own in /var/tmp, named
    after ``run_dir`` so that two clones never share one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return run_dir
    if (
        subprocess.run(
            _as_user(["test", "-x", str(run_dir.resolve())], "postgres"), check=False
        ).returncode
        == 0
    ):
        return run_dir
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"strata-postgres-{digest}"  # noqa: S108 (owned by postgres, 0700)


def _start_own_postgres(run_dir: Path, port: int) -> None:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _apt_install("postgresql")
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise ServiceError("PostgreSQL's initdb/pg_ctl were not found after installing postgresql.")
    user = "postgres" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
    home = postgres_home(run_dir)
    data = home / "postgres"
    sock = home / "postgres-socket"
    for d in (data, sock):
        d.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(d, user=user, group=user)
    os.chmod(data, 0o700)
    if not (data / "PG_VERSION").exists():
        print(f"Creating a PostgreSQL cluster in {data} ...", flush=True)
        subprocess.run(
            _as_user(
                [initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"], user
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    log = home / "logs" / "postgres.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    if user:
        shutil.chown(log, user=user, group=user)
    if home != run_dir:  # found under run_dir/logs/ all the same
        _link(run_dir / "logs" / "postgres.log", log)
    opts = f"-p {port} -h 127.0.0.1 -k {sock}"
    print(f"Starting PostgreSQL on 127.0.0.1:{port} (data in {data}) ...", flush=True)
    start = [pg_ctl, "-D", str(data), "-o", opts, "-l", str(log), "-w", "start"]
    # pg_ctl's own "waiting for server to start.... done" goes to the log, not the terminal
    with log.open("a") as fh:
        code = subprocess.run(
            _as_user(start, user), check=False, stdout=fh, stderr=subprocess.STDOUT
        ).returncode
    if code != 0:
        # the server's own words, not pg_ctl's exit status (a port taken, semaphores, ...)
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise ServiceError(
            f"PostgreSQL did not start on 127.0.0.1:{port} ({log}): " + " | ".join(tail)
        )
    _started.append(
        Started("PostgreSQL", [pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], user, start)
    )


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    if not link.exists():
        link.symlink_to(target)


def ensure_postgres(url: str, *, is_default: bool, run_dir: Path) -> str:
    """Make sure the server answers and the database exists; return a one-line status."""
    info = _pg_conninfo(url)
    try:
        conn = _pg_connect(url, "postgres")
    except psycopg.OperationalError as exc:
        text = " ".join(str(exc).split())
        reason = text or type(exc).__name__
        refused = any(
            m in text.lower() for m in ("connection refused", "no such file", "timeout expired")
        )
        if is_default and refused:
            _start_own_postgres(run_dir, info["port"])
            conn = _pg_connect(url, "postgres")
        elif is_default:
            raise ServiceError(
                f"PostgreSQL at {info['host']}:{info['port']} answers but refuses the connection ({reason}). "
                f"Set DATABASE_URL to a user and database that may connect, e.g. postgres://USER:PASSWORD@HOST:PORT/strata."
            ) from None
        else:
            raise ServiceError(
                f"DATABASE_URL is wrong or its server is down: cannot connect to PostgreSQL at "
                f"{info['host']}:{info['port']} as {info['user']} ({reason}). Fix DATABASE_URL "
                f"(postgres://USER[:PASSWORD]@HOST:PORT/DBNAME), start that server, or unset DATABASE_URL "
                f"to let `make run` use or start one on 127.0.0.1:5432."
            ) from None
    with conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (info["dbname"],)
        ).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(info["dbname"])))
            except psycopg.Error as exc:
                raise ServiceError(
                    f"DATABASE_URL: database {info['dbname']!r} is missing and could not be created ({exc}). "
                    f"Create it, or use a user allowed to (CREATEDB)."
                ) from None
            return f"PostgreSQL {info['host']}:{info['port']}: created database {info['dbname']}"
    return f"PostgreSQL {info['host']}:{info['port']}/{info['dbname']}: ok"


def _start_own_redis(run_dir: Path, port: int) -> None:
    server = shutil.which("redis-server")
    if not server:
        _apt_install("redis-server")
        server = shutil.which("redis-server")
    if not server:
        raise ServiceError("redis-server was not found after installing redis-server.")
    data = run_dir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    log = run_dir / "logs" / "redis.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"Starting Redis on 127.0.0.1:{port} (in {data}) ...", flush=True)
    start = [
        server,
        "--daemonize",
        "yes",
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(data),
        "--save",
        "",
        "--appendonly",
        "no",
        "--pidfile",
        str(data / "redis.pid"),
        "--logfile",
        str(log),
    ]
    subprocess.run(start, check=True)
    cli = shutil.which("redis-cli")
    _started.append(
        Started(
            "Redis",
            [cli, "-p", str(port), "shutdown", "nosave"] if cli else ["true"],
            start=start,
        )
    )
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    for _ in range(50):
        try:
            client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.1)
    raise ServiceError(f"Started redis-server but it does not answer on port {port}; see {log}.")


def ensure_redis(url: str, *, is_default: bool, run_dir: Path) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ServiceError(
            f"REDIS_URL={url!r} is not a Redis URL. Use redis://HOST:PORT/DB, e.g. {DEFAULT_REDIS_URL}."
        )
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if is_default:
            _start_own_redis(run_dir, port)
        else:
            raise ServiceError(
                f"REDIS_URL is wrong or its server is down: cannot reach Redis at {host}:{port} ({exc}). "
                f"Fix REDIS_URL (redis://HOST:PORT/DB), start that server, or unset REDIS_URL to let "
                f"`make run` use or start one on 127.0.0.1:6379."
            ) from None
    except redis.RedisError as exc:
        raise ServiceError(
            f"REDIS_URL: Redis at {host}:{port} refused us ({exc}). Check the password or DB."
        ) from None
    return f"Redis {host}:{port}: ok"


def started(name: str) -> Started | None:
    """The server named ``name`` ("PostgreSQL", "Redis") if this process started it."""
    return next((item for item in _started if item.name == name), None)


def stop_started() -> None:
    """Stop the servers this process started, newest first."""
    while _started:
        item = _started.pop()
        print(f"Stopping {item.name} ...", flush=True)
        subprocess.run(
            _as_user(item.stop, item.user),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
