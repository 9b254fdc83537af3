"""``make run`` is production-shaped by default (DEBUG off, a generated secret kept in .run/),
its Ctrl-C lets a worker's running task finish (#16), and its terminal stays calm: the URL, the
logins and a line per state change, every process's log in ``.run/logs/<name>.log`` (#39)."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
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


# -- the terminal and the logs (#39) -----------------------------------------------------------

#: What make run's terminal may show: a timestamped state-change line, the URL, the logins and
#: where the logs are. Anything else (an access-log line, Celery's banner, gunicorn's INFO lines)
#: is a process's log and belongs in its file.
_TERMINAL_LINE = re.compile(
    r"^(|\d\d:\d\d:\d\d \S.*"
    r"|Strata is up: http://127\.0\.0\.1:\d+/ .*"
    r"|Demo logins \(user / password / role\):"
    r"|  \S+ +\S+  \((viewer|operator|approver|admin)\)"
    r"|Logs: .*)$"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_text(
    path: Path, text: str, proc: subprocess.Popen, seconds: float, times: int = 1
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.read_text(errors="replace").count(text) >= times:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text()[-3000:]}")


@pytest.mark.integration
def test_each_process_logs_to_its_file_and_the_terminal_shows_only_url_logins_and_state_changes(
    tmp_path,
):
    import psycopg

    from config import seaweedfs
    from config.celery import app

    run_dir = tmp_path / "run"
    logs = run_dir / "logs"
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/strata")
    base, name = server.rsplit("/", 1)
    db = f"{name.split('?')[0]}_make_run"
    port = _free_port()
    out, err = tmp_path / "terminal.out", tmp_path / "terminal.err"
    with seaweedfs.private_store(tmp_path / "s3", "make-run"):
        env = {**os.environ, "STRATA_RUN_DIR": str(run_dir), "PORT": str(port),
               "DATABASE_URL": f"{base}/{db}", "STRATA_STOP_GRACE_SECONDS": "20",
               "PYTHONUNBUFFERED": "1"}  # fmt: skip
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "config.run"], cwd=ROOT, env=env,
                stdout=stdout, stderr=stderr, start_new_session=True,
            )  # fmt: skip
        try:
            _wait_text(out, "Strata is up", proc, 300)
            for _ in range(3):  # requests: gunicorn logs each one, to web.log only
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/") as r:
                    assert r.status == 200
            # a process that dies is a state change: one line, and it is restarted
            beat_pid = int(re.search(r"beat started \(pid (\d+)", out.read_text()).group(1))
            os.kill(beat_pid, signal.SIGKILL)
            _wait_text(err, "beat exited with code -9 (see ", proc, 60)
            _wait_text(out, "beat started", proc, 60, times=2)
            _wait_text(logs / "beat.log", "beat: Starting", proc, 60, times=2)  # appended
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            app.control.purge()  # what its beat queued for its worker stays out of the suite's
            with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    assert proc.returncode == 0, err.read_text()

    terminal = out.read_text().splitlines() + err.read_text().splitlines()
    assert [line for line in terminal if not _TERMINAL_LINE.match(line)] == []
    assert not any("GET /" in line or "celery" in line.lower() for line in terminal)
    text = out.read_text()
    assert text.count(f"Strata is up: http://127.0.0.1:{port}/") == 1
    passwords = json.loads((run_dir / "demo-users.json").read_text())
    assert all(text.count(f"  {pw}  ") == 1 for pw in passwords.values())  # shown once, last
    assert text.index("Strata is up") < text.index("Demo logins") < text.index("Logs: ")

    web = (logs / "web.log").read_text()
    assert web.count('"GET /accounts/login/ HTTP/1.1" 200') == 3 and "Booting worker" in web
    assert " ready." in (logs / "worker.log").read_text()
    assert (logs / "sim" / "controller.log").exists() and (logs / "sim" / "broker-1.log").exists()
    setup = (logs / "setup.log").read_text()
    assert "register_cluster" in setup
    # the simulated cluster twice: its agents and its Kafka listeners (#35)
    assert "Registered cluster local (agents" in setup
    assert "Registered cluster local-kafka (kafka, Kafka bootstrap 127.0.0.1:" in setup
    assert "The same cluster is 'local-kafka' through its Kafka listeners" in text
    every_log = "".join(p.read_text(errors="replace") for p in logs.rglob("*.log"))
    assert not any(pw in every_log for pw in passwords.values())


class _Health(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, dict] = (200, {})

    def do_GET(self):
        status, body = self.answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_health_line_names_what_is_down_and_a_web_server_that_does_not_answer():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/health"
    try:
        _Health.answer = (200, {"status": "ok", "database": "ok", "redis": "ok", "workers": 1,
                                "object_store": "ok"})  # fmt: skip
        ok = run.health_line(url)
        assert ok == "ok (database ok, redis ok, 1 worker, object store ok)"
        _Health.answer = (503, {"status": "unavailable", "database": "ok",
                                "redis": "error: ConnectionError", "workers": 0,
                                "object_store": "unknown"})  # fmt: skip
        down = run.health_line(url)
        assert down.startswith("unavailable") and "redis error: ConnectionError" in down
        assert "0 workers" in down
    finally:
        server.shutdown()
        server.server_close()
    assert run.health_line(url).startswith("web server not answering")
