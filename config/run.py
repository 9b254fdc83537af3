"""``make run``: bring up Strata and everything it needs, in the foreground, until Ctrl-C.

Uses the configured PostgreSQL, Redis and object store, or starts its own under ``.run/``; then
migrations, static files, demo users, gunicorn, a Celery worker and beat. Ctrl-C sends SIGTERM
to each main process alone (Celery's warm shutdown lets tasks end) and kills what is left of its
group ``STRATA_STOP_GRACE_SECONDS`` later; a second Ctrl-C kills at once. The terminal stays
calm (one line per state change); every process logs under ``.run/logs/`` (:data:`LOG_DIR`).
Production-shaped unless ``DEBUG=1``: secrets generated once into ``.run/`` (0600), TLS-only
settings off because it serves plain HTTP on loopback. Migrations run as the owner, the
processes as ``STRATA_DB_APP_ROLE``, which cannot UPDATE, DELETE or TRUNCATE the audit table.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from config import edges, seaweedfs, services
from config.env import env_bool, env_float

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = Path(os.environ.get("STRATA_RUN_DIR", ROOT / ".run"))
PY = sys.executable
BIN = Path(sys.executable).parent
WEBHOOK_PATH = "/agent-events/local/"
#: Where every process ``make run`` starts writes its log, one file (or link) per process.
LOG_DIR = RUN_DIR / "logs"
#: How often the terminal's health line is refreshed (a line is printed only when it changes).
HEALTH_POLL_SECONDS = 10.0


def say(message: str, *, error: bool = False) -> None:
    """One state-change line on the terminal, with the time it happened."""
    out = sys.stderr if error else sys.stdout
    print(f"{time.strftime('%H:%M:%S')} {message}", file=out, flush=True)


def shown(path: Path) -> str:
    """``path`` as the user would type it: relative to the working directory when inside it."""
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def log_file(name: str, log_dir: Path | None = None) -> Path:
    """``.run/logs/<name>.log`` (its folder created)."""
    folder = log_dir or LOG_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.log"


def link_log(name: str, target: Path, log_dir: Path | None = None) -> None:
    """``.run/logs/<name>`` -> ``target``, for processes that keep their logs elsewhere (the
    simulated cluster's, a PostgreSQL home outside ``.run``), so every log is found there."""
    link = (log_dir or LOG_DIR) / name
    link.parent.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(target, link.parent)
    if link.is_symlink():
        if os.readlink(link) == relative:
            return
        link.unlink()
    elif link.exists():
        return  # a real file or folder of that name: leave it
    link.symlink_to(relative)


def _setup_log(text: str) -> None:
    with log_file("setup").open("a") as log:
        log.write(text)


def _manage(*args: str) -> str:
    """``manage.py args``: its stdout returned (the caller decides what to show or keep), its
    stderr in ``setup.log``."""
    with log_file("setup").open("a") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} manage.py {args[0]}\n")
        log.flush()
        out = subprocess.run(
            [PY, str(ROOT / "manage.py"), *args],
            check=True,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    return out.stdout


#: The simulated size of each log dir of make run's cluster (``sim up --log-dir-capacity-bytes``).
DEMO_LOG_DIR_CAPACITY_BYTES = 1 << 30


def _sim(*args: str) -> str:
    """Run a ``python -m broker_agent sim`` subcommand on make run's simulated cluster."""
    cmd = [PY, "-m", "broker_agent", "sim", *args, "--data", str(RUN_DIR / "sim")]
    with log_file("setup").open("a") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} sim {args[0]}\n")
        log.flush()
        out = subprocess.run(
            cmd, check=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True
        )
        log.write(out.stdout)
    return out.stdout


