"""KIP-950 / KIP-405 on a broker: the per-partition tiering tasks the maintenance pass runs
(copier, local retention, remote expiration — two tasks per partition — and the clean-up of
failed copies), DisableRemoteTopic / EnableRemoteTopic with their persisted state, the remote
log as the broker's cache of the store sees it, and the remote inventory and
external-expiration endpoints the Spark jobs use.

:class:`Tiering` is a part of :class:`broker_agent.simulator.broker.Broker` (the broker's maintenance
thread calls its tasks).
"""

from __future__ import annotations

import json
import os

import httpx

from broker_agent.contract import kip950
from broker_agent.contract.choices import (
    CleanupPolicy,
    DisablePolicy,
    ErrorCode,
    ExpirationMode,
    RemoteSegmentState,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.contract.client import AgentError, ControllerClient
from broker_agent.contract.errors import ApiError
from broker_agent.contract.remote_retention import plan_expiration
from broker_agent.simulator.broker.state import BrokerCore, Replica, _now_ms
from broker_agent.simulator.remote import RemoteStorageError, RemoteStore, is_readable

__all__ = ["DANGLING_COPY_MS", "Tiering"]

#: A COPY_SEGMENT_STARTED record older than this is a failed copy (the copier writes its three
#: steps within one maintenance pass; a leader change mid-copy leaves one too).
DANGLING_COPY_MS = 120_000


class Tiering:
    """The KIP-950 / KIP-405 side of one broker (module docstring). Owns the applied tiering
    state per topic (``states``, persisted with the applied ``commands`` in
    ``meta/tiering.json``), the expiration mode and the copier's test-only pause; reads the
    broker's ``core`` (replicas, topics, lock) and uses the ``remote`` store and the
    ``controller`` client."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        meta_dir: str,
        remote: RemoteStore,
        controller: ControllerClient,
        cluster_id: str,
        expiration_mode: str,
    ):
        self.core = core
        self.meta_dir = meta_dir
        self.remote = remote
        self.controller = controller
        self.cluster_id = cluster_id
        self.expiration_mode = expiration_mode
        self.copier_paused = False  # set only by the tests' agent entry point
        # KIP-950 state applied by DisableRemoteTopic / EnableRemoteTopic, persisted.
        self.states: dict[str, dict] = {}
        self.commands: dict[str, dict] = {}

    def load(self) -> None:
        """Read the persisted state (at the broker's start)."""
        try:
            with open(os.path.join(self.meta_dir, "tiering.json")) as fh:
                obj = json.load(fh)
            self.states = obj.get("topics", {})
            self.commands = obj.get("commands", {})
        except FileNotFoundError:
            pass

    def _save(self) -> None:
        path = os.path.join(self.meta_dir, "tiering.json")
        with open(path + ".tmp", "w") as fh:
            json.dump({"topics": self.states, "commands": self.commands}, fh)
        os.replace(path + ".tmp", path)

    def adopt(self, t: dict) -> None:
        """Initial tiering state comes from metadata (topic creation, first enablement); after
        that only DisableRemoteTopic / EnableRemoteTopic commands change it (KIP-950). Called
        by the metadata part for each topic it applies, under the core's lock."""
        cur = self.states.get(t["name"])
        if cur is not None and cur.get("topic_id") != t["topic_id"]:
            cur = None  # topic re-created under the same name
        if cur is None or (
            cur["state"] == TieredState.NONE and t["tiered_state"] != TieredState.NONE
        ):
            self.states[t["name"]] = {
                "topic_id": t["topic_id"],
                "state": t["tiered_state"],
                "tiered_epoch": t["tiered_epoch"],
                "policy": t["disable_policy"],
                "purge_below_tiered_epoch": 0,
                "last_command": None,
            }
            self._save()

    def purge_below_tiered_epoch(self, topic: str) -> int:
        """Remote segments of ``topic`` below this tiered epoch are fenced (delete policy)."""
        return self.states.get(topic, {}).get("purge_below_tiered_epoch", 0)

    def refresh_remote(self, r: Replica) -> None:
        """Re-list the partition's remote segments, for a topic ever tiered (the maintenance
        pass). Raises :class:`RemoteStorageError`."""
        if self.ever_tiered(r.topic):
            self.remote.refresh(r.topic, r.topic_id, r.partition)

    def _topic_config(self, topic: str, name: str) -> str:
        return (
            self.core.topics.get(topic, {}).get("configs", {}).get(name, TopicConfig.DEFAULTS[name])
        )

    def ever_tiered(self, topic: str) -> bool:
        """A topic that has never had tiering enabled has nothing in the remote store: its
        replicas never ask the store (and an object-store outage cannot touch them)."""
        state = self.core.topics.get(topic, {}).get("tiered_state", TieredState.NONE)
        return state != TieredState.NONE or topic in self.states

    def remote_log_end_offset(self, r: Replica) -> int:
        """The highest offset of ``r``'s partition in remote storage (-1: none), as ListOffsets
        LATEST_TIERED answers it (:mod:`broker_agent.kafka_wire.offsets`). Raises
        :class:`RemoteStorageError` as :meth:`remote_view`."""
        return self.remote_view(r)["remote_log_end_offset"]

    def remote_view(self, r: Replica) -> dict:
        """The partition's remote log as this broker's cache of the store knows it. Raises
        :class:`RemoteStorageError` only before the partition's first successful read."""
        tier = self.states.get(r.topic, {})
        purge = tier.get("purge_below_tiered_epoch", 0)
        segs = (
            self.remote.segments(r.topic, r.topic_id, r.partition)
            if self.ever_tiered(r.topic)
            else []
        )
        lso = r.log.log_start_offset if r.log else 0
        readable = [s for s in segs if is_readable(s, purge, lso)]
        return {
            "segments": segs,
            "readable": readable,
            "remote_log_start_offset": readable[0]["start_offset"] if readable else -1,
            "remote_log_end_offset": max((s["end_offset"] for s in readable), default=-1),
            "remote_bytes": sum(s["size_bytes"] for s in readable),
            "purge_below_tiered_epoch": purge,
        }

    def tier_metrics(self, r: Replica, view: dict) -> dict:
        """KIP-963's tiered-storage metrics of a leader replica (``view``: :meth:`remote_view`).

        ``remote_copy_lag_*``: closed, committed local segments above the remote log end, while ENABLED.
        ``remote_delete_lag_*``: what the current expiration pass plans and has not deleted yet (as
        Kafka's ``sizeOfDeletableSegmentsBytes``: :meth:`_expiration_plan` plus DELETE_SEGMENT_STARTED
        retries). ``fenced_remote_*``: segments below the purge epoch, still to be purged (#14 gap 8),
        not part of the delete lag. ``remote_log_size_bytes``: every object stored, readable or not.
        """
        purge = view["purge_below_tiered_epoch"]
        plog = r.log
        stored = [
            s
            for s in view["segments"]
            if s["state"]
            in (RemoteSegmentState.COPY_SEGMENT_FINISHED, RemoteSegmentState.DELETE_SEGMENT_STARTED)
        ]
        fenced = [s for s in stored if s["tiered_epoch"] < purge]
        deleting = [
            s
            for s in stored
            if s["state"] == RemoteSegmentState.DELETE_SEGMENT_STARTED
            and s["tiered_epoch"] >= purge
        ]
        if self.expiration_state(r) in (TaskState.RUNNING, TaskState.EXTERNAL):
            deleting += self._expiration_plan(r, view)
        copy_bytes = copy_segments = 0
        if self.copier_state(r) == TaskState.RUNNING:
            remote_end = view["remote_log_end_offset"]
            for seg in plog.closed_segments():
                if seg.last_offset > remote_end and seg.last_offset < plog.high_watermark:
                    copy_bytes += seg.size
                    copy_segments += 1
        return {
            "remote_copy_lag_bytes": copy_bytes,
            "remote_copy_lag_segments": copy_segments,
            "remote_delete_lag_bytes": sum(s["size_bytes"] for s in deleting),
            "remote_delete_lag_segments": len(deleting),
            "fenced_remote_bytes": sum(s["size_bytes"] for s in fenced),
            "fenced_remote_segments": len(fenced),
            "remote_log_size_bytes": sum(s["size_bytes"] for s in stored),
        }

    def copier_state(self, r: Replica) -> str:
        tier = self.states.get(r.topic, {})
        meta_state = self.core.topics.get(r.topic, {}).get("tiered_state")
        if r.leader != self.core.broker_id:
            return TaskState.NOT_LEADER
        if tier.get("state") == TieredState.ENABLED and meta_state == TieredState.ENABLED:
            return TaskState.RUNNING
        return TaskState.STOPPED

    def expiration_state(self, r: Replica) -> str:
        tier = self.states.get(r.topic, {})
        if r.leader != self.core.broker_id:
            return TaskState.NOT_LEADER
        state = tier.get("state")
        running = state == TieredState.ENABLED or (
            state in (TieredState.DISABLED, TieredState.DISABLING)
            and tier.get("policy") == DisablePolicy.RETAIN
        )
        if not running:
            return TaskState.STOPPED
        return (
            TaskState.EXTERNAL
            if self.expiration_mode == ExpirationMode.EXTERNAL
            else TaskState.RUNNING
        )

    def copy_segments(self, r: Replica) -> None:
        """RemoteStorageCopier: copy closed, committed segments above the remote log end with
        the topic's tiered epoch. Runs only while the applied tiering state and the controller's
        metadata are both ENABLED (so a broker that missed the command still stops copying)."""
        if self.copier_state(r) != TaskState.RUNNING or self.copier_paused:
            return
        if CleanupPolicy.COMPACT in self._topic_config(r.topic, TopicConfig.CLEANUP_POLICY):
            return
        plog = r.log
        tier = self.states[r.topic]
        remote_end = self.remote_view(r)["remote_log_end_offset"]
        for seg in plog.closed_segments():
            if seg.last_offset <= remote_end:
                continue
            if seg.last_offset >= plog.high_watermark:
                break
            start = max(seg.base_offset, remote_end + 1, plog.log_start_offset)
            data = plog.read_segment_bytes(seg)
            if data is None:
                return  # deleted meanwhile; the next round lists the log afresh
            self.remote.copy_segment(
                topic=r.topic,
                topic_id=r.topic_id,
                partition=r.partition,
                data=data,
                start_offset=start,
                end_offset=seg.last_offset,
                max_timestamp_ms=seg.max_timestamp_ms,
                segment_leader_epochs=plog.epochs_between(start, seg.last_offset),
                tiered_epoch=tier["tiered_epoch"],
            )
            remote_end = seg.last_offset

    def local_retention(self, r: Replica) -> None:
        """Delete local segments.

        - Always: segments wholly below the log start offset.
        - Tiered (copying): local.retention.* applies, and only to segments already copied.
        - Disabled with retain and remote data left: nothing local expires until the remote
          data is gone (KIP-950 offset continuity); topic-wide retention runs on remote first.
        - Otherwise (never tiered, delete policy, or no remote data left): retention.* applies
          to local segments, advancing the log start offset.
        """
        plog = r.log
        tier = self.states.get(r.topic, {})
        closed = plog.closed_segments()
        for seg in closed:
            if seg.last_offset < plog.log_start_offset:
                plog.delete_segment(seg)
        closed = plog.closed_segments()
        if not closed:
            return
        now = _now_ms()
        view = self.remote_view(r)
        state = tier.get("state", TieredState.NONE)
        if state == TieredState.ENABLED:
            rb = int(self._topic_config(r.topic, TopicConfig.LOCAL_RETENTION_BYTES))
            rms = int(self._topic_config(r.topic, TopicConfig.LOCAL_RETENTION_MS))
            if rb == -2:
                rb = int(self._topic_config(r.topic, TopicConfig.RETENTION_BYTES))
            if rms == -2:
                rms = int(self._topic_config(r.topic, TopicConfig.RETENTION_MS))
            eligible = [s for s in closed if s.last_offset <= view["remote_log_end_offset"]]
            moves_lso = False
        else:
            if view["readable"]:
                return
            rb = int(self._topic_config(r.topic, TopicConfig.RETENTION_BYTES))
            rms = int(self._topic_config(r.topic, TopicConfig.RETENTION_MS))
            eligible = list(closed) if r.leader == self.core.broker_id else []
            moves_lso = True
        size = plog.size_bytes
        for seg in eligible:
            too_big = rb >= 0 and size - seg.size >= rb
            # UnifiedLog's local rule is strict (startMs - largestTimestamp > retentionMs), unlike
            # the remote one (broker_agent.contract.remote_retention.expired_by_time).
            too_old = rms >= 0 and now - seg.max_timestamp_ms > rms
            if not (too_big or too_old):
                break
            if moves_lso:
                plog.advance_log_start_offset(seg.last_offset + 1)
            plog.delete_segment(seg)
            size -= seg.size

    def delete_dangling_copies(self, r: Replica) -> None:
        """The copier's own clean-up, in either expiration mode (as Kafka's RemoteLogManager
        deletes a segment whose upload failed): a COPY_SEGMENT_STARTED record older than
        :data:`DANGLING_COPY_MS` is a copy that failed after its first step (an outage mid-copy,
        or a leader change); the copier has moved on with a new segment id, so the leftover
        object and record go DELETE_SEGMENT_STARTED -> deleted -> DELETE_SEGMENT_FINISHED.
        Nothing else references them: the orphan sweep leaves objects that a record names."""
        now = _now_ms()
        for seg in self.remote_view(r)["segments"]:
            if (
                seg["state"] == RemoteSegmentState.COPY_SEGMENT_STARTED
                and now - seg["event_timestamp_ms"] > DANGLING_COPY_MS
            ):
                self.remote.delete_segment(seg["segment_id"])

    def expire_remote(self, r: Replica) -> None:
        """RemoteDataExpiration (internal mode): topic-wide retention over remote segments from
        the remote log start, inside the leader-epoch lineage (:meth:`_expiration_plan`), the log
        start offset published before any object is deleted, each delete
        DELETE_SEGMENT_STARTED -> object deleted -> DELETE_SEGMENT_FINISHED. In internal
        mode the agent also purges segments fenced by a delete-policy disablement (in external
        mode the Spark purge job does)."""
        if self.expiration_mode != ExpirationMode.INTERNAL:
            return
        view = self.remote_view(r)
        purge = view["purge_below_tiered_epoch"]
        for seg in view["segments"]:
            stuck = seg["state"] == RemoteSegmentState.DELETE_SEGMENT_STARTED
            fenced = (
                seg["tiered_epoch"] < purge
                and seg["state"] == RemoteSegmentState.COPY_SEGMENT_FINISHED
            )
            if stuck or fenced:
                self.remote.delete_segment(seg["segment_id"])
        if self.expiration_state(r) != TaskState.RUNNING:
            return
        doomed = self._expiration_plan(r, view)
        if not doomed:
            return
        r.log.advance_log_start_offset(max(s["end_offset"] for s in doomed) + 1)
        for seg in doomed:
            self.remote.delete_segment(seg["segment_id"])

    def _expiration_plan(self, r: Replica, view: dict) -> list[dict]:
        """What this leader's expiration pass deletes now
        (:func:`broker_agent.contract.remote_retention.plan_expiration`: the leader-epoch lineage check,
        Kafka's ``<=`` time rule and the size breach, as the Spark planner applies them), from
        ``view`` (:meth:`remote_view`) and the topic-wide retention.ms / retention.bytes."""
        plog = r.log
        remote_end = view["remote_log_end_offset"]
        return plan_expiration(
            view["segments"],
            log_start_offset=plog.log_start_offset,
            log_end_offset=plog.log_end_offset,
            leader_epochs=plog.leader_epochs,
            retention_ms=int(self._topic_config(r.topic, TopicConfig.RETENTION_MS)),
            retention_bytes=int(self._topic_config(r.topic, TopicConfig.RETENTION_BYTES)),
            local_untiered_bytes=sum(s.size for s in plog.segments if s.last_offset > remote_end),
            now_ms=_now_ms(),
            purge_below_tiered_epoch=view["purge_below_tiered_epoch"],
        )

    def _check_topic(self, cmd) -> dict:
        t = self.core.topics.get(cmd.topic)
        if t is None or t["topic_id"] != cmd.topic_id:
            raise ApiError(
                404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {cmd.topic!r} / id"
            )
        return t

    def _ack(self, topic: str, epoch: int) -> None:
        try:
            self.controller.ack_disable(topic, self.core.broker_id, epoch)
        except (AgentError, httpx.HTTPError) as exc:
            raise ApiError(
                503,
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"applied, but the controller did not take the ack: {exc}",
            ) from None

    def _controller_view(self, cmd, command: str) -> dict:
        """The controller's state of ``cmd.topic`` to fence ``command`` against
        (:func:`broker_agent.contract.kip950.check_broker_command`): the metadata this broker applied last,
        or, when that would refuse, the controller asked now - the metadata poll can be a moment
        behind a disablement the controller has just started. Called outside the broker's lock."""
        cached = self._check_topic(cmd)  # a topic this broker does not know: 404, asks nobody
        if cached is not None:
            try:
                kip950.check_broker_command(cmd.topic, cached, command, cmd.tiered_epoch)
            except ApiError:
                pass
            else:
                return cached
        try:
            return self.controller.topic(cmd.topic).model_dump()
        except AgentError as exc:
            if exc.status == 404:
                raise ApiError(404, exc.error, exc.message) from None
            raise ApiError(
                503, ErrorCode.BROKER_NOT_AVAILABLE, f"the controller refused: {exc.message}"
            ) from None
        except httpx.HTTPError as exc:
            raise ApiError(
                503,
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"the controller did not answer ({type(exc).__name__}); retry",
            ) from None

    def disable_remote_topic(self, cmd) -> dict:
        """DisableRemoteTopic (KIP-950).

        Fencing: a tiered epoch below the applied one is refused (STALE_TIERED_EPOCH); so is a
        disable at the epoch a re-enable was applied at, since each disablement brings a new
        epoch. The same idempotency key, or the same disable at the same epoch, is applied once
        and answered again (``applied: false``), re-sending the acknowledgement to the controller.
        The policy is the controller's disablement's: one that differs is refused
        (INVALID_REQUEST, :func:`broker_agent.contract.kip950.broker_disable_policy`), none applies it.
        retain: the copier stops, remote data stays readable and keeps expiring. delete: copier
        and expiration stop, log start offset := local log start offset, remote segments with a
        tiered epoch below this one become unreadable at once and are purged asynchronously.
        Two-sided: a new command is applied only at the controller's current epoch of a
        DISABLING (or DISABLED) topic; a future epoch is UNKNOWN_TIERED_EPOCH.
        """
        if cmd.policy is not None and cmd.policy not in DisablePolicy.ALL:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, f"unsupported policy {cmd.policy!r}")
        controller_view = self._controller_view(cmd, "disable")
        with self.core.lock:
            t = self._check_topic(cmd)
            done = self.commands.get(cmd.idempotency_key)
            if done is not None:
                self._ack(cmd.topic, done["tiered_epoch"])
                return dict(done, applied=False)
            cur = self.states.get(cmd.topic) or {
                "tiered_epoch": 0,
                "state": TieredState.NONE,
                "last_command": None,
            }
            epoch = cur["tiered_epoch"]
            if cmd.tiered_epoch < epoch or (
                cmd.tiered_epoch == epoch and cur.get("last_command") != "disable"
            ):
                raise ApiError(
                    409,
                    ErrorCode.STALE_TIERED_EPOCH,
                    f"DisableRemoteTopic at tiered epoch {cmd.tiered_epoch}; broker applied {epoch}",
                    tiered_epoch=epoch,
                )
            kip950.check_broker_command(cmd.topic, controller_view, "disable", cmd.tiered_epoch)
            policy = kip950.broker_disable_policy(cmd.topic, controller_view, cmd.policy)
            parts = sorted(p for (tp, p), r in self.core.replicas.items() if tp == cmd.topic)
            repeat = cmd.tiered_epoch == epoch
            if not repeat:
                new = dict(
                    cur,
                    topic_id=t["topic_id"],
                    state=TieredState.DISABLED,
                    tiered_epoch=cmd.tiered_epoch,
                    policy=policy,
                    last_command="disable",
                )
                if policy == DisablePolicy.DELETE:
                    new["purge_below_tiered_epoch"] = cmd.tiered_epoch
                    for (tp, _p), r in self.core.replicas.items():
                        if tp == cmd.topic and r.log is not None:
                            r.log.advance_log_start_offset(r.log.local_log_start_offset)
                self.states[cmd.topic] = new
            result = {
                "topic": cmd.topic,
                "tiered_epoch": cmd.tiered_epoch,
                "applied": not repeat,
                "tiered_state": TieredState.DISABLED,
                "partitions": parts,
            }
            self.commands[cmd.idempotency_key] = result
            self._save()
        self._ack(cmd.topic, cmd.tiered_epoch)
        return result

    def enable_remote_topic(self, cmd) -> dict:
        """EnableRemoteTopic: re-enable copying at the topic's (unchanged) tiered epoch, so
        segments tiered from now on carry it and can never be mistaken for segments fenced by an
        earlier delete-policy disablement. Older epochs are refused; repeats are applied once.
        Two-sided: a new command is applied only at the controller's current epoch of an ENABLED
        topic; a future epoch is UNKNOWN_TIERED_EPOCH."""
        controller_view = self._controller_view(cmd, "enable")
        with self.core.lock:
            t = self._check_topic(cmd)
            done = self.commands.get(cmd.idempotency_key)
            if done is not None:
                return dict(done, applied=False)
            cur = self.states.get(cmd.topic) or {"tiered_epoch": 0, "state": TieredState.NONE}
            if cmd.tiered_epoch < cur["tiered_epoch"]:
                raise ApiError(
                    409,
                    ErrorCode.STALE_TIERED_EPOCH,
                    f"EnableRemoteTopic at tiered epoch {cmd.tiered_epoch}; broker applied {cur['tiered_epoch']}",
                    tiered_epoch=cur["tiered_epoch"],
                )
            repeat = cur["state"] == TieredState.ENABLED and cmd.tiered_epoch == cur["tiered_epoch"]
            kip950.check_broker_command(cmd.topic, controller_view, "enable", cmd.tiered_epoch)
            if not repeat:
                self.states[cmd.topic] = dict(
                    cur,
                    topic_id=t["topic_id"],
                    state=TieredState.ENABLED,
                    tiered_epoch=cmd.tiered_epoch,
                    policy=None,
                    last_command="enable",
                )
            result = {
                "topic": cmd.topic,
                "tiered_epoch": cmd.tiered_epoch,
                "applied": not repeat,
                "tiered_state": TieredState.ENABLED,
                "partitions": sorted(p for (tp, p) in self.core.replicas if tp == cmd.topic),
            }
            self.commands[cmd.idempotency_key] = result
            self._save()
        return result

    def inventory(self, topic: str | None):
        try:
            return self.remote.iter_all(topic)
        except RemoteStorageError as exc:
            raise _store_error(exc) from None

    def partition_states(self, topic: str | None) -> list[dict]:
        out = []
        with self.core.lock:
            replicas = [
                r
                for r in self.core.replicas.values()
                if r.log is not None
                and r.leader == self.core.broker_id
                and (topic is None or r.topic == topic)
            ]
        for r in replicas:
            plog = r.log
            tier = self.states.get(r.topic, {})
            view = self.remote_view(r)
            out.append(
                {
                    "cluster": self.cluster_id,
                    "topic": r.topic,
                    "topic_id": r.topic_id,
                    "partition": r.partition,
                    "retention_ms": int(self._topic_config(r.topic, TopicConfig.RETENTION_MS)),
                    "retention_bytes": int(
                        self._topic_config(r.topic, TopicConfig.RETENTION_BYTES)
                    ),
                    "log_start_offset": plog.log_start_offset,
                    "local_log_start_offset": plog.local_log_start_offset,
                    "log_end_offset": plog.log_end_offset,
                    "local_untiered_bytes": sum(
                        s.size
                        for s in plog.segments
                        if s.last_offset > view["remote_log_end_offset"]
                    ),
                    "leader_epochs": [
                        {"epoch": e, "start_offset": s} for e, s in plog.leader_epochs
                    ],
                    "tiered_state": self.core.topics.get(r.topic, {}).get(
                        "tiered_state", TieredState.NONE
                    ),
                    "tiered_epoch": tier.get("tiered_epoch", 0),
                    "disable_policy": tier.get("policy"),
                    "purge_below_tiered_epoch": tier.get("purge_below_tiered_epoch", 0),
                }
            )
        return out

    def mark_segment(self, segment_id: str, state: str) -> dict:
        try:
            return self.remote.transition(segment_id, state)
        except KeyError:
            raise ApiError(
                404, ErrorCode.NOT_FOUND, f"unknown remote segment {segment_id}"
            ) from None
        except ValueError as exc:
            raise ApiError(409, ErrorCode.INVALID_STATE_TRANSITION, str(exc)) from None
        except RemoteStorageError as exc:
            raise _store_error(exc) from None


def _store_error(exc: RemoteStorageError) -> ApiError:
    """The agent's answer when the object store cannot be reached: retriable."""
    return ApiError(503, ErrorCode.KAFKA_STORAGE_ERROR, f"remote store: {exc}")
