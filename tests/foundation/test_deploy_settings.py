"""Production settings (DEBUG off) pass ``manage.py check --deploy`` and refuse to start unsafe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, run_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """``manage.py`` with production settings, its run dir ``run_dir`` (no ``make run`` beside
    it unless the test puts one there)."""
    drop = ("SECRET_KEY", "SECRET_KEY_FILE", "ALLOWED_HOSTS", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")
    base = {k: v for k, v in os.environ.items() if k not in drop}  # the last: tests only
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, "STRATA_RUN_DIR": str(run_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        run_dir=tmp_path,
        DEBUG="0",
        SECRET_KEY="k" * 20 + "-production-secret-key-with-enough-entropy-9f8e7d6c5b4a",
        ALLOWED_HOSTS="strata.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_secret_key_refuses_to_start(tmp_path):
    result = _manage("check", run_dir=tmp_path, DEBUG="0", ALLOWED_HOSTS="strata.example.com")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_debug_is_off_unless_set_and_a_shell_beside_make_run_uses_its_key(tmp_path):
    """#38: no ``DEBUG`` in the environment is production (refused without a key); beside the
    key ``make run`` generated, ``manage.py`` runs with that key and loopback hosts."""
    script = "from django.conf import settings as s; print(s.DEBUG, s.SECRET_KEY, s.ALLOWED_HOSTS)"
    production = {"DJANGO_SETTINGS_MODULE": "config.settings"}  # the suite's own sets DEBUG=1
    refused = _manage("shell", "-c", script, run_dir=tmp_path, **production)
    assert refused.returncode != 0 and "SECRET_KEY" in refused.stderr
    (tmp_path / "secret-key").write_text("make-run-generated-" + "k" * 40 + "\n")
    beside = _manage("shell", "-c", script, run_dir=tmp_path, **production)
    assert beside.returncode == 0, beside.stderr
    debug, key, hosts = beside.stdout.strip().splitlines()[-1].split(maxsplit=2)
    assert (debug, key) == ("False", "make-run-generated-" + "k" * 40) and "127.0.0.1" in hosts
    asked = _manage("shell", "-c", script, run_dir=tmp_path, DEBUG="1", **production)
    assert asked.stdout.strip().splitlines()[-1].startswith("True ")


def test_console_connections_run_without_jit_and_keep_options_the_url_gives(db, settings, tmp_path):
    """#17: no JIT compiling on the console's queries (90 ms for a 30 ms page query at fleet
    size), random pages priced for memory and SSD; ``?options=`` in DATABASE_URL is kept."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone()[0] == "off"
        cur.execute("SHOW random_page_cost")
        assert cur.fetchone()[0] == "1.1"
    script = (
        "from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS']['options'])"
    )
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    sep = "&" if "?" in url else "?"
    result = _manage(
        "shell",
        "-c",
        script,
        run_dir=tmp_path,
        DEBUG="1",
        DATABASE_URL=f"{url}{sep}options=-c%20work_mem%3D8MB",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        "-c work_mem=8MB -c jit=off -c random_page_cost=1.1"
    )
