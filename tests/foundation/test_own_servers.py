"""When the default URL answers nothing, ``make run`` starts its own PostgreSQL and Redis."""

from __future__ import annotations

import shutil

import psycopg
import pytest
import redis

from config import services

pytestmark = pytest.mark.integration


def test_starts_and_stops_its_own_postgres_and_redis_when_nothing_answers(tmp_path):
    run_dir = tmp_path / "run"
    pg_url = "postgres://postgres@127.0.0.1:55432/strata"  # free ports stand in for "nothing there"
    redis_url = "redis://127.0.0.1:56379/0"
    try:
        assert "created database strata" in services.ensure_postgres(
            pg_url, is_default=True, run_dir=run_dir
        )
        assert services.ensure_redis(redis_url, is_default=True, run_dir=run_dir).endswith("ok")
        with psycopg.connect("postgres://postgres@127.0.0.1:55432/strata") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert redis.Redis.from_url(redis_url).ping()
    finally:
        services.stop_started()
        home = services.postgres_home(run_dir)
        if home != run_dir:
            shutil.rmtree(home, ignore_errors=True)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect("postgres://postgres@127.0.0.1:55432/strata", connect_timeout=2)
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
