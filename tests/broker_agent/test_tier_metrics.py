"""KIP-963's tiered metrics in the agent snapshot (#14 gap 11), and what a delete-policy
disablement fenced and the purge has not deleted yet (#14 gap 8)."""

from __future__ import annotations

import pytest

from broker_agent.contract.choices import ExpirationMode

from .conftest import wait_until
from .test_tiering_disablement import _produce_and_roll, _setup

pytestmark = pytest.mark.integration


def _copier_paused(agent, paused: bool) -> None:
    agent.request("PUT", "/v1/test/copier-paused", body={"paused": paused})


def test_copy_lag_grows_while_the_copier_cannot_keep_up_and_drains_after(
    sim_factory, agent_test_hooks
):
    sim = sim_factory(3, 1)
    leader = _setup(sim)
    r = sim.replica(leader, "tiered")
    assert (r.remote_copy_lag_bytes, r.remote_copy_lag_segments) == (0, 0)
    assert r.remote_log_size_bytes == r.remote_bytes > 0  # everything stored is readable
    assert (r.remote_delete_lag_bytes, r.fenced_remote_bytes) == (0, 0)
    followers = [b for b in (1, 2, 3) if b != leader]
    assert all(sim.replica(b, "tiered").remote_copy_lag_bytes == 0 for b in followers)

    _copier_paused(sim.agent(leader), True)
    _produce_and_roll(sim, "tiered", leader)
    lagging = wait_until(
        lambda: (x := sim.replica(leader, "tiered")).remote_copy_lag_segments > 0 and x,
        20,
        what="copy lag",
    )
    assert lagging.remote_copy_lag_bytes > 0
    assert lagging.remote_log_size_bytes == r.remote_log_size_bytes  # nothing copied meanwhile

    _copier_paused(sim.agent(leader), False)
    wait_until(
        lambda: sim.replica(leader, "tiered").remote_copy_lag_segments == 0, 30, what="caught up"
    )
    assert sim.replica(leader, "tiered").remote_log_size_bytes > r.remote_log_size_bytes


def test_a_delete_disablement_shows_fenced_bytes_apart_from_the_delete_lag_until_purged(
    sim_factory,
):
    sim = sim_factory(3, 1, "--expiration", ExpirationMode.EXTERNAL)
    leader = _setup(sim)
    stored = sim.replica(leader, "tiered").remote_log_size_bytes
    sim.cli("disable-tiering", "tiered", "--policy", "delete")
    r = sim.replica(leader, "tiered")
    # fenced at once: unreadable, still stored, pending the purge (external: the Spark job's)
    assert r.remote_bytes == 0 and r.remote_log_size_bytes == stored > 0
    assert r.fenced_remote_bytes == stored and r.fenced_remote_segments > 0
    # fenced bytes are their own figure: no expiration pass plans them (delete stops expiration)
    assert (r.remote_delete_lag_bytes, r.remote_delete_lag_segments) == (0, 0)
    assert r.remote_copy_lag_segments == 0  # the copier stopped: nothing is eligible

    sim.agent(leader).set_expiration_mode(ExpirationMode.INTERNAL)  # the agent purges now
    wait_until(
        lambda: (
            (x := sim.replica(leader, "tiered")).fenced_remote_segments == 0
            and x.remote_log_size_bytes == 0
        ),
        30,
        what="fenced segments purged",
    )


def test_delete_lag_is_what_the_expiration_pass_plans_to_delete(sim_factory):
    """KIP-963 RemoteDeleteLagBytes / Segments as Kafka's ``RLMExpirationTask`` reports them
    (``updateRemoteDeleteLagWith(segmentsLeftToDelete, sizeOfDeletableSegmentsBytes)``): the
    segments the current pass plans to delete, here every readable one once retention.ms has run
    out, and nothing while none breaches. External mode: the Spark job would delete them, so the
    lag stays until it runs."""
    sim = sim_factory(3, 1, "--expiration", ExpirationMode.EXTERNAL)
    leader = _setup(sim)
    r = sim.replica(leader, "tiered")
    assert r.remote_bytes > 0 and (r.remote_delete_lag_bytes, r.remote_delete_lag_segments) == (
        0,
        0,
    )

    sim.controller.alter_configs("tiered", {"retention.ms": "1"})
    lagging = wait_until(
        lambda: (x := sim.replica(leader, "tiered")).remote_delete_lag_segments > 0 and x,
        20,
        what="delete lag after retention.ms ran out",
    )
    assert lagging.remote_delete_lag_bytes == lagging.remote_bytes == r.remote_bytes
    assert lagging.fenced_remote_bytes == 0
