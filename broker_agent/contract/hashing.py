"""Kafka's murmur2 and KIP-253 linear hashing.

:func:`murmur2` is a bit-exact port of ``org.apache.kafka.common.utils.Utils.murmur2`` (signed
32-bit result, as Java returns it) and :func:`to_positive` of ``Utils.toPositive``. With
``undeleted_partition_count == initial_partition_count`` :func:`partition_for_key` is exactly
Kafka's default partitioner, ``toPositive(murmur2(key)) % numPartitions``.
"""

from __future__ import annotations

__all__ = [
    "murmur2",
    "parent_partition",
    "partition_for_key",
    "partitions_split_from",
    "to_positive",
]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka ``Utils.murmur2``: seed 0x9747b28c, m 0x5bd1e995, r 24; little-endian 4-byte words."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = length & ~3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka ``Utils.toPositive``: ``number & 0x7fffffff`` (not ``abs``)."""
    return number & 0x7FFFFFFF


def _level(initial_partition_count: int, undeleted_partition_count: int) -> int:
    if initial_partition_count <= 0 or undeleted_partition_count < initial_partition_count:
        raise ValueError("need 0 < initial_partition_count <= undeleted_partition_count")
    level = 0
    while initial_partition_count << (level + 1) <= undeleted_partition_count:
        level += 1
    return level


def partition_for_hash(h: int, initial_partition_count: int, undeleted_partition_count: int) -> int:
    """KIP-253 linear hashing: L largest with N*2^L <= U, S = U - N*2^L;
    p = h mod N*2^L, and if p < S, p = h mod N*2^(L+1)."""
    n = initial_partition_count
    level = _level(n, undeleted_partition_count)
    split = undeleted_partition_count - (n << level)
    p = h % (n << level)
    if p < split:
        p = h % (n << (level + 1))
    return p


def partition_for_key(
    key: bytes, initial_partition_count: int, undeleted_partition_count: int
) -> int:
    return partition_for_hash(
        to_positive(murmur2(key)), initial_partition_count, undeleted_partition_count
    )


def parent_partition(q: int, initial_partition_count: int) -> int:
    """The one partition that partition ``q`` (q >= N) splits: ``q - N*2^floor(log2(q/N))``."""
    n = initial_partition_count
    if q < n:
        raise ValueError("partitions below the initial count have no parent")
    level = 0
    while n << (level + 1) <= q:
        level += 1
    return q - (n << level)


def partitions_split_from(
    parent: int, initial_partition_count: int, undeleted_partition_count: int
) -> list[int]:
    """Children of ``parent`` among the partitions that exist (used by consumers, KIP-253 4.2)."""
    return [
        q
        for q in range(initial_partition_count, undeleted_partition_count)
        if parent_partition(q, initial_partition_count) == parent
    ]
