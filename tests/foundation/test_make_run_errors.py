"""A wrong DATABASE_URL or REDIS_URL makes ``make run`` say which one and how to fix it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import services

ROOT = Path(__file__).resolve().parents[2]


def _run(**env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "STRATA_RUN_DIR": str(ROOT / ".run" / "test-run-errors"), **env}
    return subprocess.run(
        [sys.executable, "-m", "config.run"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unreachable_database_url_names_it_without_traceback():
    result = _run(DATABASE_URL="postgres://postgres@127.0.0.1:1/strata")
    assert result.returncode == 2
    assert "DATABASE_URL is wrong or its server is down" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_not_a_postgres_url_is_explained():
    result = _run(DATABASE_URL="mysql://root@127.0.0.1/strata")
    assert result.returncode == 2
    assert "is not a PostgreSQL URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_redis_url_names_it_without_traceback():
    result = _run(REDIS_URL="redis://127.0.0.1:1/0")
    assert result.returncode == 2
    assert "REDIS_URL is wrong or its server is down" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_missing_database_is_created(tmp_path):
    import psycopg

    name = f"strata_created_{os.getpid()}"
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    try:
        assert "created database" in services.ensure_postgres(
            url, is_default=False, run_dir=tmp_path
        )
        assert "ok" in services.ensure_postgres(url, is_default=False, run_dir=tmp_path)
    finally:
        with psycopg.connect(
            "postgres://postgres@127.0.0.1:5432/postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_wrong_user_is_reported_as_a_database_url_problem(tmp_path):
    with pytest.raises(services.ServiceError, match="DATABASE_URL"):
        services.ensure_postgres(
            "postgres://nobody-here@127.0.0.1:5432/strata", is_default=False, run_dir=tmp_path
        )
