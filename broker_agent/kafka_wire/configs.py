"""DescribeConfigs (Kafka 3.9 ``ConfigHelper.describeConfigs``), from the broker's metadata
cache and its own start-up configuration.

Tiering is shown as Kafka 3.9 spells it (``remote.storage.enable``, ``remote.log.copy.disable``,
``remote.log.delete.on.disable``) through :mod:`broker_agent.contract.kafka39`, the one mapping, never as
KIP-950's ``remote.log.disable.policy``. Topic configs carry their source (DYNAMIC_TOPIC_CONFIG
for an override, else DEFAULT_CONFIG); a broker resource must name this broker's id
(INVALID_REQUEST otherwise, as Kafka), and only a few static configs plus the dynamic copy and
replication quotas are described. Synonyms are not modelled beyond each config's own entry.
"""

from __future__ import annotations

import os

import kafka.errors as Errors
from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.api_key import ApiKey

from broker_agent.contract import kafka39
from broker_agent.contract.choices import TieredState, TopicConfig
from broker_agent.kafka_wire.api import Api

__all__ = [
    "ALTER_LOG_DIRS_THROTTLE",
    "APIS",
    "REPLICATION_THROTTLED_RATES",
    "ConfigSource",
    "topic_configs",
]

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type codes


class ConfigSource:
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` codes."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# Kafka's ConfigDef types: BOOLEAN 1, STRING 2, INT 3, LONG 5, LIST 7
_TYPES = {
    TopicConfig.CLEANUP_POLICY: 7,
    TopicConfig.LEADER_THROTTLED_REPLICAS: 7,
    TopicConfig.FOLLOWER_THROTTLED_REPLICAS: 7,
    "leader.replication.throttled.rate": 5,
    "follower.replication.throttled.rate": 5,
    TopicConfig.RETENTION_MS: 5,
    TopicConfig.RETENTION_BYTES: 5,
    TopicConfig.LOCAL_RETENTION_MS: 5,
    TopicConfig.LOCAL_RETENTION_BYTES: 5,
    TopicConfig.SEGMENT_BYTES: 3,
    TopicConfig.MIN_INSYNC_REPLICAS: 3,
    TopicConfig.ENABLE_ORDERED_DELIVERY: 1,
    kafka39.REMOTE_STORAGE_ENABLE: 1,
    kafka39.REMOTE_LOG_COPY_DISABLE: 1,
    kafka39.REMOTE_LOG_DELETE_ON_DISABLE: 1,
    "broker.id": 3,
    "log.dirs": 7,
    "log.segment.bytes": 3,
    "replica.lag.time.max.ms": 5,
    "remote.log.storage.system.enable": 1,
    "replica.alter.log.dirs.io.max.bytes.per.second": 5,
}

#: The sim's KIP-950 names, replaced on the wire by Kafka 3.9's (kafka39.configs_for_state).
_KIP950_ONLY = {TopicConfig.REMOTE_STORAGE_ENABLE, TopicConfig.REMOTE_LOG_DISABLE_POLICY}


def topic_configs(t: dict) -> list[tuple[str, str, int]]:
    """``(name, value, source)`` of a topic's configs as a Kafka 3.9 broker describes them."""
    overrides = t["configs"]
    out = []
    for name, default in TopicConfig.DEFAULTS.items():
        if name in _KIP950_ONLY:
            continue
        if name in overrides:
            out.append((name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        else:
            out.append((name, default, ConfigSource.DEFAULT_CONFIG))
    state = t.get("tiered_state", TieredState.NONE)
    mapped = kafka39.configs_for_state(state, t.get("disable_policy"))
    set_on_topic = state != TieredState.NONE or TopicConfig.REMOTE_STORAGE_ENABLE in overrides
    for name in (
        kafka39.REMOTE_STORAGE_ENABLE,
        kafka39.REMOTE_LOG_COPY_DISABLE,
        kafka39.REMOTE_LOG_DELETE_ON_DISABLE,
    ):
        if name in mapped and (set_on_topic or name != kafka39.REMOTE_STORAGE_ENABLE):
            out.append((name, mapped[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        else:
            out.append((name, "false", ConfigSource.DEFAULT_CONFIG))
    return sorted(out)


#: Kafka's per-broker quota on moving replicas between dirs (the one dynamic broker config
#: here; :mod:`broker_agent.simulator.broker.dirmoves`)
ALTER_LOG_DIRS_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
CORDONED_LOG_DIRS = "cordoned.log.dirs"
#: Kafka's replication quotas (bytes/s) of the replicas the topics' *.throttled.replicas
#: name: kept and described (in memory, as the copy quota), not enforced by the sim's fetchers
REPLICATION_THROTTLED_RATES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
)


def _broker_configs(broker) -> list[tuple[str, str, int]]:
    static = ConfigSource.STATIC_BROKER_CONFIG
    dirs = ",".join(os.path.abspath(d.path) for d in broker.log_dirs.dirs.values())
    throttle = broker.dir_mover.throttle_bytes_per_s
    dynamic = ConfigSource.DYNAMIC_BROKER_CONFIG
    rates = getattr(broker, "replication_throttled_rates", {})
    cordoned = ",".join(
        os.path.abspath(d.path)
        for d in broker.log_dirs.dirs.values()
        if getattr(d, "cordoned", False)
    )
    return [
        *([(ALTER_LOG_DIRS_THROTTLE, str(throttle), dynamic)] if throttle is not None else []),
        *(
            (name, str(rates[name]), dynamic)
            for name in REPLICATION_THROTTLED_RATES
            if name in rates
        ),
        # KIP-1066 (Kafka 4.3): listed by every broker that has it, "" (default) when none is
        (CORDONED_LOG_DIRS, cordoned, dynamic if cordoned else ConfigSource.DEFAULT_CONFIG),
        ("broker.id", str(broker.broker_id), static),
        ("log.dirs", dirs, static),
        ("log.segment.bytes", str(broker.segment_bytes), static),
        ("remote.log.storage.system.enable", "true", static),
        ("replica.lag.time.max.ms", str(broker.replica_lag_time_max_ms), static),
    ]


_READ_ONLY = {"broker.id", "log.dirs", "remote.log.storage.system.enable"}

R = DescribeConfigsResponse.DescribeConfigsResult
C = R.DescribeConfigsResourceResult
S = C.DescribeConfigsSynonym


def _result(resource, error=0, message=None, configs=(), synonyms=False):
    keys = resource.configuration_keys
    return R(
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=[
            C(
                name=name,
                value=value,
                read_only=name in _READ_ONLY,
                config_source=source,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=[S(name=name, value=value, source=source)] if synonyms else [],
                config_type=_TYPES.get(name, 2),
                documentation=None,
            )
            for name, value, source in configs
            if keys is None or name in keys
        ],
    )


def _describe(broker, resource, synonyms: bool):
    if resource.resource_type == TOPIC:
        with broker.lock:
            t = broker.topics.get(resource.resource_name)
        if t is None:
            return _result(
                resource,
                Errors.UnknownTopicOrPartitionError.errno,
                f"The topic '{resource.resource_name}' does not exist.",
            )
        return _result(resource, configs=topic_configs(t), synonyms=synonyms)
    if resource.resource_type == BROKER:
        if resource.resource_name == "":
            return _result(resource)
        if resource.resource_name != str(broker.broker_id):
            return _result(
                resource,
                Errors.InvalidRequestError.errno,
                f"Unexpected broker id, expected {broker.broker_id} or empty string, but "
                f"received {resource.resource_name}",
            )
        return _result(resource, configs=_broker_configs(broker), synonyms=synonyms)
    return _result(
        resource,
        Errors.InvalidRequestError.errno,
        f"Unsupported resource type: {resource.resource_type}",
    )


def _describe_configs(broker, request, _version):
    synonyms = bool(getattr(request, "include_synonyms", False))
    return DescribeConfigsResponse(
        throttle_time_ms=0,
        results=[_describe(broker, res, synonyms) for res in request.resources],
    )


APIS = {
    ApiKey.DescribeConfigs: Api(
        DescribeConfigsRequest, DescribeConfigsResponse, 1, 4, _describe_configs
    ),
}
