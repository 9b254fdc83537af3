"""How Strata's KIP-950 tiering model maps onto what Kafka 3.9+ actually shipped. One place.

Strata follows KIP-950 as written (states, policy, a tiered epoch that fences stale commands).
Kafka 3.9 shipped config flags instead: ``retain`` ≈ ``remote.log.copy.disable=true``, ``delete``
≈ ``remote.storage.enable=false`` + ``remote.log.delete.on.disable=true``. DISABLING is not
observable (no per-broker acknowledgement: written like DISABLED, never read back) and there is
no tiered epoch: reads give ``tiered_epoch=None`` and an expected epoch is refused, not ignored.
Pure functions over config dicts (Kafka's strings, ``None`` = delete the override); a future
adapter for real clusters calls these and nothing else decides the mapping.
"""

from __future__ import annotations

import dataclasses

from broker_agent.contract.choices import DisablePolicy, ErrorCode, TieredState, TopicConfig

__all__ = [
    "REMOTE_LOG_COPY_DISABLE",
    "REMOTE_LOG_DELETE_ON_DISABLE",
    "REMOTE_STORAGE_ENABLE",
    "Kafka39MappingError",
    "TieringView",
    "configs_for_state",
    "copy_disable_violations",
    "disable_configs",
    "enable_configs",
    "from_configs",
]

REMOTE_STORAGE_ENABLE = TopicConfig.REMOTE_STORAGE_ENABLE  # "remote.storage.enable"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"
#: Each ``local.retention.*`` with the ``retention.*`` it must equal (or be -2, "the same") for
#: Kafka 3.9 to accept ``remote.log.copy.disable=true``.
LOCAL_RETENTION = (
    (TopicConfig.LOCAL_RETENTION_MS, TopicConfig.RETENTION_MS),
    (TopicConfig.LOCAL_RETENTION_BYTES, TopicConfig.RETENTION_BYTES),
)
SAME_AS_RETENTION = "-2"


class Kafka39MappingError(ValueError):
    """A Strata request that Kafka 3.9 cannot express; ``error`` is the KIP code to answer."""

    def __init__(self, error: str, message: str):
        super().__init__(message)
        self.error = error
        self.message = message


@dataclasses.dataclass(frozen=True)
class TieringView:
    """Strata's view of a Kafka 3.9 topic's tiering."""

    tiered_state: str
    disable_policy: str | None = None
    tiered_epoch: int | None = None
    """Always ``None`` for Kafka 3.9: it has no tiered epoch."""


def _true(configs: dict[str, str | None], key: str) -> bool:
    value = configs.get(key)
    return value is not None and value.strip().lower() == "true"


def from_configs(configs: dict[str, str | None]) -> TieringView:
    """Kafka 3.9 topic configs -> Strata's tiering state and policy (no tiered epoch).

    ``remote.storage.enable=false`` without ``remote.log.delete.on.disable=true`` is read as
    never tiered: Kafka 3.9 refuses to turn tiered storage off any other way.
    """
    if _true(configs, REMOTE_STORAGE_ENABLE):
        if _true(configs, REMOTE_LOG_COPY_DISABLE):
            return TieringView(TieredState.DISABLED, DisablePolicy.RETAIN)
        return TieringView(TieredState.ENABLED)
    if _true(configs, REMOTE_LOG_DELETE_ON_DISABLE):
        return TieringView(TieredState.DISABLED, DisablePolicy.DELETE)
    return TieringView(TieredState.NONE)


def configs_for_state(tiered_state: str, disable_policy: str | None = None) -> dict[str, str]:
    """Strata's tiering state (and policy) -> the full set of Kafka 3.9 tiering configs.

    ``DISABLING`` maps like ``DISABLED`` (3.9 has no in-between state to express).
    """
    if tiered_state == TieredState.NONE:
        return {REMOTE_STORAGE_ENABLE: "false"}
    if tiered_state == TieredState.ENABLED:
        return {REMOTE_STORAGE_ENABLE: "true", REMOTE_LOG_COPY_DISABLE: "false"}
    if tiered_state in (TieredState.DISABLING, TieredState.DISABLED):
        policy = _policy(disable_policy)
        if policy == DisablePolicy.RETAIN:
            return {REMOTE_STORAGE_ENABLE: "true", REMOTE_LOG_COPY_DISABLE: "true"}
        return {REMOTE_STORAGE_ENABLE: "false", REMOTE_LOG_DELETE_ON_DISABLE: "true"}
    raise Kafka39MappingError(ErrorCode.INVALID_REQUEST, f"unknown tiered state {tiered_state!r}")


