"""KIP-950 tiering for the synthetic scale mode: controller and per-broker agent endpoints.

Mounted by :func:`install_tiering_routes` so ``ControllerClient`` / ``AgentClient`` and the
tiering workflows run unchanged against the one-process synthetic cluster: paths, models, error
codes and transitions are the real controller's and agent's, the transitions through
:mod:`broker_agent.contract.kip950`. Like the real agent, a disable acknowledges itself to the controller
state (every repeat re-sends the ack), so workflows never call ``/ack``. Every change is a new
metadata version and bumps the hosting brokers' snapshots; ``SyntheticCluster`` renders
metadata and snapshots from this state, so both report the same tiering (#14 gap 10).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Query
from fastapi.responses import Response

from broker_agent.contract import kip950
from broker_agent.contract.choices import (
    DisablePolicy,
    ErrorCode,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import CommandResult, RemoteTopicCommand, TieringCommandRequest

if TYPE_CHECKING:
    from broker_agent.simulator.synthetic import SyntheticCluster

__all__ = ["SyntheticTiering", "install_tiering_routes"]

_EPOCH_Q = {"ge": 0, "le": 2**31}


class SyntheticTiering:
    """Controller-side tiering state per topic and agent-side state per (broker, topic), over a
    :class:`~broker_agent.simulator.synthetic.SyntheticCluster`. Topics never touched keep the cluster's
    layout (even topics ENABLED, others NONE, epoch 0). Guarded by the cluster's lock."""

    def __init__(self, cluster: SyntheticCluster):
        self.cluster = cluster
        self.index = {name: t for t, name in enumerate(cluster.topics)}
        self.topics: dict[int, dict] = {}
        self.brokers: dict[tuple[int, int], dict] = {}
        self.applied: dict[int, dict[str, dict]] = {}

    # -- state -------------------------------------------------------------------------------

    def _t(self, name: str) -> int:
        t = self.index.get(name)
        if t is None:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return t

    def _initial_state(self, t: int) -> str:
        return TieredState.ENABLED if self.cluster.tiered(t) else TieredState.NONE

    def topic(self, t: int) -> dict:
        st = self.topics.get(t)
        if st is None:
            tiered = self.cluster.tiered(t)
            st = self.topics[t] = {
                "configs": {TopicConfig.REMOTE_STORAGE_ENABLE: "true"} if tiered else {},
                "tiered_state": self._initial_state(t),
                "tiered_epoch": 0,
                "disable_policy": None,
                "tiering_acks": set(),
            }
        return st

    def _range(self, t: int) -> range:
        return self.cluster.topic_range(t)

    def _hosts(self, broker_id: int, i: int) -> bool:
        c = self.cluster
        return (broker_id - 1 - i) % c.brokers < c.rf

    def hosting_brokers(self, t: int) -> set[int]:
        c = self.cluster
        first = self._range(t)
        # Replicas of i are (i + k) % brokers + 1: brokers consecutive partitions cover them all.
        sample = first[: min(len(first), c.brokers)]
        return {((i + k) % c.brokers) + 1 for i in sample for k in range(c.rf)}

    def _bump(self, t: int, snapshot_broker: int | None = None, metadata: bool = True) -> None:
        """One new version: the topic's head changed (its first partition is marked so a delta
        lists the topic) and / or ``snapshot_broker``'s replicas of it changed."""
        c = self.cluster
        c.version += 1
        v = c.version
        if metadata:
            anchor = self._range(t).start
            c.mversion[anchor] = v
            c._invalidate(anchor)
            c._meta_log.add(v, [anchor])
            c.metadata_version = v
        if snapshot_broker is not None:
            changed = [i for i in self._range(t) if self._hosts(snapshot_broker, i)]
            for i in changed:
                c.pversion[i] = v
                c._invalidate(i)
            c._snap_log.add(v, changed)
        c._cache.clear()
        c._cache_bytes = 0

    # -- rendering ---------------------------------------------------------------------------

    def replica_tiering(self, broker_id: int, t: int, is_leader: bool) -> tuple[str, int, str, str]:
        """What a replica of topic ``t`` on ``broker_id`` reports in its snapshot once that broker
        applied a Disable/EnableRemoteTopic: (tiered state, tiered epoch, copier state,
        expiration state), as the real broker's snapshot says it - disabled: the copier stops,
        remote expiration goes on with retain and stops with delete. Followers run no task."""
        cur = self.brokers[(broker_id, t)]
        state, epoch = cur["state"], cur["tiered_epoch"]
        if not is_leader:
            return state, epoch, TaskState.NOT_LEADER, TaskState.NOT_LEADER
        if state == TieredState.ENABLED:
            return state, epoch, TaskState.RUNNING, TaskState.RUNNING
        expiration = (
            TaskState.RUNNING if cur["policy"] == DisablePolicy.RETAIN else TaskState.STOPPED
        )
        return state, epoch, TaskState.STOPPED, expiration

    def cluster_tiering(self, t: int) -> tuple[str, int] | None:
        """The controller's (tiered state, tiered epoch) of ``t`` once a command touched it."""
        st = self.topics.get(t)
        return None if st is None else (st["tiered_state"], st["tiered_epoch"])

    def topic_body(self, t: int) -> bytes:
        return self.cluster._topic_json(t, self._range(t)).encode()

    # -- controller --------------------------------------------------------------------------

    def start_disable(self, name: str, req: TieringCommandRequest) -> bytes:
        with self.cluster.lock:
            t = self._t(name)
            kip950.start_disablement(name, self.topic(t), req.policy, req.expected_tiered_epoch)
            self._bump(t)
            return self.topic_body(t)

    def _ack(self, t: int, broker_id: int, tiered_epoch: int, snapshot: bool = False) -> None:
        recorded = kip950.record_ack(self.topic(t), broker_id, tiered_epoch)
        if recorded or snapshot:
            self._bump(t, broker_id if snapshot else None, metadata=recorded)

    def ack(self, name: str, broker_id: int, tiered_epoch: int) -> bytes:
        with self.cluster.lock:
            t = self._t(name)
            self._ack(t, broker_id, tiered_epoch)
            return self.topic_body(t)

    def complete_disable(self, name: str, req: TieringCommandRequest) -> bytes:
        with self.cluster.lock:
            t = self._t(name)
            st = self.topic(t)
            hosts = self.hosting_brokers(t)
            if kip950.complete_disablement(name, st, hosts, req.expected_tiered_epoch):
                self._bump(t)
            return self.topic_body(t)

    def enable(self, name: str, req: TieringCommandRequest) -> bytes:
        """The real controller's ``enable``: AlterConfigs ``remote.storage.enable=true`` with the
        expected-epoch check (synthetic topics are never compacted)."""
        with self.cluster.lock:
            t = self._t(name)
            st = self.topic(t)
            if req.policy is not None:
                raise ApiError(400, ErrorCode.INVALID_REQUEST, "re-enablement takes no policy")
            kip950.check_epoch(st, req.expected_tiered_epoch)
            kip950.re_enable(name, st, None)
            st["configs"] = {**st["configs"], TopicConfig.REMOTE_STORAGE_ENABLE: "true"}
            self._bump(t)
            return self.topic_body(t)

    # -- agents ------------------------------------------------------------------------------

    def _broker_topic(self, broker_id: int, cmd: RemoteTopicCommand) -> int:
        self.cluster._check_broker(broker_id)
        t = self.index.get(cmd.topic)
        if t is None or self.cluster.topic_ids[t] != cmd.topic_id:
            raise ApiError(
                404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {cmd.topic!r} / id"
            )
        return t

    def _broker_state(self, broker_id: int, t: int) -> dict:
        cur = self.brokers.get((broker_id, t))
        if cur is None:  # adopted from metadata, as a real broker does at topic creation
            cur = {
                "state": self._initial_state(t),
                "tiered_epoch": 0,
                "policy": None,
                "last_command": None,
            }
        return cur

    def _partitions(self, broker_id: int, t: int) -> list[int]:
        r = self._range(t)
        return [i - r.start for i in r if self._hosts(broker_id, i)]

    def disable_remote_topic(self, broker_id: int, cmd: RemoteTopicCommand) -> dict:
        if cmd.policy is not None and cmd.policy not in DisablePolicy.ALL:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, f"unsupported policy {cmd.policy!r}")
        with self.cluster.lock:
            t = self._broker_topic(broker_id, cmd)
            applied = self.applied.setdefault(broker_id, {})
            done = applied.get(cmd.idempotency_key)
            if done is not None:
                self._ack(t, broker_id, done["tiered_epoch"])
                return dict(done, applied=False)
            cur = self._broker_state(broker_id, t)
            epoch = cur["tiered_epoch"]
            if cmd.tiered_epoch < epoch or (
                cmd.tiered_epoch == epoch and cur["last_command"] != "disable"
            ):
                raise ApiError(
                    409,
                    ErrorCode.STALE_TIERED_EPOCH,
                    f"DisableRemoteTopic at tiered epoch {cmd.tiered_epoch}; broker applied {epoch}",
                    tiered_epoch=epoch,
                )
            repeat = cmd.tiered_epoch == epoch
            kip950.check_broker_command(cmd.topic, self.topic(t), "disable", cmd.tiered_epoch)
            policy = kip950.broker_disable_policy(cmd.topic, self.topic(t), cmd.policy)
            if not repeat:
                self.brokers[(broker_id, t)] = {
                    "state": TieredState.DISABLED,
                    "tiered_epoch": cmd.tiered_epoch,
                    "policy": policy,
                    "last_command": "disable",
                }
            result = {
                "topic": cmd.topic,
                "tiered_epoch": cmd.tiered_epoch,
                "applied": not repeat,
                "tiered_state": TieredState.DISABLED,
                "partitions": self._partitions(broker_id, t),
            }
            applied[cmd.idempotency_key] = result
            self._ack(t, broker_id, cmd.tiered_epoch, snapshot=not repeat)
            return result

    def enable_remote_topic(self, broker_id: int, cmd: RemoteTopicCommand) -> dict:
        if cmd.policy is not None:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "re-enablement takes no policy")
        with self.cluster.lock:
            t = self._broker_topic(broker_id, cmd)
            applied = self.applied.setdefault(broker_id, {})
            done = applied.get(cmd.idempotency_key)
            if done is not None:
                return dict(done, applied=False)
            cur = self._broker_state(broker_id, t)
            if cmd.tiered_epoch < cur["tiered_epoch"]:
                raise ApiError(
                    409,
                    ErrorCode.STALE_TIERED_EPOCH,
                    f"EnableRemoteTopic at tiered epoch {cmd.tiered_epoch}; broker applied "
                    f"{cur['tiered_epoch']}",
                    tiered_epoch=cur["tiered_epoch"],
                )
            repeat = cur["state"] == TieredState.ENABLED and cmd.tiered_epoch == cur["tiered_epoch"]
            kip950.check_broker_command(cmd.topic, self.topic(t), "enable", cmd.tiered_epoch)
            if not repeat:
                self.brokers[(broker_id, t)] = {
                    "state": TieredState.ENABLED,
                    "tiered_epoch": cmd.tiered_epoch,
                    "policy": None,
                    "last_command": "enable",
                }
                self._bump(t, broker_id, metadata=False)
            result = {
                "topic": cmd.topic,
                "tiered_epoch": cmd.tiered_epoch,
                "applied": not repeat,
                "tiered_state": TieredState.ENABLED,
                "partitions": self._partitions(broker_id, t),
            }
            applied[cmd.idempotency_key] = result
            return result