def _start_sim(port: str) -> None:
    """Start (or find running) the 3-broker, 2-dirs-per-broker simulated cluster, register it as
    ``local`` (agents) and, through its Kafka listeners, ``local-kafka`` (kafka), and start a
    gentle demo load. Remote retention is Spark's job here (external
    expiration), as the Spark issue asks of ``make run``."""
    say("Starting the simulated Kafka cluster (3 brokers x 2 log dirs) ...")
    link_log("sim", RUN_DIR / "sim" / "logs")
    out = _sim(
        "up",
        "--brokers",
        "3",
        "--log-dirs",
        "2",
        "--expiration",
        "external",
        # each dir its own 1 GiB disk: usage and "fits" are the dir's, not the host
        # filesystem's that every dir of the demo shares
        "--log-dir-capacity-bytes",
        str(DEMO_LOG_DIR_CAPACITY_BYTES),
        "--webhook",
        f"http://127.0.0.1:{port}{WEBHOOK_PATH}",
    )
    urls = json.loads(out.strip().splitlines()[-1])
    registered = _manage(
        "register_cluster",
        "local",
        "--controller",
        urls["controller"],
        "--secret-file",
        urls["secret_file"],
    )
    _setup_log(registered)
    kafka = _register_local_kafka(urls)
    _sim("demo-load", "--detach")
    say(
        f"Simulated cluster 'local' is up, with a demo load: controller {urls['controller']}, "
        f"brokers {', '.join(urls['brokers'].values())} (logs: {shown(LOG_DIR / 'sim')}/)"
    )
    if kafka:
        say(f"The same cluster is 'local-kafka' through its Kafka listeners: {kafka}")


def local_kafka_client_config(secret_file: str) -> str:
    """The client.properties of ``local-kafka``: the simulated brokers' Kafka listeners take
    SASL/PLAIN as user ``strata`` with the agents' secret (broker_agent/README.md), named by
    reference as any Kafka password is."""
    return (
        "# make run: the simulated cluster through its Kafka listeners\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.username=strata\n"
        f"sasl.password.ref={secret_file}\n"
    )


def _register_local_kafka(urls: dict) -> str | None:
    """Register the simulated cluster a second time, through Kafka's protocol, as
    ``local-kafka`` (issue #35: both backends side by side). Returns its bootstrap list, or
    ``None`` when ``sim up`` printed none (a cluster without listeners)."""
    bootstrap = urls.get("kafka_bootstrap")
    if not bootstrap or not urls.get("secret_file"):
        say("The simulated cluster has no Kafka listener: 'local-kafka' is not registered.")
        return None
    config = RUN_DIR / "local-kafka.properties"
    config.write_text(local_kafka_client_config(str(Path(urls["secret_file"]).resolve())))
    _setup_log(
        _manage(
            "register_cluster",
            "local-kafka",
            "--kafka-bootstrap",
            bootstrap,
            "--client-config",
            str(config),
        )
    )
    return bootstrap


def production_env(run_dir: Path = RUN_DIR) -> bool:
    """Fill in the environment ``make run``'s processes inherit (see the module docstring).
    Returns whether DEBUG is on."""
    os.environ.setdefault("DEBUG", "0")
    if env_bool("DEBUG"):
        return True
    if not os.environ.get("SECRET_KEY") and not os.environ.get("SECRET_KEY_FILE"):
        key = _secret_file(run_dir / "secret-key", lambda: secrets.token_urlsafe(50))
        os.environ["SECRET_KEY_FILE"] = str(key)
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    os.environ.setdefault("STRATA_SECURE_COOKIES", "0")
    return False


