"""When a log dir's write probe is slow: one rule for the agent's DEGRADED grade and the console.

A probe is slow when it took more than :data:`SLOW_FACTOR` times the median of the broker's
other dirs' probes and more than :data:`SLOW_FLOOR_MS` (a 2 ms probe beside 0.1 ms peers is not
news). The agent grades a dir DEGRADED only when every probe of its last ``DEGRADED_WINDOW`` was
slow (``broker_agent.simulator.broker.logdirs``); the console marks a single slow probe of a dir still
ONLINE, so that a dir on its way to DEGRADED is seen before it gets there.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["SLOW_FACTOR", "SLOW_FLOOR_MS", "slow_probe"]

SLOW_FACTOR = 10
SLOW_FLOOR_MS = 50.0


def slow_probe(ms: float | None, peers: Sequence[float]) -> bool:
    """Whether a probe of ``ms`` is slow next to ``peers`` (the other dirs' probes on the same
    broker). No value or no peer to compare with: not slow."""
    if ms is None or not peers:
        return False
    return ms > max(SLOW_FLOOR_MS, SLOW_FACTOR * statistics.median(peers))
