"""What the verifying steps write (``enable_tiering``'s ``verify_tiering`` and
``recover_log_dir``'s ``verify``): how many marker records, and where a keyed marker goes - by
KIP-253 linear hashing with the topic's undeleted partition count, as every producer of the topic
would place it."""

from __future__ import annotations

from broker_agent.contract.hashing import partition_for_key

__all__ = [
    "VERIFY_KEY",
    "VERIFY_KEY_CANDIDATES",
    "VERIFY_RECORDS",
    "VERIFY_TIMEOUT_SECONDS",
    "verify_placement",
]

#: Marker records per verified partition.
VERIFY_RECORDS = 5
VERIFY_KEY = "strata.verify"
#: Keys tried (``strata.verify``, ``strata.verify.1``, ...) for one that hashes to a led partition.
VERIFY_KEY_CANDIDATES = 64
VERIFY_TIMEOUT_SECONDS = 60.0


def verify_placement(
    initial_partition_count: int, undeleted_partition_count: int, led: set[int]
) -> tuple[str, int] | None:
    """The key of the marker records and the partition they go to: where KIP-253 linear hashing
    with U = ``undeleted_partition_count`` places the key, as every producer of the topic would.

    Writing a keyed record anywhere else would break the per-key order the topic promises, and
    linear hashing with U never picks a partition marked for deletion (those are ≥ U). The key is
    the first of ``strata.verify``, ``strata.verify.1``, ... that lands on a partition in ``led``
    (with a leader), so a leaderless partition does not stall the check; ``None`` when none of
    :data:`VERIFY_KEY_CANDIDATES` does."""
    for i in range(VERIFY_KEY_CANDIDATES):
        key = VERIFY_KEY if i == 0 else f"{VERIFY_KEY}.{i}"
        p = partition_for_key(key.encode(), initial_partition_count, undeleted_partition_count)
        if p in led:
            return key, p
    return None
