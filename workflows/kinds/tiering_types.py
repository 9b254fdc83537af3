"""The typed requests and plans of ``disable_tiering`` and ``enable_tiering`` (KIP-950).

Shared by the kinds (:mod:`workflows.kinds.tiering`) and the per-broker fan-out
(:mod:`workflows.kinds.tiering_fanout`), which runs for both."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from broker_agent.contract.models import TOPIC_NAME_MAX_LENGTH
from workflows.kinds.schema import Actions, Params, choice, text

__all__ = [
    "DisableParams",
    "DisablePlan",
    "EnableParams",
    "EnablePlan",
    "GrowthActions",
    "TieringPlan",
    "TopicParams",
]


class TopicParams(Params):
    topic: str = text("Topic", max_length=TOPIC_NAME_MAX_LENGTH)  # Kafka's limit for a name


class EnableParams(TopicParams):
    """Re-enablement takes no policy (KIP-950)."""


class DisableParams(TopicParams):
    # broker_agent.contract.choices.DisablePolicy.ALL, default RETAIN (KIP-950 remote.log.disable.policy)
    policy: Literal["retain", "delete"] = choice(
        "Disable policy",
        default="retain",
        help="remote.log.disable.policy: retain keeps remote data readable; delete purges it.",
    )


class GrowthDir(TypedDict):
    broker: int
    log_dir: str
    replicas: int
    fits: bool


class GrowthActions(TypedDict):
    """Which dirs fit the local growth a retain disablement brings (an action, no bytes)."""

    log_dirs: list[GrowthDir]
    all_fit: bool
    unplaced_replicas: list[str]


class TieringPlan(Actions):
    """What both tiering kinds' plans name: the topic as planned and its hosting brokers."""

    summary: str
    topic: str
    topic_id: str
    tiered_state: str
    tiered_epoch: int
    partitions: int
    brokers: list[int]
    steps: list[str]


class DisablePlan(TieringPlan):
    policy: Literal["retain", "delete"]
    adopt: bool
    new_tiered_epoch: int
    replicas_per_broker: dict[str, int]
    effect: str
    disk_growth: GrowthActions | None = None  # policy retain
    fenced_segments: str | None = None  # policy delete


class EnablePlan(TieringPlan):
    verification: str
