"""The simulated cluster's real processes for console integration tests (``broker_agent`` CLI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from broker_agent.contract.client import AgentClient, ControllerClient

ROOT = Path(__file__).resolve().parents[2]


class SimCluster:
    """``python -m broker_agent sim up`` in a temporary data dir; always ``down`` at the end."""

    def __init__(self, data: Path, *, brokers: int = 3, log_dirs: int = 2, webhook: str = ""):
        self.data = data
        args = ["up", "--brokers", str(brokers), "--log-dirs", str(log_dirs)]
        args += ["--probe-interval", "0.5", "--session-timeout-ms", "3000"]
        if webhook:
            args += ["--webhook", webhook]
        out = self.cli(*args, timeout=120)
        self.urls = json.loads(out.strip().splitlines()[-1])
        self.secret_file = Path(self.urls.get("secret_file") or data / "secret")
        self.secret = self.secret_file.read_text().strip()
        self.controller = ControllerClient(self.urls["controller"], self.secret, timeout=15)

    def cli(self, *args: str, timeout: float = 60) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_AGENT_SECRET")}
        proc = subprocess.run(
            [sys.executable, "-m", "broker_agent", "sim", *args, "--data", str(self.data)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sim {args[0]} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def agent(self, broker_id: int) -> AgentClient:
        return AgentClient(self.urls["brokers"][str(broker_id)], self.secret, timeout=15)

    def log_dir_path(self, broker_id: int, name: str) -> Path:
        return self.data / f"broker-{broker_id}" / name

    def break_log_dir(self, broker_id: int, name: str) -> None:
        """KIP-112's system test: the folder is replaced by a file (chmod 000 does not stop
        root, so this is how the broker_agent tests fail a disk too)."""
        path = self.log_dir_path(broker_id, name)
        os.rename(path, f"{path}.removed")
        path.write_text("not a directory")

    def heal_log_dir(self, broker_id: int, name: str) -> None:
        """The disk is replaced (an empty folder) and the broker restarted: Kafka brings a
        failed dir back only then (KIP-112), and the broker, with no bad dir left, re-creates
        its replicas there."""
        path = self.log_dir_path(broker_id, name)
        path.unlink()
        path.mkdir()
        shutil.rmtree(f"{path}.removed", ignore_errors=True)
        self.cli("restart-broker", str(broker_id))

    def down(self) -> None:
        try:
            self.cli("down", timeout=60)
        finally:
            self.controller.close()


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
