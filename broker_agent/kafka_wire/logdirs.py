"""DescribeLogDirs, answered by each broker for its own log dirs (Kafka's
``ReplicaManager.describeLogDirs``; the admin client asks every broker).

- every configured dir (a dir removed from the configuration is not one), by absolute path;
- a dir that failed (OFFLINE: the real I/O error the broker hit, e.g. the folder replaced by a
  file) answers KAFKA_STORAGE_ERROR with no topics and total / usable bytes unknown (-1), as
  Kafka answers a dir that is not in its live dirs;
- a good dir: KIP-827 total / usable bytes (v4+; the capacity the broker was given, if any,
  as its snapshot reports it) and, per replica on it (the requested partitions, or all when
  ``topics`` is null), its size, its offset lag (``max(high watermark - log end offset, 0)``,
  Kafka's ``getLogEndOffsetLag``) and ``is_future`` (false: no replica is being moved between
  dirs); a topic with no requested partition on the dir is left out.
"""

from __future__ import annotations

import kafka.errors as Errors
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
from kafka.protocol.api_key import ApiKey

from broker_agent.kafka_wire.api import Api

__all__ = ["APIS"]

R = DescribeLogDirsResponse.DescribeLogDirsResult
T = R.DescribeLogDirsTopic
P = T.DescribeLogDirsPartition


def _wanted(request):
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def _describe_log_dirs(broker, request, _version):
    wanted = _wanted(request)
    results = []
    with broker.lock:
        for d in broker.log_dirs.values():
            info = broker.log_dir_info(d)
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
            by_topic: dict[str, list] = {}
            for (topic, p), r in sorted(broker.replicas.items()):
                plog = r.log
                if r.dir_name != d.name or plog is None:
                    continue
                if wanted is not None and (topic, p) not in wanted:
                    continue
                by_topic.setdefault(topic, []).append(
                    P(
                        partition_index=p,
                        partition_size=plog.size_bytes,
                        offset_lag=max(plog.high_watermark - plog.log_end_offset, 0),
                        is_future_key=False,
                    )
                )
            results.append(
                R(
                    error_code=0,
                    log_dir=info["path"],
                    topics=[T(name=t, partitions=ps) for t, ps in sorted(by_topic.items())],
                    total_bytes=info["total_bytes"],
                    usable_bytes=info["usable_bytes"],
                )
            )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


APIS = {
    ApiKey.DescribeLogDirs: Api(
        DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 4, _describe_log_dirs
    ),
}
