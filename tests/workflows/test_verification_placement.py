"""KIP-253: verification writes place records by linear hashing with U (fidelity gap 9).

The enable-tiering verify writes keyed marker records: they go to the partition linear hashing
with ``undeleted_partition_count`` puts their key on, as every producer of the topic would, and
so never to a partition marked for deletion (≥ U). The disk-recovery verify writes records
without a key (which may go to any partition below U) and leaves marked partitions out."""

from __future__ import annotations

import pytest

from broker_agent.contract.hashing import partition_for_key
from workflows.kinds.verification import VERIFY_KEY, verify_placement


@pytest.mark.parametrize(("initial", "undeleted"), [(1, 1), (2, 3), (3, 5), (4, 4), (4, 7)])
def test_verification_writes_place_records_by_linear_hashing_with_u(initial, undeleted):
    key, p = verify_placement(initial, undeleted, set(range(undeleted)))
    assert key == VERIFY_KEY
    assert p == partition_for_key(key.encode(), initial, undeleted)


def test_verification_writes_skip_partitions_marked_for_deletion():
    # 2 partitions at creation, expanded to 4, shrunk back to U = 2: 2 and 3 are marked (≥ U)
    # and still have leaders until they drain; linear hashing with U never picks them.
    for initial, undeleted, total in [(2, 2, 4), (3, 4, 6), (1, 3, 5)]:
        key, p = verify_placement(initial, undeleted, set(range(total)))
        assert p < undeleted
        assert p == partition_for_key(key.encode(), initial, undeleted)


def test_verification_key_moves_off_a_partition_without_a_leader():
    initial = undeleted = 4
    first = partition_for_key(VERIFY_KEY.encode(), initial, undeleted)
    led = set(range(undeleted)) - {first}
    key, p = verify_placement(initial, undeleted, led)
    assert key != VERIFY_KEY and p in led
    assert p == partition_for_key(key.encode(), initial, undeleted)  # still where the key hashes
    assert verify_placement(initial, undeleted, set()) is None
