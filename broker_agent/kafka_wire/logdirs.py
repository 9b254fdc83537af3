"""DescribeLogDirs and AlterReplicaLogDirs, answered by each broker for its own log dirs
(Kafka's ``ReplicaManager.describeLogDirs`` / ``alterReplicaLogDirs``; the admin client asks
every broker).

A failed (OFFLINE) dir answers KAFKA_STORAGE_ERROR with no topics and bytes -1, as Kafka answers
a dir not in its live dirs; a good one its KIP-827 total / usable bytes and its replicas with
size and offset lag (Kafka's ``getLogEndOffsetLag``), a replica being moved in listed as
``is_future``. AlterReplicaLogDirs (KIP-113) only starts a move through a future replica
(:mod:`broker_agent.simulator.broker.dirmoves` has the rules and codes); DescribeLogDirs shows its progress.
"""

from __future__ import annotations

import kafka.errors as Errors
from kafka.protocol.admin import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.api_key import ApiKey

from broker_agent.contract.choices import ErrorCode
from broker_agent.kafka_wire.api import Api, row_of

__all__ = ["APIS"]

R = DescribeLogDirsResponse.DescribeLogDirsResult
T = R.DescribeLogDirsTopic
P = T.DescribeLogDirsPartition
#: A replica's answer as :func:`_by_dir` makes it, a topic's as :func:`_describe_log_dirs`
#: does (:func:`~.api.row_of`'s names).
P_ROW = ("partition_index", "partition_size", "offset_lag", "is_future_key")
T_ROW = ("name", "partitions")


def _wanted(request):
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def _by_dir(broker, wanted, version: int) -> dict[str, dict[str, list]]:
    """dir name -> topic -> its replicas' answers (the current ones, then the future ones of a
    move), in one pass over the broker's replicas sorted once, not one per dir."""
    row = row_of(P, version, P_ROW)
    bulk = getattr(broker, "log_dir_rows", None)  # the synthetic fleet's: the same, at once
    if bulk is not None:
        return {
            d: {t: [row(x) for x in xs] for t, xs in ts.items()} for d, ts in bulk(wanted).items()
        }
    out: dict[str, dict[str, list]] = {}
    for (topic, p), r in sorted(broker.replicas.items()):
        plog = r.log
        if plog is None or (wanted is not None and (topic, p) not in wanted):
            continue
        out.setdefault(r.dir_name, {}).setdefault(topic, []).append(
            row((p, plog.size_bytes, max(plog.high_watermark - plog.log_end_offset, 0), False))
        )
    for (topic, p), move in sorted(broker.dir_mover.futures.items()):
        r = broker.replicas.get((topic, p))
        if r is None or r.log is None or (wanted is not None and (topic, p) not in wanted):
            continue
        out.setdefault(move.dir_name, {}).setdefault(topic, []).append(
            row((p, move.log.size_bytes, move.offset_lag(r.log), True))
        )
    return out


def _describe_log_dirs(broker, request, version):
    wanted = _wanted(request)
    results = []
    topic_row = row_of(T, version, T_ROW)
    with broker.lock:
        by_dir = _by_dir(broker, wanted, version)
        for d in broker.log_dirs.dirs.values():
            info = broker.log_dirs.info(d)
            if not d.good:
                results.append(
                    R(
                        error_code=Errors.KafkaStorageError.errno,
                        log_dir=info["path"],
                        topics=[],
                        total_bytes=-1,
                        usable_bytes=-1,
                    )
                )
                continue
            by_topic = by_dir.get(d.name, {})
            results.append(
                R(
                    error_code=0,
                    log_dir=info["path"],
                    topics=[topic_row(tp) for tp in sorted(by_topic.items())],
                    total_bytes=info["total_bytes"],
                    usable_bytes=info["usable_bytes"],
                )
            )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


#: the mover's answers -> Kafka error codes
_CODES = {
    ErrorCode.LOG_DIR_NOT_FOUND: Errors.LogDirNotFoundError.errno,
    ErrorCode.KAFKA_STORAGE_ERROR: Errors.KafkaStorageError.errno,
    ErrorCode.REPLICA_NOT_AVAILABLE: Errors.ReplicaNotAvailableError.errno,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: Errors.UnknownTopicOrPartitionError.errno,
}


def _alter_replica_log_dirs(broker, request, _version):
    AR = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
    AP = AR.AlterReplicaLogDirPartitionResult
    by_topic: dict[str, list] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                error = broker.dir_mover.alter(t.name, p, d.path)
                code = 0 if error is None else _CODES.get(error, Errors.UnknownError.errno)
                by_topic.setdefault(t.name, []).append(AP(partition_index=p, error_code=code))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0,
        results=[AR(topic_name=t, partitions=ps) for t, ps in by_topic.items()],
    )


APIS = {
    ApiKey.AlterReplicaLogDirs: Api(
        AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, 1, 2, _alter_replica_log_dirs
    ),
    ApiKey.DescribeLogDirs: Api(
        DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 4, _describe_log_dirs
    ),
}
