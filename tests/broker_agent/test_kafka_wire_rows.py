"""The Kafka listener's large answers carry their partitions as tuples (``kafka_wire.api.row_of``)
rather than a kafka-python struct object each (issue #35: the fleet's CPU). Encoded by the same
protocol class, they must be the same bytes as the structs at every version a handler answers:
a field added or dropped by a version (ListOffsets' leader epoch from v4, Metadata's offline
replicas from v5 and leader epoch from v7) must not shift the others."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin import DescribeLogDirsResponse
from kafka.protocol.consumer import ListOffsetsResponse
from kafka.protocol.metadata import MetadataResponse

from broker_agent.kafka_wire import cluster, logdirs, offsets
from broker_agent.kafka_wire.api import row_of

VALUES = {
    "partition_index": 7,
    "error_code": 6,
    "timestamp": -1,
    "offset": 123_456_789_012,
    "leader_epoch": 4,
    "partition_size": 1 << 33,
    "offset_lag": 12,
    "is_future_key": True,
    "leader_id": 3,
    "replica_nodes": [3, 1, 2],
    "isr_nodes": [3, 1],
    "offline_replicas": [2],
}


def _both(struct, version: int, names: tuple[str, ...]):
    """The struct object and the tuple form of the same partition answer."""
    row = row_of(struct, version, names)(tuple(VALUES[n] for n in names))
    return struct(**{n: VALUES[n] for n in names}), row


def _encoded(resp, version: int) -> bytes:
    return bytes(resp.encode(version=version))


@pytest.mark.parametrize("version", range(1, 10))
def test_list_offsets_rows_encode_as_the_structs(version):
    T = ListOffsetsResponse.ListOffsetsTopicResponse
    obj, row = _both(offsets.P, version, offsets.P_ROW)
    topic_row = row_of(T, version, offsets.T_ROW)
    as_struct = ListOffsetsResponse(
        throttle_time_ms=0, topics=[T(name="orders", partitions=[obj, obj])]
    )
    as_row = ListOffsetsResponse(throttle_time_ms=0, topics=[topic_row(("orders", [row, row]))])
    assert _encoded(as_row, version) == _encoded(as_struct, version)
    decoded = ListOffsetsResponse.decode(_encoded(as_row, version), version=version)
    [answer, _] = decoded.topics[0].partitions
    assert (answer.partition_index, answer.offset) == (7, 123_456_789_012)
    assert answer.leader_epoch == (4 if version >= 4 else -1)


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_log_dirs_rows_encode_as_the_structs(version):
    R = DescribeLogDirsResponse.DescribeLogDirsResult
    obj, row = _both(logdirs.P, version, logdirs.P_ROW)
    topic_row = row_of(logdirs.T, version, logdirs.T_ROW)

    def topic(p):
        if p is obj:
            return R.DescribeLogDirsTopic(name="orders", partitions=[p])
        return topic_row(("orders", [p]))

    as_struct, as_row = (
        DescribeLogDirsResponse(
            throttle_time_ms=0,
            error_code=0,
            results=[
                R(
                    error_code=0,
                    log_dir="/data/a",
                    topics=[topic(p)],
                    total_bytes=10,
                    usable_bytes=5,
                )
            ],
        )
        for p in (obj, row)
    )
    assert _encoded(as_row, version) == _encoded(as_struct, version)


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_rows_encode_as_the_structs(version):
    T = MetadataResponse.MetadataResponseTopic
    obj, row = _both(cluster.P, version, cluster.P_ROW)
    as_struct, as_row = (
        MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=3, host="h", port=1)],
            cluster_id="c",
            controller_id=3,
            topics=[
                T(
                    error_code=0,
                    name="orders",
                    topic_id=uuid.UUID(int=5),
                    is_internal=False,
                    partitions=[p],
                )
            ],
        )
        for p in (obj, row)
    )
    assert _encoded(as_row, version) == _encoded(as_struct, version)


def test_a_version_field_the_row_lacks_is_refused():
    with pytest.raises(ValueError, match="no tuple form"):
        row_of(offsets.P, 9, ("partition_index", "error_code", "timestamp", "offset"))
