"""The controller's checks of a topic's configs, as Kafka's ``LogConfig.validate`` makes them on
CreateTopics and IncrementalAlterConfigs: known keys, each value's type and range, and the
tiered-storage rules across keys (``local.retention.*`` within ``retention.*``; a compacted
topic cannot be tiered). Each failure is the ``ApiError`` the controller answers with."""

from __future__ import annotations

import re

from broker_agent.contract.choices import CleanupPolicy, DisablePolicy, ErrorCode, TopicConfig
from broker_agent.contract.errors import ApiError
from broker_agent.contract.remote_retention import validate_local_retention

__all__ = ["check_local_retention", "is_compacted", "validate_topic_configs"]


def validate_topic_configs(configs: dict[str, str | None]) -> None:
    """Each key known and each value of its type and range (``None`` deletes a key)."""
    for key, value in configs.items():
        if key not in TopicConfig.ALL:
            raise ApiError(400, ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
        if value is None:
            continue
        if key in (TopicConfig.REMOTE_STORAGE_ENABLE, TopicConfig.ENABLE_ORDERED_DELIVERY):
            if value not in ("true", "false"):
                raise ApiError(400, ErrorCode.INVALID_REQUEST, f"{key} must be true or false")
        elif key == TopicConfig.REMOTE_LOG_DISABLE_POLICY:
            if value not in DisablePolicy.ALL:
                raise ApiError(
                    400,
                    ErrorCode.INVALID_REQUEST,
                    f"unsupported remote.log.disable.policy {value!r} (retain or delete)",
                )
        elif key in (
            TopicConfig.LEADER_THROTTLED_REPLICAS,
            TopicConfig.FOLLOWER_THROTTLED_REPLICAS,
        ):
            items = [x.strip() for x in value.split(",")]
            if value.strip() != "*" and not all(
                re.fullmatch(r"([0-9]+:[0-9]+)?", x) for x in items
            ):
                raise ApiError(  # Kafka's ThrottledReplicaListValidator
                    400,
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {key}: must be the literal '*' or "
                    "a list of replicas in the following format: [partitionId]:[brokerId],"
                    "[partitionId]:[brokerId],...",
                )
        elif key == TopicConfig.CLEANUP_POLICY:
            parts = set(value.split(","))
            if not parts <= {CleanupPolicy.DELETE, CleanupPolicy.COMPACT}:
                raise ApiError(400, ErrorCode.INVALID_CONFIG, f"bad cleanup.policy {value!r}")
        else:
            try:
                number = int(value)
            except ValueError:
                raise ApiError(400, ErrorCode.INVALID_CONFIG, f"{key} must be an integer") from None
            low = {TopicConfig.SEGMENT_BYTES: 1024, TopicConfig.MIN_INSYNC_REPLICAS: 1}.get(key, -2)
            if number < low or number > 2**62:
                raise ApiError(400, ErrorCode.INVALID_CONFIG, f"{key} out of range")


def check_local_retention(configs: dict[str, str]) -> None:
    """Kafka's ``LogConfig.validateRemoteStorageRetentionSize`` / ``...Time`` as INVALID_CONFIG."""
    try:
        validate_local_retention(configs)
    except ValueError as exc:
        raise ApiError(400, ErrorCode.INVALID_CONFIG, str(exc)) from None


def is_compacted(configs: dict[str, str]) -> bool:
    return CleanupPolicy.COMPACT in configs.get(TopicConfig.CLEANUP_POLICY, "").split(",")
