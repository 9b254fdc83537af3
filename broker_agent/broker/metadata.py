"""What a broker learns from the controller: the metadata long-poll (LeaderAndIsr /
UpdateMetadata), creating the replicas it is assigned, adopting a topic's KIP-950 state, and
the heartbeat that registers the broker and reports offline and created replicas (KIP-112).

A mixin of :class:`broker_agent.broker.Broker`; it uses the broker's ``controller``,
``replicas``, ``topics``, ``log_dirs``, ``lock`` and ``metadata_version``.
"""

from __future__ import annotations

import contextlib
import time

import httpx

from broker_agent.broker.state import (
    Replica,
    log,
)
from broker_agent.choices import (
    TieredState,
    TopicConfig,
)
from broker_agent.client import AgentError
from broker_agent.models import partition_key
from broker_agent.placement import next_log_dir
from broker_agent.storage import (
    PartitionLog,
    StorageError,
)

__all__ = ["MetadataMixin"]


class MetadataMixin:
    """Part of :class:`broker_agent.broker.Broker` (see the module docstring)."""

    def _metadata_loop(self) -> None:
        while not self.stopped.is_set():
            try:
                md = self.controller.request(
                    "GET",
                    "/v1/metadata",
                    params={"since": self.metadata_version, "wait_ms": 1000},
                    timeout=15,
                )
            except (AgentError, httpx.HTTPError) as exc:
                log.debug("metadata poll failed: %s", exc)
                time.sleep(0.2)
                continue
            if md.get("changed"):
                try:
                    self.apply_metadata(md)
                except Exception:
                    log.exception("applying metadata v%s failed", md.get("version"))
                    time.sleep(0.2)

    def apply_metadata(self, md: dict) -> None:
        """LeaderAndIsr + UpdateMetadata in one: create / load / drop replicas, take leadership
        or follow, learn topic configs, tiering state and undeleted_partition_count."""
        with self.lock:
            self.broker_urls = {b["broker_id"]: b["url"] for b in md["brokers"]}
            self.cluster_brokers = md["brokers"]  # the metadata cache the Kafka listener reads
            self.topics = {t["name"]: t for t in md["topics"]}
            assigned: set[tuple[str, int]] = set()
            for t in md["topics"]:
                self._adopt_tiering(t)
                for part in t["partitions"]:
                    if self.broker_id not in part["replicas"]:
                        continue
                    key = (t["name"], part["partition"])
                    assigned.add(key)
                    self._apply_partition(t, part, key)
            for key in [k for k in self.replicas if k not in assigned]:
                r = self.replicas.pop(key)
                if r.log is not None:
                    log.info("deleting replica %s-%s (no longer assigned)", *key)
                    with contextlib.suppress(StorageError):
                        r.log.delete()
                    r.log = None
                with r.cond:
                    r.cond.notify_all()
            self.metadata_version = md["version"]
        self._ensure_fetchers()

    def _adopt_tiering(self, t: dict) -> None:
        """Initial tiering state comes from metadata (topic creation, first enablement); after
        that only DisableRemoteTopic / EnableRemoteTopic commands change it (KIP-950)."""
        cur = self.tiering.get(t["name"])
        if cur is not None and cur.get("topic_id") != t["topic_id"]:
            cur = None  # topic re-created under the same name
        if cur is None or (
            cur["state"] == TieredState.NONE and t["tiered_state"] != TieredState.NONE
        ):
            self.tiering[t["name"]] = {
                "topic_id": t["topic_id"],
                "state": t["tiered_state"],
                "tiered_epoch": t["tiered_epoch"],
                "policy": t["disable_policy"],
                "purge_below_tiered_epoch": 0,
                "last_command": None,
            }
            self._save_tiering()

    def _apply_partition(self, t: dict, part: dict, key: tuple[str, int]) -> None:
        r = self.replicas.get(key)
        new = r is None
        if new:  # published below, once made: a request must not find it without its log yet
            r = Replica(key[0], key[1], t["topic_id"])
        if r.log is not None and r.log.topic_id and r.log.topic_id != t["topic_id"]:
            log.info("replica %s-%s belongs to a deleted topic id; recreating", *key)
            with contextlib.suppress(StorageError):
                r.log.delete()
            r.log = None
        r.topic_id = t["topic_id"]
        created = self.broker_id in part["created"]
        # KIP-112: a replica the controller lists as created but found on no dir is offline
        # (KAFKA_STORAGE_ERROR) while the broker has a bad dir - its data may be there. "Even if
        # isNewReplica=false and replica is not found on any log directory, broker will still
        # create replica on a good log directory if there is no bad log directory" (the seed;
        # shipped Kafka does the same): a replaced, empty disk refills from the leaders with no
        # LogDirReset. A cordoned dir is not bad (KIP-1066): it only takes no new replica, so
        # they are created on the good, uncordoned dirs (``_create_replica``).
        if r.log is None and (not created or self._no_bad_dir()):
            self._create_replica(r, t)
        if r.log is not None:
            # segment.bytes is the topic's, as Kafka's LogConfig: also for a log loaded from
            # disk at start (loaded with the broker's default) and after an AlterConfigs.
            r.log.segment_bytes = int(
                t["configs"].get(TopicConfig.SEGMENT_BYTES, self.segment_bytes)
            )
        r.replicas = part["replicas"]
        leader_changed = part["leader"] != r.leader or part["leader_epoch"] != r.leader_epoch
        isr_changed = part["isr"] != r.isr
        with r.cond:  # KIP-253: count, marking and leader epoch change as one (see produce)
            r.marked_for_deletion = part["marked_for_deletion"]
            r.undeleted_partition_count = t["undeleted_partition_count"]
            r.ordered_delivery = (
                t["configs"].get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"
            )
            r.leader, r.isr = part["leader"], part["isr"]
            r.partition_epoch = part["partition_epoch"]
            if leader_changed:
                r.leader_epoch = part["leader_epoch"]
                if r.leader == self.broker_id and r.log is not None:
                    # a new leader reads the remote log afresh before it copies (issue #13)
                    self.remote.invalidate(r.topic, r.topic_id, r.partition)
                    with r.log.lock:
                        r.log.set_leader_epoch_start(r.leader_epoch, r.log.log_end_offset)
                    r.follower_leo = {}
                    r.pending_isr = []
                    r.caught_up_ms = {b: time.monotonic() * 1000 for b in r.isr}
                    r.became_leader_ms = time.monotonic() * 1000
                else:
                    r.needs_truncation = True
        if r.log is not None and r.leader == self.broker_id and (isr_changed or leader_changed):
            self._update_hw(r)
        if new:
            # A produce racing the metadata that creates the replica found it with no log and
            # answered KAFKA_STORAGE_ERROR (a failed dir) for a partition that was only being
            # made; published whole, it is NOT_LEADER_OR_FOLLOWER until then, which clients retry.
            self.replicas[key] = r
        # reported to the controller as created only once published, so a client that waits for
        # the controller's ``created`` list finds the replica here
        if r.log is not None and not created:
            self.pending_created.add(partition_key(*key))
        elif created:
            self.pending_created.discard(partition_key(*key))
        with r.cond:
            r.cond.notify_all()

    def _no_bad_dir(self) -> bool:
        return all(d.good for d in self.log_dirs.values())

    def _create_replica(self, r: Replica, t: dict) -> None:
        """KIP-112: new replicas only on good dirs, never on a cordoned one (KIP-1066;
        :func:`broker_agent.placement.next_log_dir`), or where a log-dir removal plan placed
        them."""
        good = [d for d in self.log_dirs.values() if d.good and not d.cordoned]
        if not good:
            return
        counts = {d.name: 0 for d in good}
        for other in self.replicas.values():
            if other.online and other.dir_name in counts:
                counts[other.dir_name] += 1
        d = self.log_dirs[next_log_dir(counts)]
        planned = self.planned_dirs.get(partition_key(r.topic, r.partition))
        if planned is not None and planned in counts:
            d = self.log_dirs[planned]  # where the log-dir removal plan found room
        seg_bytes = int(t["configs"].get(TopicConfig.SEGMENT_BYTES, self.segment_bytes))
        plog = PartitionLog(d, r.topic, r.partition, t["topic_id"], seg_bytes)
        try:
            plog.create()
        except StorageError as exc:
            log.error("cannot create %s-%s on %s: %s", r.topic, r.partition, d.name, exc)
            return
        r.log, r.dir_name, r.needs_truncation = plog, d.name, True
        if self.planned_dirs.pop(partition_key(r.topic, r.partition), None) is not None:
            self._save_dir_config()

    def _heartbeat_loop(self) -> None:
        while not self.stopped.wait(0.25):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        with self.lock:
            offline = [partition_key(*k) for k, r in self.replicas.items() if r.log is None]
            empty = [
                partition_key(*k)
                for k, r in self.replicas.items()
                if r.log is not None
                and r.marked_for_deletion
                and r.leader == self.broker_id
                and r.log.log_start_offset >= r.log.log_end_offset
            ]
            body = {
                "broker_id": self.broker_id,
                "url": self.url,
                "kafka_listener": self.kafka_listener,
                "online": self.online,
                "log_dirs": [self.log_dir_info(d) for d in self.log_dirs.values()],
                "offline_replicas": offline,
                "created": sorted(self.pending_created),
                "empty_marked_partitions": empty,
            }
        try:
            self.controller.request(
                "POST", "/v1/brokers/heartbeat", body=body, retries=0, timeout=5
            )
        except (AgentError, httpx.HTTPError) as exc:
            log.debug("heartbeat failed: %s", exc)
