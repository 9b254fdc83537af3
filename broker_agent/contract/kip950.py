"""KIP-950's controller state machine for one topic, written once.

The simulated controller and the synthetic cluster keep a topic's tiering in a mapping
(``tiered_state``, ``tiered_epoch``, ``disable_policy``, ``tiering_acks``, ``configs``) and call
these functions for every transition, so their answers cannot drift. The rules are DESIGN.md's
"Domain rules / Tiering"; the non-obvious ones: an acknowledgement counts only for the current
epoch while DISABLING; a policy-only change on a DISABLED or never-tiered topic is
INVALID_CONFIG (it would show a policy other than the one applied); a broker applies a command
only at the controller's current epoch (older STALE_TIERED_EPOCH, newer UNKNOWN_TIERED_EPOCH,
as Kafka fences leader epochs), so a broker never runs ahead of its controller.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from broker_agent.contract.choices import DisablePolicy, ErrorCode, TieredState, TopicConfig
from broker_agent.contract.errors import ApiError

__all__ = [
    "begin_disablement",
    "check_broker_command",
    "check_epoch",
    "check_policy_change",
    "complete_disablement",
    "disable_policy_for",
    "disablement_in_progress",
    "re_enable",
    "record_ack",
    "start_disablement",
]

TopicState = MutableMapping[str, Any]


def disablement_in_progress(name: str, st: TopicState) -> ApiError:
    return ApiError(
        409,
        ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS,
        f"tiered storage disablement of {name} at tiered epoch {st['tiered_epoch']} is in progress",
    )


def check_epoch(st: TopicState, expected: int | None) -> None:
    """STALE_TIERED_EPOCH unless ``expected`` is None or the topic's tiered epoch."""
    if expected is not None and expected != st["tiered_epoch"]:
        raise ApiError(
            409,
            ErrorCode.STALE_TIERED_EPOCH,
            f"expected tiered epoch {expected}, topic is at {st['tiered_epoch']}",
            tiered_epoch=st["tiered_epoch"],
        )


def check_broker_command(name: str, st: TopicState, command: str, tiered_epoch: int) -> None:
    """Whether a broker may apply ``command`` (``"disable"`` / ``"enable"``) at ``tiered_epoch``,
    given the controller's state ``st`` of the topic (KIP-950 fidelity, two-sided fencing).

    The broker's own check (an epoch below the one it applied) comes first and stays; this one
    keeps a broker from applying a command the controller has not issued: an epoch from the
    future (a forged, replayed-from-elsewhere or mistyped request), or a disable of a topic the
    controller is not disabling."""
    current = st["tiered_epoch"]
    what = "DisableRemoteTopic" if command == "disable" else "EnableRemoteTopic"
    if tiered_epoch < current:
        raise ApiError(
            409,
            ErrorCode.STALE_TIERED_EPOCH,
            f"{what} at tiered epoch {tiered_epoch}; the controller's is {current}",
            tiered_epoch=current,
        )
    if tiered_epoch > current:
        raise ApiError(
            409,
            ErrorCode.UNKNOWN_TIERED_EPOCH,
            f"{what} at tiered epoch {tiered_epoch}; the controller's is {current} "
            "(a broker never applies an epoch its controller has not reached)",
            tiered_epoch=current,
        )
    allowed = (
        (TieredState.DISABLING, TieredState.DISABLED)
        if command == "disable"
        else (TieredState.ENABLED,)
    )
    if st["tiered_state"] not in allowed:
        raise ApiError(
            409,
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{what} for {name}, which the controller has {st['tiered_state']} at tiered "
            f"epoch {current}",
            tiered_epoch=current,
        )


def broker_disable_policy(name: str, st: TopicState, asked: str | None) -> str:
    """The policy a broker applies for a DisableRemoteTopic the controller issued (after
    :func:`check_broker_command`): the controller's disablement's. KIP-950's DisableRemoteTopic
    carries no policy - a broker reads it from the topic's metadata - so a command naming a
    different one than the controller's (``st``) is refused (INVALID_REQUEST) rather than
    applied: a retain broker next to delete brokers would serve data the others fenced. A
    command without a policy applies the controller's."""
    current = st.get("disable_policy") or disable_policy_for(st, None)
    if asked is not None and asked != current:
        raise ApiError(
            400,
            ErrorCode.INVALID_REQUEST,
            f"DisableRemoteTopic for {name} with policy {asked}; the controller's disablement at "
            f"tiered epoch {st['tiered_epoch']} applies {current}",
            tiered_epoch=st["tiered_epoch"],
            policy=current,
        )
    return current


