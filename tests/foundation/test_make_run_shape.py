"""``make run`` is production-shaped by default (DEBUG off, a generated secret kept in .run/),
and its Ctrl-C lets a worker's running task finish (#16)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from config import run

ROOT = Path(__file__).resolve().parents[2]
_KEYS = (
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "ALLOWED_HOSTS",
    "SECURE_SSL_REDIRECT",
    "STRATA_SECURE_COOKIES",
)


@pytest.fixture
def clean_env(monkeypatch):
    for key in _KEYS:
        monkeypatch.delenv(key, raising=False)


def _settings_in_child(env: dict[str, str]) -> list[str]:
    code = (
        "import os, django; django.setup(); from django.conf import settings as s; "
        "key = open(os.environ['SECRET_KEY_FILE']).read().strip(); "
        "print(s.DEBUG, s.SECRET_KEY == key, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, "
        "s.ALLOWED_HOSTS)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split(maxsplit=4)


def test_debug_is_off_with_a_generated_secret_kept_across_runs(clean_env, tmp_path):
    assert run.production_env(tmp_path) is False
    key = tmp_path / "secret-key"
    assert os.environ["DEBUG"] == "0" and os.environ["SECRET_KEY_FILE"] == str(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_text()
    assert len(first) > 40

    os.environ.pop("SECRET_KEY_FILE")
    run.production_env(tmp_path)  # the next make run keeps the same key (sessions survive)
    assert key.read_text() == first

    debug, same_key, ssl_redirect, secure_cookies, hosts = _settings_in_child(dict(os.environ))
    assert (debug, same_key, ssl_redirect, secure_cookies) == ("False", "True", "False", "False")
    assert "127.0.0.1" in hosts


def test_debug_1_is_kept_when_asked_for(clean_env, monkeypatch, tmp_path):
    monkeypatch.setenv("DEBUG", "1")
    assert run.production_env(tmp_path) is True
    assert not (tmp_path / "secret-key").exists() and "SECRET_KEY_FILE" not in os.environ


def test_a_given_secret_key_is_not_replaced(clean_env, monkeypatch, tmp_path):
    monkeypatch.setenv("SECRET_KEY", "x" * 50)
    run.production_env(tmp_path)
    assert not (tmp_path / "secret-key").exists() and "SECRET_KEY_FILE" not in os.environ


_WORKER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    done = sys.argv[1]
    # The "pool child": a task that takes a moment; killed by SIGTERM it never writes `done`.
    child = subprocess.Popen([sys.executable, "-c",
        "import time, sys; time.sleep(1.5); open(sys.argv[1], 'w').write('finished')", done])
    def warm(signum, frame):  # Celery's warm shutdown: wait for the running task, then exit
        child.wait()
        sys.exit(0)
    signal.signal(signal.SIGTERM, warm)
    open(done + ".ready", "w").close()
    while True:
        time.sleep(0.1)
    """
)


def test_stopping_lets_the_running_task_finish(tmp_path):
    done = tmp_path / "task-done"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(done)], start_new_session=True, cwd=tmp_path
    )
    _wait_for(Path(str(done) + ".ready"))
    run.stop_processes({"worker": proc}, grace=60)
    assert proc.returncode == 0
    assert done.read_text() == "finished"


def _wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def test_a_second_ctrl_c_does_not_wait(tmp_path):
    ready = tmp_path / "ready"
    stubborn = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(sys.argv[1], 'w').close()\n"
        "while True: time.sleep(0.1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", stubborn, str(ready)], start_new_session=True)
    _wait_for(ready)
    run.stop_processes({"stubborn": proc}, grace=600, hurry=lambda: True)
    assert proc.returncode == -signal.SIGKILL
