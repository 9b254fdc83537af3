"""KIP-253 linear hashing and Kafka's murmur2 (vectors from Kafka's UtilsTest.testMurmur2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_agent.contract.hashing import (
    murmur2,
    parent_partition,
    partition_for_hash,
    partition_for_key,
    to_positive,
)

KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_utils(data, expected):
    assert murmur2(data) == expected


def test_to_positive_masks_the_sign_bit_like_kafka():
    assert to_positive(-790332482) == -790332482 & 0x7FFFFFFF == 1357151166
    assert to_positive(-(2**31)) == 0


@pytest.mark.parametrize(("data", "_h"), KAFKA_MURMUR2_VECTORS)
@pytest.mark.parametrize("n", [1, 3, 6, 10, 12, 50])
def test_linear_hashing_equals_default_partitioner_when_undeleted_equals_initial(data, _h, n):
    assert partition_for_key(data, n, n) == to_positive(murmur2(data)) % n


def test_known_default_partitioner_placement():
    # toPositive(murmur2("foobar")) = 1357151166; % 10 = 6, % 50 = 16
    assert partition_for_key(b"foobar", 10, 10) == 6
    assert partition_for_key(b"foobar", 50, 50) == 16


def test_parent_formula():
    # N = 3: partitions 3,4,5 split 0,1,2; 6..11 split 0..5
    assert [parent_partition(q, 3) for q in range(3, 12)] == [0, 1, 2, 0, 1, 2, 3, 4, 5]


@given(h=st.integers(0, 2**31 - 1), n=st.integers(1, 16), extra=st.integers(0, 64))
def test_expansion_moves_keys_only_to_the_new_partition_split_from_their_parent(h, n, extra):
    u = n + extra
    before = partition_for_hash(h, n, u)
    after = partition_for_hash(h, n, u + 1)
    assert 0 <= after < u + 1
    if after != before:
        # exactly one parent splits: the key moved to the new partition u, whose parent it was in
        assert after == u and parent_partition(u, n) == before