def disable_policy_for(st: TopicState, asked: str | None) -> str:
    """The policy a disablement applies: the one asked for, else the one the configs hold, else
    KIP-950's default (retain)."""
    return (
        asked or st["configs"].get(TopicConfig.REMOTE_LOG_DISABLE_POLICY) or DisablePolicy.DEFAULT
    )


def check_policy_change(name: str, st: TopicState) -> None:
    """A change of ``remote.log.disable.policy`` without ``remote.storage.enable`` (set or
    deleted): only an ENABLED topic takes it, for its next disablement."""
    state = st["tiered_state"]
    if state == TieredState.DISABLING:
        raise disablement_in_progress(name, st)
    if state != TieredState.ENABLED:
        raise ApiError(
            400,
            ErrorCode.INVALID_CONFIG,
            f"{name} is {state}: remote.log.disable.policy applies to the next disablement, so "
            "it is set on an ENABLED topic (or with remote.storage.enable=false); here it would "
            "show a policy other than the one applied",
        )


def begin_disablement(st: TopicState, policy: str) -> None:
    """The transition ENABLED → DISABLING itself (the caller checked it is allowed)."""
    st["tiered_epoch"] += 1
    st["tiered_state"] = TieredState.DISABLING
    st["disable_policy"] = policy
    st["tiering_acks"] = set()
    st["configs"] = {
        **st["configs"],
        TopicConfig.REMOTE_STORAGE_ENABLE: "false",
        TopicConfig.REMOTE_LOG_DISABLE_POLICY: policy,
    }


def start_disablement(
    name: str, st: TopicState, policy: str | None, expected_epoch: int | None
) -> None:
    """Start disablement as asked by an operator: checks, then ENABLED → DISABLING."""
    if policy is not None and policy not in DisablePolicy.ALL:
        raise ApiError(
            400, ErrorCode.INVALID_REQUEST, f"unsupported remote.log.disable.policy {policy!r}"
        )
    if st["tiered_state"] == TieredState.DISABLING:
        raise disablement_in_progress(name, st)
    check_epoch(st, expected_epoch)
    if st["tiered_state"] != TieredState.ENABLED:
        raise ApiError(
            409,
            ErrorCode.INVALID_STATE_TRANSITION,
            f"{name} is {st['tiered_state']}, not ENABLED",
        )
    begin_disablement(st, disable_policy_for(st, policy))


def record_ack(st: TopicState, broker_id: int, tiered_epoch: int) -> bool:
    """Record a broker's DisableRemoteTopic acknowledgement; True if it counted."""
    if tiered_epoch == st["tiered_epoch"] and st["tiered_state"] == TieredState.DISABLING:
        st["tiering_acks"].add(broker_id)
        return True
    return False


def complete_disablement(
    name: str, st: TopicState, hosting_brokers: Iterable[int], expected_epoch: int | None
) -> bool:
    """DISABLING → DISABLED when every hosting broker acknowledged; False if already DISABLED."""
    check_epoch(st, expected_epoch)
    if st["tiered_state"] == TieredState.DISABLED:
        return False  # idempotent
    if st["tiered_state"] != TieredState.DISABLING:
        raise ApiError(409, ErrorCode.INVALID_STATE_TRANSITION, f"{name} is not DISABLING")
    pending = sorted(set(hosting_brokers) - st["tiering_acks"])
    if pending:
        raise ApiError(
            409,
            ErrorCode.TIERED_STORAGE_DISABLEMENT_INCOMPLETE,
            f"brokers {pending} have not acknowledged DisableRemoteTopic at tiered epoch "
            f"{st['tiered_epoch']}",
            pending_brokers=pending,
        )
    st["tiered_state"] = TieredState.DISABLED
    return True


def re_enable(name: str, st: TopicState, policy: str | None) -> None:
    """``remote.storage.enable=true``: DISABLED (or never tiered) → ENABLED; refused while
    DISABLING; an ENABLED topic stays as it is."""
    state = st["tiered_state"]
    if state == TieredState.DISABLING:
        raise disablement_in_progress(name, st)
    if state in (TieredState.DISABLED, TieredState.NONE):
        if policy is not None and state == TieredState.DISABLED:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "re-enablement takes no disable policy")
        if state == TieredState.DISABLED:  # that disablement's policy is spent
            st["configs"] = {
                k: v for k, v in st["configs"].items() if k != TopicConfig.REMOTE_LOG_DISABLE_POLICY
            }
        st["tiered_state"] = TieredState.ENABLED
        st["disable_policy"] = None
