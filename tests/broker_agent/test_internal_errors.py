"""An unexpected error answers 500 ``INTERNAL_ERROR`` with a generic message and a reference;
the exception's text (errno, file paths, class names) goes to the agent's log only (issue #11)."""

from __future__ import annotations

import re
import shutil

import pytest

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentError

from .conftest import wait_until

pytestmark = pytest.mark.integration


def test_a_500_from_an_agent_carries_no_exception_text(sim_factory):
    sim = sim_factory(1, 1)
    sim.cli("create-topic", "orders", "--partitions", "1", "--replication-factor", "1", "--tiered")
    wait_until(lambda: sim.replica(1, "orders"), 30, what="replica on broker 1")
    t = sim.controller.start_disable("orders", "retain", 0)
    # Break the broker's meta dir the way KIP-112's system tests break a disk: the folder
    # becomes a file, so persisting the applied DisableRemoteTopic fails with an OSError.
    meta = sim.data / "broker-1" / "meta"
    shutil.rmtree(meta)
    meta.write_text("not a directory")

    with pytest.raises(AgentError) as exc:
        sim.agent(1).disable_remote_topic("orders", t.topic_id, t.tiered_epoch, "retain")

    assert exc.value.status == 500
    assert set(exc.value.body) == {"error", "message"}
    assert exc.value.error == ErrorCode.INTERNAL_ERROR
    answered = exc.value.message
    for leak in ("Errno", "Not a directory", "NotADirectoryError", str(sim.data), "tiering"):
        assert leak not in answered
    ref = re.search(r"ref ([0-9a-f]+)", answered).group(1)
    log = (sim.data / "logs" / "broker-1.log").read_text()
    logged = next(line for line in log.splitlines() if f"ref={ref}" in line)
    assert "NotADirectoryError" in logged and "tiering.json" in logged
