"""IncrementalAlterConfigs on topics, validated as Kafka 3.9 validates them
(``ConfigAdminManager.prepareIncrementalConfigs`` then ``LogConfig.validate``, in that order),
then applied by the controller, as a Kafka broker forwards the request to the active controller.

Tiering is written in Kafka 3.9's keys and read through :mod:`broker_agent.contract.kafka39` (the one
mapping); KIP-950's ``remote.log.disable.policy`` is an unknown key (INVALID_CONFIG), as in
Kafka 3.9. A disable starts KIP-950's disablement, which the controller drives to DISABLED
itself. A broker takes only KIP-1066's ``cordoned.log.dirs``, the AlterReplicaLogDirs copy quota
and the replication quotas (longs >= 0; in memory, lost at restart), and only under its own id;
anything else is INVALID_REQUEST.
``validate_only`` checks everything and applies nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import httpx
import kafka.errors as Errors
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kafka.protocol.api_key import ApiKey

from broker_agent.contract import kafka39
from broker_agent.contract.choices import DisablePolicy, ErrorCode, TieredState, TopicConfig
from broker_agent.contract.client import AgentError
from broker_agent.contract.errors import ApiError
from broker_agent.kafka_wire.api import Api
from broker_agent.kafka_wire.configs import (
    ALTER_LOG_DIRS_THROTTLE,
    BROKER,
    CORDONED_LOG_DIRS,
    REPLICATION_THROTTLED_RATES,
    TOPIC,
    topic_configs,
)
from broker_agent.simulator.topic_configs import (
    check_local_retention,
    is_compacted,
    validate_topic_configs,
)

__all__ = ["APIS"]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_KEYS = {
    TopicConfig.CLEANUP_POLICY,
    TopicConfig.LEADER_THROTTLED_REPLICAS,
    TopicConfig.FOLLOWER_THROTTLED_REPLICAS,
}
TIERING_KEYS = (
    kafka39.REMOTE_STORAGE_ENABLE,
    kafka39.REMOTE_LOG_COPY_DISABLE,
    kafka39.REMOTE_LOG_DELETE_ON_DISABLE,
)
#: Kafka error codes of the controller's answers (KIP / Kafka names in ``choices.ErrorCode``).
_CODES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: Errors.UnknownTopicOrPartitionError.errno,
    ErrorCode.INVALID_CONFIG: Errors.InvalidConfigurationError.errno,
    ErrorCode.INVALID_REQUEST: Errors.InvalidRequestError.errno,
    ErrorCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC: (
        Errors.InvalidConfigurationError.errno
    ),
}


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _invalid_request(message: str) -> _Refused:
    return _Refused(Errors.InvalidRequestError.errno, message)


def _invalid_config(message: str) -> _Refused:
    return _Refused(Errors.InvalidConfigurationError.errno, message)


def _changes(t: dict, configs) -> dict[str, str | None]:
    """The sim's config changes (``None`` deletes) for the Kafka 3.9 operations ``configs``."""
    current = {name: value for name, value, _source in topic_configs(t)}
    tiering = {k: current[k] for k in TIERING_KEYS}
    changes: dict[str, str | None] = {}
    for c in configs:
        op, name, value = c.config_operation, c.name, c.value
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise _invalid_request(f"Unknown config operation {op} for {name}")
        if op == SET and value is None:
            raise _invalid_request(f"Null value not supported for : {name}")
        if op in (APPEND, SUBTRACT) and name not in LIST_KEYS:
            verb = "append" if op == APPEND else "subtract"
            raise _invalid_request(f"Config value {verb} is not allowed for config key: {name}")
        if name in TIERING_KEYS:
            tiering[name] = value if op == SET else "false"
            continue
        if name not in TopicConfig.ALL or name == TopicConfig.REMOTE_LOG_DISABLE_POLICY:
            raise _invalid_config(f"Unknown topic config name: {name}")
        if op == SET:
            changes[name] = value
        elif op == DELETE:
            changes[name] = None
        else:
            items = [x for x in current[name].split(",") if x]
            given = [x for x in (value or "").split(",") if x]
            if op == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            changes[name] = ",".join(items)
    before = kafka39.from_configs({k: current[k] for k in TIERING_KEYS})
    after = kafka39.from_configs(tiering)
    if after.disable_policy == DisablePolicy.RETAIN:
        merged = {**current, **changes}
        for k, v in changes.items():
            if v is None:
                merged[k] = TopicConfig.DEFAULTS[k]
        for local, total in kafka39.copy_disable_violations(merged):
            raise _invalid_config(
                f"When `{kafka39.REMOTE_LOG_COPY_DISABLE}` is set to true, the `{local}` and "
                f"`{total}` must be set to the identical value because there will be no more "
                "logs copied to the remote storage."
            )
    if after == before:
        return changes
    if after.tiered_state == TieredState.ENABLED:
        changes[TopicConfig.REMOTE_STORAGE_ENABLE] = "true"
    elif before.tiered_state == TieredState.ENABLED and after.disable_policy is not None:
        # Kafka 3.9's disablement, a config change the brokers act on with no acknowledgement:
        # KIP-950's steps at the controller, which drives them itself (_alter_topic)
        changes[TopicConfig.REMOTE_STORAGE_ENABLE] = "false"
        changes[TopicConfig.REMOTE_LOG_DISABLE_POLICY] = after.disable_policy
    elif before.tiered_state == TieredState.ENABLED:
        raise _invalid_config(
            "It is invalid to disable remote storage without deleting remote data. If you want "
            "to keep the remote data and turn to read only, please set "
            "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable "
            "remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )
    else:
        raise _invalid_request(
            f"the simulated cluster does not change a disabled topic's policy "
            f"({before.disable_policy} -> {after.disable_policy}) over Kafka's protocol: "
            "re-enable it first"
        )
    return changes


def _validate(t: dict, changes: dict[str, str | None]) -> None:
    """The controller's checks (Kafka's ``LogConfig.validate``), each failure INVALID_CONFIG."""
    merged = dict(t["configs"])
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    try:
        validate_topic_configs(changes)
        check_local_retention(merged)
    except ApiError as exc:
        raise _invalid_config(exc.message) from None
    tiered = (
        t.get("tiered_state") == TieredState.ENABLED
        or changes.get(TopicConfig.REMOTE_STORAGE_ENABLE) == "true"
    )
    if tiered and is_compacted(merged):
        raise _invalid_config("Remote log storage is not supported for compacted topics")


@contextlib.contextmanager
def _asking_controller(topic: str) -> Iterator[None]:
    """The controller's refusals and silence as Kafka error codes (an unknown topic with
    Kafka's own message)."""
    try:
        yield
    except AgentError as exc:
        if exc.status == 404:
            raise _Refused(
                Errors.UnknownTopicOrPartitionError.errno, f"The topic '{topic}' does not exist."
            ) from None
        raise _Refused(_CODES.get(exc.error, Errors.UnknownError.errno), exc.message) from None
    except httpx.HTTPError as exc:
        raise _Refused(
            Errors.RequestTimedOutError.errno, f"the controller did not answer: {exc}"
        ) from None


def _alter_topic(broker, resource, validate_only: bool) -> None:
    # A KRaft broker forwards IncrementalAlterConfigs and the controller applies APPEND /
    # SUBTRACT to its own record: a change acknowledged a moment ago counts even before this
    # broker's metadata cache has it.
    name = resource.resource_name
    with _asking_controller(name):
        t = broker.controller.topic(name).model_dump()
    changes = _changes(t, resource.configs)
    _validate(t, changes)
    if validate_only or not changes:
        return
    tiering = TopicConfig.REMOTE_STORAGE_ENABLE in changes
    with _asking_controller(name):
        broker.controller.alter_configs(name, changes, drive_brokers=tiering)


def _cordon(broker, c, validate_only: bool) -> None:
    """KIP-1066's ``cordoned.log.dirs`` (a list of the broker's dir paths): SET replaces it,
    APPEND / SUBTRACT add or take away paths, DELETE lifts every cordon; a path that is not
    one of the broker's dirs is INVALID_CONFIG. Kept as the dirs' cordon (across a restart)."""
    by_path = {os.path.abspath(d.path): d.name for d in broker.log_dirs.dirs.values()}
    now = {p for p, n in by_path.items() if broker.log_dirs.dirs[n].cordoned}
    given = {os.path.abspath(x.strip()) for x in (c.value or "").split(",") if x.strip()}
    unknown = sorted(given - set(by_path))
    if unknown:
        raise _invalid_config(
            f"Invalid value {c.value} for configuration {c.name}: not a log dir: {unknown}"
        )
    ops = {SET: given, DELETE: set(), APPEND: now | given, SUBTRACT: now - given}
    if c.config_operation not in ops:
        raise _invalid_request(f"Unknown config operation {c.config_operation}")
    wanted = ops[c.config_operation]
    if validate_only:
        return
    for path, name in sorted(by_path.items()):
        if (path in wanted) != (path in now):
            broker.log_dirs.cordon(name, path in wanted)


def _long_at_least_0(c) -> int:
    try:
        value = int(c.value)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise _invalid_config(
            f"Invalid value {c.value} for configuration {c.name}: Value must be at least 0"
        )
    return value


def _alter_broker(broker, resource, validate_only: bool) -> None:
    cordons = [c for c in resource.configs if c.name == CORDONED_LOG_DIRS]
    quotas = [c for c in resource.configs if c.name != CORDONED_LOG_DIRS]
    known = (ALTER_LOG_DIRS_THROTTLE, *REPLICATION_THROTTLED_RATES)
    others = sorted(c.name for c in quotas if c.name not in known)
    if others:
        raise _invalid_request(f"Cannot update these configs dynamically: Set({', '.join(others)})")
    if not resource.configs:
        return
    if resource.resource_name == "":
        raise _invalid_request("cluster-wide broker defaults are not kept by the simulated brokers")
    for c in cordons:  # checked before anything is applied
        _cordon(broker, c, validate_only=True)
    values: dict[str, int | None] = {}
    for c in quotas:  # duplicates were refused
        if c.config_operation == DELETE:
            values[c.name] = None
        elif c.config_operation == SET:
            values[c.name] = _long_at_least_0(c)
        else:
            raise _invalid_request(f"Config value append or subtract is not allowed: {c.name}")
    if validate_only:
        return
    for name, value in values.items():
        if name == ALTER_LOG_DIRS_THROTTLE:
            broker.dir_mover.throttle_bytes_per_s = value
        elif value is None:
            broker.replication_throttled_rates.pop(name, None)
        else:
            broker.replication_throttled_rates[name] = value
    for c in cordons:
        _cordon(broker, c, validate_only=False)


def _alter(broker, resource, validate_only: bool) -> tuple[int, str | None]:
    try:
        names = [c.name for c in resource.configs]
        if len(names) != len(set(names)):
            raise _invalid_request("Error due to duplicate config keys")
        if resource.resource_type == TOPIC:
            _alter_topic(broker, resource, validate_only)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.broker_id)):
                raise _invalid_request(
                    f"Unexpected broker id, expected {broker.broker_id} or empty string, but "
                    f"received {resource.resource_name}"
                )
            _alter_broker(broker, resource, validate_only)
        else:
            raise _invalid_request(f"Unsupported resource type: {resource.resource_type}")
    except _Refused as exc:
        return exc.code, exc.message
    return 0, None


def _incremental_alter_configs(broker, request, _version):
    R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    results = []
    for res in request.resources:
        code, message = _alter(broker, res, bool(request.validate_only))
        results.append(
            R(
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


APIS = {
    ApiKey.IncrementalAlterConfigs: Api(
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        0,
        1,
        _incremental_alter_configs,
    ),
}
