"""When the default URL answers nothing, ``make run`` starts its own PostgreSQL and Redis."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import psycopg
import pytest
import redis

from config import services

pytestmark = pytest.mark.integration


def _listen_ports(count: int) -> list[int]:
    """Ports free to listen on, below the kernel's ephemeral range: a port inside it (55432 was
    used) can be held by any outgoing connection's local end at the moment the server binds
    (connecting to it is refused - "nothing there" - yet the bind fails, Address already in use:
    the cause of this test's rare failures)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    found = []
    for port in range(min(low, 32768) - 12000, min(low, 32768)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise AssertionError("no free port below the ephemeral range")


def test_starts_and_stops_its_own_postgres_and_redis_when_nothing_answers(tmp_path, capfd):
    run_dir = tmp_path / "run"
    pg_port, redis_port = _listen_ports(2)  # free ports stand in for "nothing there"
    pg_url = f"postgres://postgres@127.0.0.1:{pg_port}/strata"
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    try:
        assert "created database strata" in services.ensure_postgres(
            pg_url, is_default=True, run_dir=run_dir
        )
        assert services.ensure_redis(redis_url, is_default=True, run_dir=run_dir).endswith("ok")
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert redis.Redis.from_url(redis_url).ping()
        # their logs are make run's too: under run_dir/logs/, and pg_ctl's chatter is not shown
        logs = run_dir / "logs"
        assert "ready to accept connections" in (logs / "postgres.log").read_text()
        assert "Ready to accept connections" in (logs / "redis.log").read_text()
        assert "waiting for server to start" not in capfd.readouterr().out
    finally:
        services.stop_started()
        home = services.postgres_home(run_dir)
        if home != run_dir:
            shutil.rmtree(home, ignore_errors=True)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_url, connect_timeout=2)
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