def install_tiering_routes(app: FastAPI, cluster: SyntheticCluster) -> SyntheticTiering:
    """Register the tiering endpoints of the controller and of every synthetic broker on ``app``
    (signed like every other route by :func:`broker_agent.server.web.install`); returns the state."""
    tiering = SyntheticTiering(cluster)

    def _json(body: bytes) -> Response:
        return Response(body, media_type="application/json")

    @app.post("/v1/topics/{topic}/tiering/disable")
    def start_disable(topic: str, req: TieringCommandRequest):
        """ENABLED -> DISABLING, tiered epoch + 1 (``TopicMetadata``)."""
        return _json(tiering.start_disable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/complete")
    def complete_disable(topic: str, req: TieringCommandRequest):
        """DISABLING -> DISABLED once every hosting broker acknowledged (``TopicMetadata``)."""
        return _json(tiering.complete_disable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/enable")
    def enable(topic: str, req: TieringCommandRequest):
        """DISABLED -> ENABLED, tiered epoch kept, no policy (``TopicMetadata``)."""
        return _json(tiering.enable(topic, req))

    @app.post("/v1/topics/{topic}/tiering/ack")
    def ack(
        topic: str,
        broker_id: int = Query(**_EPOCH_Q),
        tiered_epoch: int = Query(**_EPOCH_Q),
    ):
        """A broker acknowledges DisableRemoteTopic (``TopicMetadata``)."""
        return _json(tiering.ack(topic, broker_id, tiered_epoch))

    @app.post("/brokers/{broker_id}/v1/commands/disable-remote-topic", response_model=CommandResult)
    def disable_remote_topic(broker_id: int, cmd: RemoteTopicCommand):
        return tiering.disable_remote_topic(broker_id, cmd)

    @app.post("/brokers/{broker_id}/v1/commands/enable-remote-topic", response_model=CommandResult)
    def enable_remote_topic(broker_id: int, cmd: RemoteTopicCommand):
        return tiering.enable_remote_topic(broker_id, cmd)

    return tiering
