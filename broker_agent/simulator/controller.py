"""The simulated controller: the KRaft / ZooKeeper stand-in holding cluster metadata.

One asyncio process. Every handler mutates state without awaiting in between, so each request is
atomic; metadata is persisted in SQLite (``<data>/controller/metadata.db``) after every change and
reloaded on start. Brokers long-poll ``GET /v1/metadata?since=<version>`` (the metadata log stand-
in) and heartbeat; a broker missing heartbeats for ``session_timeout_ms`` is fenced and its
replicas go offline, as in KRaft.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
import uuid

from broker_agent.contract import kip950
from broker_agent.contract.choices import ErrorCode, LogDirState, TieredState, TopicConfig
from broker_agent.contract.client import AgentClient
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import (
    CLUSTER_METADATA_TOPIC,
    AlterConfigsRequest,
    AlterIsrRequest,
    AlterPartitionCountRequest,
    BrokerHeartbeat,
    CreateTopicRequest,
    LogDirEvent,
    TieringCommandRequest,
    colliding_topic,
    partition_key,
    partition_keys,
    validate_topic_name,
)
from broker_agent.simulator.groups import GroupCoordinator
from broker_agent.simulator.reassignment import maybe_complete
from broker_agent.simulator.topic_configs import (
    check_local_retention,
    is_compacted,
    validate_topic_configs,
)

__all__ = ["Controller"]

log = logging.getLogger("broker_agent.simulator.controller")


def _now_ms() -> int:
    return int(time.time() * 1000)


class Controller:
    def __init__(self, data_dir: str, cluster_id: str, session_timeout_ms: int = 3000):
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        os.makedirs(data_dir, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(data_dir, "metadata.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.topics: dict[str, dict] = {}
        self.brokers: dict[int, dict] = {}
        self.version = 0
        self.next_producer_id = 1000
        self._changed = asyncio.Event()
        self._load()
        self.groups = GroupCoordinator(self.db, self._group_layout)

    # -- persistence -------------------------------------------------------------------------

    def _load(self) -> None:
        for key, value in self.db.execute("SELECT key, value FROM kv"):
            obj = json.loads(value)
            if key.startswith("topic/"):
                obj["partitions"] = {int(p): v for p, v in obj["partitions"].items()}
                obj["tiering_acks"] = set(obj.get("tiering_acks", []))
                self.topics[obj["name"]] = obj
            elif key.startswith("broker/"):
                # KIP-112 scenario 6 (and KRaft): a restarted controller keeps each registered,
                # unfenced broker's session for one session timeout after load; the session
                # reaper fences only a broker that does not heartbeat within it, and only that
                # triggers elections. A broker fenced before the restart stays fenced.
                fenced = obj.pop("fenced", False)
                obj.update(
                    alive=not fenced,
                    last_heartbeat=time.monotonic(),
                    offline=set(),
                    log_dirs=[],
                )
                self.brokers[obj["broker_id"]] = obj
            elif key == "meta":
                self.version = obj["version"]
                self.next_producer_id = obj["next_producer_id"]
        # No election here: leaders, ISR and leader epochs are as persisted until a broker's
        # session expires or its heartbeat reports offline replicas.

    def _save_topic(self, topic: dict) -> None:
        obj = dict(topic, tiering_acks=sorted(topic["tiering_acks"]))
        obj["partitions"] = {str(p): v for p, v in topic["partitions"].items()}
        self.db.execute(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)", (f"topic/{topic['name']}", json.dumps(obj))
        )

    def _save_broker(self, b: dict) -> None:
        """The broker's registration and whether it is fenced (KRaft persists both)."""
        self.db.execute(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)",
            (
                f"broker/{b['broker_id']}",
                json.dumps(
                    {"broker_id": b["broker_id"], "url": b["url"], "fenced": not b["alive"]}
                ),
            ),
        )

    def _save_meta(self) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO kv VALUES ('meta', ?)",
            (json.dumps({"version": self.version, "next_producer_id": self.next_producer_id}),),
        )

    def _bump(self, *topics: dict) -> None:
        self.db.execute("BEGIN")
        for t in topics:
            self._save_topic(t)
        self.version += 1
        self._save_meta()
        self.db.execute("COMMIT")
        self._changed.set()
        self._changed = asyncio.Event()

    # -- liveness and leader election --------------------------------------------------------

    def _alive(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return bool(b and b["alive"])

    def _offline_replicas(self, topic: str, part: dict) -> list[int]:
        """KIP-112: replicas on dead brokers union replicas on offline log dirs."""
        key = partition_key(topic, part["partition"])
        return [
            r for r in part["replicas"] if not self._alive(r) or key in self.brokers[r]["offline"]
        ]

    def _reelect(self, topics) -> list[dict]:
        """Shrink ISR to online replicas and elect leaders among online ISR replicas.

        As in Kafka, the ISR never becomes empty: when the last ISR member goes offline it stays
        in the ISR with no leader (-1), and only that replica can become leader again (no unclean
        election)."""
        changed = []
        for t in topics:
            dirty = False
            for part in t["partitions"].values():
                offline = self._offline_replicas(t["name"], part)
                part["offline_replicas"] = offline
                isr = [r for r in part["isr"] if r not in offline] or part["isr"][-1:]
                if isr != part["isr"]:
                    part["isr"] = isr
                    part["partition_epoch"] += 1
                    dirty = True
                leader = part["leader"]
                if leader == -1 or leader in offline:
                    candidates = [r for r in part["replicas"] if r in isr and r not in offline]
                    new_leader = candidates[0] if candidates else -1
                    if new_leader != leader:
                        part["leader"] = new_leader
                        part["leader_epoch"] += 1
                        part["partition_epoch"] += 1
                        dirty = True
            if dirty:
                changed.append(t)
        return changed

    async def session_reaper(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            expired = [
                b
                for b in self.brokers.values()
                if b["alive"] and now - b["last_heartbeat"] > self.session_timeout_ms / 1000
            ]
            for b in expired:
                log.warning("broker %s fenced: no heartbeat", b["broker_id"])
            if expired:
                self.fence(*(b["broker_id"] for b in expired))

    def fence(self, *broker_ids: int) -> None:
        """Fence brokers and move their leaders (session expiry; a controlled shutdown)."""
        for b in (self.brokers[i] for i in broker_ids if i in self.brokers):
            b["alive"] = False
            self._save_broker(b)
        self._bump(*self._reelect(self.topics.values()))

    async def resume_disablements(self, secret: bytes, only: set[str] | None = None) -> None:
        """KIP-950 "Controller Failover in DISABLING State": after a (re)start, the controller
        sends DisableRemoteTopic again to every broker hosting a topic left DISABLING that has
        not acknowledged its tiered epoch, retried until each answers, and completes the
        disablement (DISABLED) once all have - as the KIP's controller does.

        Only what the start found DISABLING: in normal operation a Strata workflow sends the
        commands and completes; a workflow that resumes the same disablement meanwhile gets the
        brokers' idempotent answers (same epoch: ``applied: false``) and a no-op completion.
        ``only``: just those topics, disabled through the Kafka listener (Kafka 3.9's
        disablement, which no workflow drives step by step)."""
        pending = {
            n
            for n, t in self.topics.items()
            if t["tiered_state"] == TieredState.DISABLING and (only is None or n in only)
        }
        delay = 0.5
        while pending:
            for name in sorted(pending):
                t = self.topics.get(name)
                if t is None or t["tiered_state"] != TieredState.DISABLING:
                    pending.discard(name)  # completed (or deleted) by someone else
                    continue
                for b in sorted(self.hosting_brokers(t) - t["tiering_acks"]):
                    if not self._alive(b):
                        continue  # retried once its session is back
                    try:
                        await asyncio.to_thread(self._send_disable, secret, t, b)
                    except Exception as exc:  # any refusal or silence: retried with backoff
                        log.info("DisableRemoteTopic %s to broker %s: %s", name, b, exc)
                if not self.hosting_brokers(t) - t["tiering_acks"]:
                    if kip950.complete_disablement(name, t, self.hosting_brokers(t), None):
                        self._bump(t)
                    log.info("disablement of %s completed after controller start", name)
                    pending.discard(name)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def drive_enablement(self, secret: bytes, name: str) -> None:
        """A re-enablement through the Kafka listener (Kafka 3.9's config change alone): the
        controller sends EnableRemoteTopic to every broker hosting ``name`` itself, retried
        until each answers, as the simulated brokers (like KIP-950's) resume copying on it."""
        t = self.topics.get(name)
        pending = set(self.hosting_brokers(t)) if t else set()
        delay = 0.5
        while pending:
            t = self.topics.get(name)
            if t is None or t["tiered_state"] != TieredState.ENABLED:
                return  # deleted, or disabled again meanwhile
            for b in sorted(pending):
                if not self._alive(b):
                    continue  # retried once its session is back
                try:
                    await asyncio.to_thread(self._send_enable, secret, t, b)
                    pending.discard(b)
                except Exception as exc:  # any refusal or silence: retried with backoff
                    log.info("EnableRemoteTopic %s to broker %s: %s", name, b, exc)
            if pending:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _send_enable(self, secret: bytes, t: dict, broker_id: int) -> None:
        with AgentClient(self.brokers[broker_id]["url"], secret, retries=0, timeout=10) as a:
            a.enable_remote_topic(
                t["name"],
                t["topic_id"],
                t["tiered_epoch"],
                idempotency_key=f"controller-enable-{t['topic_id']}-{t['tiered_epoch']}-{broker_id}",
            )

    def _send_disable(self, secret: bytes, t: dict, broker_id: int) -> None:
        with AgentClient(self.brokers[broker_id]["url"], secret, retries=0, timeout=10) as a:
            a.disable_remote_topic(
                t["name"],
                t["topic_id"],
                t["tiered_epoch"],
                t["disable_policy"],
                idempotency_key=f"controller-{t['topic_id']}-{t['tiered_epoch']}-{broker_id}",
            )

    # -- views -------------------------------------------------------------------------------

    def topic_view(self, t: dict) -> dict:
        return {
            "name": t["name"],
            "topic_id": t["topic_id"],
            "configs": t["configs"],
            "tiered_state": t["tiered_state"],
            "tiered_epoch": t["tiered_epoch"],
            "disable_policy": t["disable_policy"],
            "tiering_acks": sorted(t["tiering_acks"]),
            "initial_partition_count": t["initial_partition_count"],
            "undeleted_partition_count": t["undeleted_partition_count"],
            "partitions": [t["partitions"][p] for p in sorted(t["partitions"])],
        }

    def broker_view(self, b: dict) -> dict:
        dirs = b.get("log_dirs", [])
        return {
            "broker_id": b["broker_id"],
            "url": b["url"],
            "alive": b["alive"],
            "kafka_listener": b.get("kafka_listener"),
            "log_dirs": dirs,
            "offline_log_directory_count": sum(d["state"] == LogDirState.OFFLINE for d in dirs),
            # KIP-112 OfflineReplicaCount is the broker's own metric: a live broker's replicas
            # on its offline log dirs. A fenced broker reports none.
            "offline_replica_count": sum(
                b["broker_id"] in p["offline_replicas"]
                for t in self.topics.values()
                for p in t["partitions"].values()
            )
            if b["alive"]
            else 0,
            "last_heartbeat_ms": b.get("last_heartbeat_ms", 0),
        }

    def metadata(self) -> dict:
        return {
            "cluster_id": self.cluster_id,
            "version": self.version,
            "brokers": [self.broker_view(b) for _, b in sorted(self.brokers.items())],
            "topics": [self.topic_view(t) for _, t in sorted(self.topics.items())],
            "changed": True,
        }

    def topic(self, name: str) -> dict:
        t = self.topics.get(name)
        if t is None:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return t

    def create_topic(self, req: CreateTopicRequest) -> dict:
        try:
            validate_topic_name(req.name)
        except ValueError as exc:
            raise ApiError(400, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        if req.name == CLUSTER_METADATA_TOPIC:  # ControllerApis.createTopics
            raise ApiError(
                400,
                ErrorCode.INVALID_REQUEST,
                f"Creation of internal topic {req.name} is prohibited.",
            )
        if req.name in self.topics:
            raise ApiError(409, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {req.name!r} exists")
        if other := colliding_topic(req.name, self.topics):
            raise ApiError(
                400,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{req.name}' collides with existing topic: {other}",
            )
        validate_topic_configs(dict(req.configs))
        configs = {k: v for k, v in req.configs.items() if v is not None}
        check_local_retention(configs)
        tiered = configs.get(TopicConfig.REMOTE_STORAGE_ENABLE) == "true"
        if tiered and is_compacted(configs):
            raise ApiError(
                400,
                ErrorCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC,
                "a compacted topic cannot be tiered (KIP-405)",
            )
        alive = sorted(b for b, v in self.brokers.items() if v["alive"])
        if req.replication_factor > len(alive):
            raise ApiError(
                400,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {req.replication_factor} > {len(alive)} live brokers",
            )
        t = {
            "name": req.name,
            "topic_id": uuid.uuid4().hex[:22],
            "configs": configs,
            "tiered_state": TieredState.ENABLED if tiered else TieredState.NONE,
            "tiered_epoch": 0,
            "disable_policy": None,
            "tiering_acks": set(),
            "initial_partition_count": req.partitions,
            "undeleted_partition_count": req.partitions,
            "partitions": {},
        }
        start = len(self.topics)
        for p in range(req.partitions):
            t["partitions"][p] = self._new_partition(p, alive, req.replication_factor, start)
        self.topics[req.name] = t
        self._reelect([t])
        self._bump(t)
        return t

    @staticmethod
    def _new_partition(p: int, alive: list[int], rf: int, start: int) -> dict:
        """Rack-unaware round-robin assignment, as Kafka's AdminUtils does (shifted per topic)."""
        n = len(alive)
        replicas = [alive[(start + p + i) % n] for i in range(rf)]
        return {
            "partition": p,
            "replicas": replicas,
            "leader": replicas[0],
            "leader_epoch": 0,
            "partition_epoch": 0,
            "isr": list(replicas),
            "offline_replicas": [],
            "created": [],
            "leader_epoch_after_creation": {},
            "leader_epoch_before_deletion": {},
            "marked_for_deletion": False,
        }

    def alter_configs(self, name: str, req: AlterConfigsRequest) -> dict:
        """Incremental AlterConfigs with the KIP-950 tiering transitions.

        - ``remote.storage.enable=false`` on ENABLED starts disablement: tiered_epoch + 1,
          DISABLING, policy from ``remote.log.disable.policy`` (default retain).
        - on DISABLING any disable or enable is refused with TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
          (KIP-950: re-enablement only once disablement completed).
        - ``remote.storage.enable=true`` on DISABLED re-enables; "re-enablement will not provide
          an option to specify a policy", so a policy in the same request is INVALID_REQUEST, and
          the previous disablement's policy is cleared from the configs.
        - the policy applied is the policy shown: a disablement without a policy uses the one the
          configs hold (else retain); a policy-only change is accepted on an ENABLED topic only
          (:func:`broker_agent.contract.kip950.check_policy_change`).
        - a compacted topic cannot be tiered, and a tiered topic cannot become compacted.
        """
        t = self.topic(name)
        validate_topic_configs(req.configs)
        kip950.check_epoch(t, req.expected_tiered_epoch)
        enable = req.configs.get(TopicConfig.REMOTE_STORAGE_ENABLE)
        policy = req.configs.get(TopicConfig.REMOTE_LOG_DISABLE_POLICY)
        state = t["tiered_state"]
        if TopicConfig.REMOTE_LOG_DISABLE_POLICY in req.configs and (
            enable is None
            or (
                enable == "false"
                and state != TieredState.ENABLED
                and policy != t["configs"].get(TopicConfig.REMOTE_LOG_DISABLE_POLICY)
            )
        ):
            kip950.check_policy_change(name, t)  # no disablement starts to apply it
        new = dict(t["configs"])
        for k, v in req.configs.items():
            if v is None:
                new.pop(k, None)
            else:
                new[k] = v
        check_local_retention(new)
        if is_compacted(new) and (enable == "true" or state == TieredState.ENABLED):
            raise ApiError(
                400,
                ErrorCode.REMOTE_STORAGE_NOT_SUPPORTED_FOR_COMPACTED_TOPIC,
                "a compacted topic cannot be tiered (KIP-405)",
            )
        if enable == "false":
            if state == TieredState.DISABLING:
                raise kip950.disablement_in_progress(name, t)
            if state == TieredState.ENABLED:
                t["configs"] = new  # begin_disablement writes the policy it applies into them
                kip950.begin_disablement(t, kip950.disable_policy_for(t, policy))
                new = t["configs"]
        elif enable == "true":
            t["configs"] = new
            kip950.re_enable(name, t, policy)  # clears the previous disablement's policy
            new = t["configs"]
        t["configs"] = new
        self._bump(t)
        return t

    # -- KIP-950 tiering ---------------------------------------------------------------------

    def start_disable(self, name: str, req: TieringCommandRequest) -> dict:
        t = self.topic(name)
        kip950.start_disablement(name, t, req.policy, req.expected_tiered_epoch)
        self._bump(t)
        return t

    def hosting_brokers(self, t: dict) -> set[int]:
        return {r for p in t["partitions"].values() for r in p["replicas"]}

    def ack_disable(self, name: str, broker_id: int, tiered_epoch: int) -> dict:
        t = self.topic(name)
        if kip950.record_ack(t, broker_id, tiered_epoch):
            self._bump(t)
        return t

    def complete_disable(self, name: str, req: TieringCommandRequest) -> dict:
        """DISABLING -> DISABLED once every broker hosting the topic acknowledged
        DisableRemoteTopic for the current tiered epoch (KIP-950 "Completion of disablement")."""
        t = self.topic(name)
        if kip950.complete_disablement(name, t, self.hosting_brokers(t), req.expected_tiered_epoch):
            self._bump(t)
        return t

    def enable(self, name: str, req: TieringCommandRequest) -> dict:
        t = self.topic(name)
        if req.policy is not None:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, "re-enablement takes no policy")
        return (
            self.alter_configs(
                name,
                AlterConfigsRequest(
                    configs={TopicConfig.REMOTE_STORAGE_ENABLE: "true"},
                    expected_tiered_epoch=req.expected_tiered_epoch,
                ),
            )
            if t
            else t
        )

    # -- KIP-253 -----------------------------------------------------------------------------

    def alter_partition_count(self, name: str, req: AlterPartitionCountRequest) -> dict:
        """Expand or shrink ``undeleted_partition_count`` (KIP-253 "Partition expansion" and
        "Partition deletion").

        Expansion: refused while a partition is marked for deletion; new partitions record each
        existing partition's leader epoch in leaderEpochAfterCreation, then those leader epochs
        are bumped (so producers using the new count write only after the recorded epoch).
        Shrink: never below initial_partition_count; partitions >= the new count are marked for
        deletion with leaderEpochBeforeDeletion and the survivors' leader epochs are bumped.
        """
        t = self.topic(name)
        u, target = t["undeleted_partition_count"], req.undeleted_partition_count
        parts = t["partitions"]
        if req.increase_only and target <= u:  # ReplicationControlManager.createPartitions
            raise ApiError(
                400,
                ErrorCode.INVALID_PARTITIONS,
                f"Topic already has {u} partition(s)."
                if target == u
                else f"The topic {name} currently has {u} partition(s); {target} would not be "
                "an increase.",
            )
        if target == u:
            return t
        if target > u:
            marked = sorted(p for p, v in parts.items() if v["marked_for_deletion"])
            if marked:
                raise ApiError(
                    409,
                    ErrorCode.PARTITIONS_MARKED_FOR_DELETION,
                    f"partitions {marked} are marked for deletion; expansion must wait until "
                    "they are removed (KIP-253)",
                )
            alive = sorted(b for b, v in self.brokers.items() if v["alive"])
            rf = len(parts[0]["replicas"])
            if rf > len(alive):
                raise ApiError(400, ErrorCode.INVALID_REPLICATION_FACTOR, "not enough live brokers")
            if req.validate_only:
                return t
            after_creation = {str(p): v["leader_epoch"] for p, v in parts.items()}
            for v in parts.values():
                v["leader_epoch"] += 1
                v["partition_epoch"] += 1
            start = sorted(self.topics).index(name)
            for p in range(u, target):
                part = self._new_partition(p, alive, rf, start)
                part["leader_epoch_after_creation"] = dict(after_creation)
                parts[p] = part
        else:
            if target < t["initial_partition_count"]:
                raise ApiError(
                    400,
                    ErrorCode.INVALID_PARTITIONS,
                    f"cannot shrink below initial_partition_count {t['initial_partition_count']}",
                )
            if req.validate_only:
                return t
            before_deletion = {str(p): parts[p]["leader_epoch"] for p in range(target)}
            for p in range(target, u):
                if p in parts and not parts[p]["leader_epoch_before_deletion"]:
                    parts[p]["leader_epoch_before_deletion"] = dict(before_deletion)
                    parts[p]["marked_for_deletion"] = True
            for p in range(target):
                parts[p]["leader_epoch"] += 1
                parts[p]["partition_epoch"] += 1
        t["undeleted_partition_count"] = target
        self._reelect([t])
        self._bump(t)
        return t

    def _group_layout(self, name: str) -> tuple[list[int], list[int]] | None:
        """For the group coordinator: a topic's partitions not marked / marked for deletion."""
        t = self.topics.get(name)
        if t is None:
            return None
        parts = t["partitions"].values()
        return (
            [p["partition"] for p in parts if not p["marked_for_deletion"]],
            [p["partition"] for p in parts if p["marked_for_deletion"]],
        )

    # -- brokers -----------------------------------------------------------------------------

    def heartbeat(self, hb: BrokerHeartbeat) -> dict:
        b = self.brokers.get(hb.broker_id)
        first = b is None
        if b is None:
            b = {"broker_id": hb.broker_id, "url": hb.url, "alive": False, "offline": set()}
            self.brokers[hb.broker_id] = b
        was_alive, old_offline, old_dirs = b["alive"], b.get("offline", set()), b.get("log_dirs")
        old_url = b["url"]
        b["url"] = hb.url
        b["kafka_listener"] = hb.kafka_listener
        b["last_heartbeat"] = time.monotonic()
        b["last_heartbeat_ms"] = _now_ms()
        b["alive"] = hb.online
        if first or was_alive != b["alive"] or old_url != b["url"]:
            self._save_broker(b)
        b["offline"] = set(hb.offline_replicas)
        b["log_dirs"] = [d.model_dump() for d in hb.log_dirs]
        changed: dict[str, dict] = {}
        for _key, topic, p in partition_keys(hb.created):
            t = self.topics.get(topic)
            part = t["partitions"].get(p) if t else None
            if part and hb.broker_id in part["replicas"] and hb.broker_id not in part["created"]:
                part["created"].append(hb.broker_id)
                changed[topic] = t
        for key, topic, p in partition_keys(hb.empty_marked_partitions):
            t = self.topics.get(topic)
            part = t["partitions"].get(p) if t else None
            if part and part["marked_for_deletion"] and part["leader"] == hb.broker_id:
                log.info("removing drained partition %s (KIP-253)", key)
                del t["partitions"][p]
                self.groups.forget_partitions(topic, [p])  # a re-created p starts fresh
                changed[topic] = t
        state_changed = (
            first
            or was_alive != b["alive"]
            or old_offline != b["offline"]
            or [(d["state"], d.get("cordoned")) for d in (old_dirs or [])]
            != [(d["state"], d.get("cordoned")) for d in b["log_dirs"]]
        )
        if state_changed:
            for t in self._reelect(self.topics.values()):
                changed[t["name"]] = t
        if state_changed or changed:
            self._bump(*changed.values())
        return {"version": self.version}

    def alter_isr(self, req: AlterIsrRequest) -> dict:
        """AlterPartition from a leader. Fenced if its leader epoch is not current; only online
        replicas may join the ISR; the leader always stays in it."""
        t = self.topic(req.topic)
        part = t["partitions"].get(req.partition)
        if part is None:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
        if req.leader_id != part["leader"] or req.leader_epoch != part["leader_epoch"]:
            raise ApiError(409, ErrorCode.FENCED_LEADER_EPOCH, "stale leader or leader epoch")
        offline = self._offline_replicas(req.topic, part)
        isr = [r for r in part["replicas"] if r in req.isr and r not in offline]
        if req.leader_id not in isr:
            isr.insert(0, req.leader_id)
        if isr != part["isr"]:
            part["isr"] = isr
            part["partition_epoch"] += 1
            maybe_complete(part)  # KIP-455: the ISR change that brings the target in sync
            self._bump(t)
        return part

    def log_dir_event(self, ev: LogDirEvent) -> dict:
        b = self.brokers.get(ev.broker_id)
        if b is None:
            raise ApiError(404, ErrorCode.BROKER_NOT_AVAILABLE, f"unknown broker {ev.broker_id}")
        log.warning("broker %s: %s on %s (%s)", ev.broker_id, ev.event, ev.log_dir, ev.error)
        return {"version": self.version}

    def log_dir_reset(self, broker_id: int) -> dict:
        """KIP-112 LogDirReset: drop the broker from every ``created`` list it is in, so it
        re-creates its replicas (on good dirs) and they catch up from the leaders."""
        if broker_id not in self.brokers:
            raise ApiError(404, ErrorCode.BROKER_NOT_AVAILABLE, f"unknown broker {broker_id}")
        changed = []
        for t in self.topics.values():
            dirty = False
            for part in t["partitions"].values():
                if broker_id in part["created"]:
                    part["created"].remove(broker_id)
                    dirty = True
            if dirty:
                changed.append(t)
        self._bump(*changed)
        return {"broker_id": broker_id, "topics": [t["name"] for t in changed]}

    def allocate_producer_id(self) -> int:
        pid = self.next_producer_id
        self.next_producer_id += 1
        self._bump()
        return pid