def disable_configs(
    current: dict[str, str | None],
    policy: str | None = None,
    expected_tiered_epoch: int | None = None,
) -> dict[str, str | None]:
    """The incremental AlterConfigs that disables tiering on Kafka 3.9 with ``policy``.

    With ``retain``, each ``local.retention.*`` Kafka would refuse it with is set to -2 (the
    same as ``retention.*``) in the same request. Refused as Strata's controller refuses it: an unknown policy is ``INVALID_REQUEST``; a topic
    not ENABLED cannot be disabled (``INVALID_STATE_TRANSITION``). An ``expected_tiered_epoch`` is
    refused (``INVALID_REQUEST``): 3.9 has no epoch to check it against, and silently ignoring a
    fencing request would be worse than failing.
    """
    if expected_tiered_epoch is not None:
        raise Kafka39MappingError(
            ErrorCode.INVALID_REQUEST, "Kafka 3.9 has no tiered epoch to check"
        )
    policy = _policy(policy)
    state = from_configs(current).tiered_state
    if state != TieredState.ENABLED:
        raise Kafka39MappingError(
            ErrorCode.INVALID_STATE_TRANSITION, f"tiering is {state}, not ENABLED"
        )
    if policy == DisablePolicy.RETAIN:
        local = {key: SAME_AS_RETENTION for key, _total in copy_disable_violations(current)}
        return {**local, REMOTE_LOG_COPY_DISABLE: "true"}
    return {REMOTE_STORAGE_ENABLE: "false", REMOTE_LOG_DELETE_ON_DISABLE: "true"}


def copy_disable_violations(configs: dict[str, str | None]) -> list[tuple[str, str]]:
    """The ``(local.retention.*, retention.*)`` pairs that keep Kafka 3.9 from accepting
    ``remote.log.copy.disable=true`` (the local one neither -2 nor equal to the total): with
    copying stopped, local segments are the only copy of new data, so they must be kept as long
    as the topic's retention. Unset keys are at Kafka's defaults; a retain disablement sets the
    offending ones to -2 (:func:`disable_configs`)."""

    def value(key: str) -> str:
        v = configs.get(key)
        return str(TopicConfig.DEFAULTS[key] if v is None else v).strip()

    return [
        (local, total)
        for local, total in LOCAL_RETENTION
        if value(local) not in (SAME_AS_RETENTION, value(total))
    ]


def enable_configs(current: dict[str, str | None]) -> dict[str, str | None]:
    """The incremental AlterConfigs that (re-)enables tiering on Kafka 3.9.

    After ``retain`` only copying resumes; after ``delete`` tiered storage is switched on again
    and the delete flag dropped. Already ENABLED: nothing to change (``{}``), like a repeat.
    """
    view = from_configs(current)
    if view.tiered_state == TieredState.ENABLED:
        return {}
    if view.disable_policy == DisablePolicy.RETAIN:
        return {REMOTE_LOG_COPY_DISABLE: None}
    out: dict[str, str | None] = {REMOTE_STORAGE_ENABLE: "true"}
    if REMOTE_LOG_DELETE_ON_DISABLE in current:
        out[REMOTE_LOG_DELETE_ON_DISABLE] = None
    if REMOTE_LOG_COPY_DISABLE in current:
        out[REMOTE_LOG_COPY_DISABLE] = None
    return out


def _policy(policy: str | None) -> str:
    if policy is None:
        return DisablePolicy.DEFAULT
    if policy not in DisablePolicy.ALL:
        raise Kafka39MappingError(
            ErrorCode.INVALID_REQUEST,
            f"unsupported remote.log.disable.policy {policy!r} (retain or delete)",
        )
    return policy