def _secret_file(path: Path, make: Callable[[], str]) -> Path:
    """``path``, created once with ``make()`` as its content, mode 0600."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(make() + "\n")
    return path


def audit_env(run_dir: Path = RUN_DIR) -> None:
    """The audit key every process signs with, kept outside PostgreSQL (see the docstring)."""
    if not os.environ.get("STRATA_AUDIT_KEY") and not os.environ.get("STRATA_AUDIT_KEY_FILE"):
        key = _secret_file(run_dir / "audit-key", lambda: secrets.token_hex(32))
        os.environ["STRATA_AUDIT_KEY_FILE"] = str(key)


def app_database_url(db_url: str, run_dir: Path = RUN_DIR) -> str:
    """``db_url`` as the application role, after ``grant_app_role`` (see the docstring); the
    owner's URL when ``STRATA_DB_APP_ROLE`` is empty or the grant fails (said on stderr)."""
    role = os.environ.get("STRATA_DB_APP_ROLE", "strata_app")
    if not role:
        return db_url
    password = _secret_file(run_dir / "db-app-password", lambda: secrets.token_urlsafe(24))
    try:
        _setup_log(_manage("grant_app_role", role, "--password-file", str(password)))
    except subprocess.CalledProcessError:
        say(
            f"make run: could not create the database role {role} (the DATABASE_URL role needs "
            "CREATEROLE and to own the tables); the processes run as the owner, so the audit "
            "table is protected only by its trigger. STRATA_DB_APP_ROLE= silences this.",
            error=True,
        )
        return db_url
    parts = urllib.parse.urlsplit(db_url)
    host = parts.hostname or "127.0.0.1"
    netloc = (
        f"{urllib.parse.quote(role)}:{urllib.parse.quote(password.read_text().strip())}"
        f"@{'[' + host + ']' if ':' in host else host}{f':{parts.port}' if parts.port else ''}"
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _spawn(name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in its own session, its stdout and stderr appended to ``.run/logs/<name>.log``
    (with the command line first), and say so in one line."""
    path = log_file(name)
    with path.open("ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, start_new_session=True, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    say(f"{name} started (pid {proc.pid}, log: {shown(path)})")
    return proc


def stop_processes(
    procs: dict[str, subprocess.Popen], grace: float, hurry: Callable[[], bool] = lambda: False
) -> None:
    """SIGTERM to each main process only (a Celery worker then finishes its running tasks and
    stops its pool itself; SIGTERM to the whole group killed the pool's children mid-task, with
    ``WorkerLostError``); after ``grace`` seconds, or as soon as ``hurry()`` says so, SIGKILL to
    what is left of each process group. Leftovers of a group whose main process exited (e.g. a
    child it did not reap) get SIGTERM."""
    for name, proc in procs.items():
        if proc.poll() is None:
            say(f"Stopping {name} ...")
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in procs.values()):
        if hurry() or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for proc in procs.values():
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            _signal_group(proc.pid, signal.SIGTERM)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
        os.killpg(pgid, sig)


def _wait_http(url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (our own loopback URL)
                return True
        except urllib.error.HTTPError:
            time.sleep(0.5)  # it answers, but not healthy yet (e.g. 503 until a worker is up)
        except OSError:
            time.sleep(0.3)
    return False


def health_line(url: str) -> str:
    """What ``/api/v1/health`` says, in one phrase (or why it does not answer): the terminal
    prints it again only when it changes."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our loopback URL)
            body = response.read()
    except urllib.error.HTTPError as exc:  # 503: it answers that something is down
        body = exc.read()
    except OSError as exc:
        return f"web server not answering ({getattr(exc, 'reason', exc)})"
    try:
        h = json.loads(body)
    except ValueError:
        return "web server answers, but not with the health JSON"
    workers = h.get("workers")
    return (
        f"{h.get('status')} (database {h.get('database')}, redis {h.get('redis')}, "
        f"{workers} worker{'' if workers == 1 else 's'}, object store {h.get('object_store')})"
    )


def _tail(path: Path, lines: int = 10) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main() -> int:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    debug = production_env()
    audit_env()
    port = os.environ.get("PORT", "8000")
    db_url = os.environ.get("DATABASE_URL", services.DEFAULT_DATABASE_URL)
    redis_url = os.environ.get("REDIS_URL", services.DEFAULT_REDIS_URL)
    procs: dict[str, subprocess.Popen] = {}
    stopping = False
    with_sim = os.environ.get("STRATA_SIM", "1") != "0"

    hurry = False

    def on_signal(signum, frame):
        nonlocal stopping, hurry
        hurry = stopping  # a second Ctrl-C: do not wait for running tasks
        stopping = True

    embedded_s3: seaweedfs.EmbeddedS3 | None = None
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            say(
                services.ensure_postgres(
                    db_url, is_default="DATABASE_URL" not in os.environ, run_dir=RUN_DIR
                )
            )
            say(
                services.ensure_redis(
                    redis_url, is_default="REDIS_URL" not in os.environ, run_dir=RUN_DIR
                )
            )
            status, embedded_s3 = seaweedfs.ensure_object_store(RUN_DIR, log=log_file("seaweedfs"))
            say(status)
        except (services.ServiceError, seaweedfs.ObjectStoreError, RuntimeError) as exc:
            print(f"\nmake run: {exc}\n", file=sys.stderr)
            return 2
        say(
            f"Migrating the database, collecting static files ... (log: {shown(log_file('setup'))})"
        )
        _manage("migrate", "--noinput", "-v", "0")
        if not debug:  # WhiteNoise serves the collected, compressed files
            _manage("collectstatic", "--noinput", "-v", "0")
        if with_sim:
            _start_sim(port)
        logins = _manage("demo_users", "--file", str(RUN_DIR / "demo-users.json"))
        app_env = {**os.environ, "DATABASE_URL": app_database_url(db_url)}

        commands = {
            "web": [str(BIN / "gunicorn"), "config.wsgi", "--bind", f"127.0.0.1:{port}",
                    "--workers", "2", "--threads", "4", "--timeout", "60", "--access-logfile", "-",
                    # above Strata's own URL limit: a long URL gets its JSON / text 414;
                    # past gunicorn's, the worker answers the same JSON (config.web_worker)
                    "--limit-request-line", str(edges.WEB_LIMIT_REQUEST_LINE),
                    "--worker-class", "config.web_worker.StrataWorker"],
            "worker": [str(BIN / "celery"), "-A", "config", "worker", "--loglevel", "INFO",
                       "--concurrency", "2", "--hostname", "strata@%h"],
            "beat": [str(BIN / "celery"), "-A", "config", "beat", "--loglevel", "INFO"],
        }  # fmt: skip
        for name, cmd in commands.items():
            procs[name] = _spawn(name, cmd, app_env)
        health = f"http://127.0.0.1:{port}/api/v1/health"
        if not _wait_http(health, 60):
            say(f"make run: {health} is not healthy after 60 s; see {shown(LOG_DIR)}/web.log "
                "and worker.log. It stays up: a line below says when that changes.", error=True)  # fmt: skip
        last_health = health_line(health)
        print(
            f"\nStrata is up: http://127.0.0.1:{port}/  (health: {health}). Ctrl-C stops it.\n"
            f"{logins}Logs: {shown(LOG_DIR)}/ (web.log, worker.log, beat.log, setup.log"
            f"{', sim/' if with_sim else ''}). Below, one line per state change.\n",
            flush=True,
        )
        next_health = time.monotonic() + HEALTH_POLL_SECONDS
        restarts: dict[str, list[float]] = {name: [] for name in commands}
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is None:
                    continue
                # Supervise like systemd's Restart=always: a Celery worker exits when its Redis
                # connection is lost (e.g. Redis restarted); workflow state is in PostgreSQL, so a
                # restarted worker picks up where the old one stopped. Give up on a crash loop.
                recent = [t for t in restarts[name] if time.monotonic() - t < 60] + [
                    time.monotonic()
                ]
                restarts[name] = recent
                log = shown(log_file(name))
                if len(recent) > 5:
                    say(f"make run: {name} keeps exiting (code {proc.returncode}, see {log}); "
                        "stopping everything.", error=True)  # fmt: skip
                    stopping = True
                    break
                say(
                    f"make run: {name} exited with code {proc.returncode} (see {log}); restarting it.",
                    error=True,
                )
                time.sleep(1)
                procs[name] = _spawn(name, commands[name], app_env)
            if not stopping and time.monotonic() >= next_health:
                now = health_line(health)
                if now != last_health:
                    say(f"health: {now}")
                    last_health = now
                next_health = time.monotonic() + HEALTH_POLL_SECONDS
            time.sleep(0.5)
        return 0
    except subprocess.CalledProcessError as exc:
        setup = log_file("setup")
        say(
            f"make run: {' '.join(map(str, exc.cmd))} failed with code {exc.returncode}; "
            f"its output is in {shown(setup)}, which ends with:\n{_tail(setup)}",
            error=True,
        )
        return 1
    finally:
        stop_processes(procs, env_float("STRATA_STOP_GRACE_SECONDS", 60.0), hurry=lambda: hurry)
        if with_sim:
            say("Stopping the simulated cluster ...")
            with log_file("setup").open("a") as log:
                subprocess.run(
                    [PY, "-m", "broker_agent", "sim", "down", "--data", str(RUN_DIR / "sim")],
                    cwd=ROOT,
                    check=False,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        if embedded_s3 is not None:
            say("Stopping SeaweedFS ...")
            embedded_s3.stop()
        services.stop_started()
        say("Stopped.")


if __name__ == "__main__":
    raise SystemExit(main())
