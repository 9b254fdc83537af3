"""The Kafka 3.9 mapping of KIP-950 tiering (DESIGN.md): retain ~ remote.log.copy.disable=true,
delete ~ remote.storage.enable=false + remote.log.delete.on.disable=true, no tiered epoch."""

from __future__ import annotations

import pytest

from broker_agent.contract import kafka39
from broker_agent.contract.choices import DisablePolicy, ErrorCode, TieredState

ENABLED = {"remote.storage.enable": "true"}


def _apply(configs: dict, alter: dict) -> dict:
    """Incremental AlterConfigs as Kafka applies it (None deletes the override)."""
    out = dict(configs)
    for k, v in alter.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize(
    ("configs", "state", "policy"),
    [
        ({}, TieredState.NONE, None),
        ({"remote.storage.enable": "false"}, TieredState.NONE, None),
        (ENABLED, TieredState.ENABLED, None),
        ({**ENABLED, "remote.log.copy.disable": "false"}, TieredState.ENABLED, None),
        ({**ENABLED, "remote.log.copy.disable": "true"}, TieredState.DISABLED, "retain"),
        (
            {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
            TieredState.DISABLED,
            "delete",
        ),
        ({"remote.storage.enable": "TRUE"}, TieredState.ENABLED, None),
    ],
)
def test_kafka39_configs_read_as_kip950_state_without_tiered_epoch(configs, state, policy):
    view = kafka39.from_configs(configs)
    assert (view.tiered_state, view.disable_policy) == (state, policy)
    assert view.tiered_epoch is None


def test_retain_maps_to_copy_disable_and_delete_to_storage_off_with_delete_flag():
    assert kafka39.disable_configs(ENABLED, "retain") == {"remote.log.copy.disable": "true"}
    assert kafka39.disable_configs(ENABLED) == {"remote.log.copy.disable": "true"}  # default
    assert kafka39.disable_configs(ENABLED, "delete") == {
        "remote.storage.enable": "false",
        "remote.log.delete.on.disable": "true",
    }


@pytest.mark.parametrize("state", [TieredState.NONE, TieredState.ENABLED, TieredState.DISABLED])
@pytest.mark.parametrize("policy", DisablePolicy.ALL)
def test_state_to_configs_round_trips(state, policy):
    configs = kafka39.configs_for_state(state, policy)
    view = kafka39.from_configs(configs)
    assert view.tiered_state == state
    assert view.disable_policy == (policy if state == TieredState.DISABLED else None)


def test_disabling_is_written_like_disabled():
    assert kafka39.configs_for_state(TieredState.DISABLING, "delete") == (
        kafka39.configs_for_state(TieredState.DISABLED, "delete")
    )


@pytest.mark.parametrize("policy", DisablePolicy.ALL)
def test_disable_then_reenable_returns_to_enabled(policy):
    disabled = _apply(ENABLED, kafka39.disable_configs(ENABLED, policy))
    assert kafka39.from_configs(disabled).disable_policy == policy
    enabled = _apply(disabled, kafka39.enable_configs(disabled))
    assert kafka39.from_configs(enabled).tiered_state == TieredState.ENABLED
    assert "remote.log.delete.on.disable" not in enabled
    assert kafka39.enable_configs(enabled) == {}  # a repeat changes nothing


def test_requests_3_9_cannot_express_are_refused_with_kip_codes():
    with pytest.raises(kafka39.Kafka39MappingError) as exc:
        kafka39.disable_configs(ENABLED, "archive")
    assert exc.value.error == ErrorCode.INVALID_REQUEST
    with pytest.raises(kafka39.Kafka39MappingError) as exc:
        kafka39.disable_configs(ENABLED, "retain", expected_tiered_epoch=3)
    assert exc.value.error == ErrorCode.INVALID_REQUEST
    retained = {**ENABLED, "remote.log.copy.disable": "true"}
    with pytest.raises(kafka39.Kafka39MappingError) as exc:
        kafka39.disable_configs(retained, "delete")
    assert exc.value.error == ErrorCode.INVALID_STATE_TRANSITION
    with pytest.raises(kafka39.Kafka39MappingError):
        kafka39.configs_for_state("PAUSED")


def test_retain_sets_the_local_retention_kafka_refuses_copy_disable_without():
    """Kafka 3.9 accepts remote.log.copy.disable=true only with local.retention.* at -2 or equal
    to retention.*: the retain change sets the offending ones to -2 in the same request."""
    short_local = {
        **ENABLED,
        "retention.ms": "86400000",
        "local.retention.ms": "3600000",
        "retention.bytes": "1000",
        "local.retention.bytes": "1000",  # equal: accepted as is
    }
    assert kafka39.copy_disable_violations(short_local) == [("local.retention.ms", "retention.ms")]
    assert kafka39.disable_configs(short_local, "retain") == {
        "local.retention.ms": "-2",
        "remote.log.copy.disable": "true",
    }
    assert kafka39.copy_disable_violations(_apply(short_local, {"local.retention.ms": "-2"})) == []
    # unset keys are at Kafka's defaults (-2): nothing to change; delete has no such rule
    assert kafka39.copy_disable_violations({**ENABLED, "local.retention.bytes": "5"}) == [
        ("local.retention.bytes", "retention.bytes")
    ]
    assert "local.retention.ms" not in kafka39.disable_configs(short_local, "delete")
