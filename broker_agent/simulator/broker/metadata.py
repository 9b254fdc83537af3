"""What a broker learns from the controller: the metadata long-poll (LeaderAndIsr /
UpdateMetadata), creating the replicas it is assigned, adopting a topic's KIP-950 state, and
the heartbeat that registers the broker and reports offline and created replicas (KIP-112).

:class:`Metadata` is a part of :class:`broker_agent.simulator.broker.Broker`: the only writer of the
metadata cache in the broker's core (``topics``, ``broker_urls``, ``cluster_brokers``) and the
part that adds and drops replicas.
"""

from __future__ import annotations

import contextlib
import time

import httpx

from broker_agent.contract.choices import TopicConfig
from broker_agent.contract.client import AgentError, ControllerClient
from broker_agent.contract.models import partition_key
from broker_agent.contract.placement import next_log_dir
from broker_agent.simulator.broker.logdirs import LogDirs
from broker_agent.simulator.broker.replication import Replication
from broker_agent.simulator.broker.state import BrokerCore, Replica, log, update_high_watermark
from broker_agent.simulator.broker.tiering import Tiering
from broker_agent.simulator.remote import RemoteStore
from broker_agent.simulator.storage import PartitionLog, StorageError

__all__ = ["Metadata"]


class Metadata:
    """The broker's side of the controller (module docstring). Owns the applied metadata
    version and the replicas created but not yet reported; its collaborators: the ``core``,
    the ``controller`` client, the ``remote`` store (a new leader reads it afresh),
    ``log_dirs`` (where replicas are created, what the heartbeat reports), ``tiering`` (a
    topic's initial KIP-950 state) and ``replication`` (fetchers and the high watermark)."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        controller: ControllerClient,
        remote: RemoteStore,
        log_dirs: LogDirs,
        tiering: Tiering,
        replication: Replication,
        segment_bytes: int,
        url: str,
        kafka_listener: str | None,
    ):
        self.core = core
        self.controller = controller
        self.remote = remote
        self.log_dirs = log_dirs
        self.tiering = tiering
        self.replication = replication
        self.segment_bytes = segment_bytes
        self.url = url
        self.kafka_listener = kafka_listener
        self.version = -1
        self.pending_created: set[str] = set()

    def run(self) -> None:
        """The ``metadata`` thread: long-polls the controller and applies each change."""
        while not self.core.stopped.is_set():
            try:
                md = self.controller.request(
                    "GET",
                    "/v1/metadata",
                    params={"since": self.version, "wait_ms": 1000},
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
        core = self.core
        with core.lock:
            core.broker_urls = {b["broker_id"]: b["url"] for b in md["brokers"]}
            core.cluster_brokers = md["brokers"]  # the metadata cache the Kafka listener reads
            core.topics = {t["name"]: t for t in md["topics"]}
            assigned: set[tuple[str, int]] = set()
            for t in md["topics"]:
                self.tiering.adopt(t)
                for part in t["partitions"]:
                    if self.core.broker_id not in part["replicas"]:
                        continue
                    key = (t["name"], part["partition"])
                    assigned.add(key)
                    self._apply_partition(t, part, key)
            for key in [k for k in self.core.replicas if k not in assigned]:
                r = self.core.replicas.pop(key)
                if r.log is not None:
                    log.info("deleting replica %s-%s (no longer assigned)", *key)
                    with contextlib.suppress(StorageError):
                        r.log.delete()
                    r.log = None
                with r.cond:
                    r.cond.notify_all()
            self.version = md["version"]
        self.replication.ensure_fetchers()

    def _apply_partition(self, t: dict, part: dict, key: tuple[str, int]) -> None:
        r = self.core.replicas.get(key)
        new = r is None
        if new:  # published below, once made: a request must not find it without its log yet
            r = Replica(key[0], key[1], t["topic_id"])
        if r.log is not None and r.log.topic_id and r.log.topic_id != t["topic_id"]:
            log.info("replica %s-%s belongs to a deleted topic id; recreating", *key)
            with contextlib.suppress(StorageError):
                r.log.delete()
            r.log = None
        r.topic_id = t["topic_id"]
        created = self.core.broker_id in part["created"]
        # KIP-112: a replica the controller lists as created but found on no dir is offline
        # (KAFKA_STORAGE_ERROR) while the broker has a bad dir - its data may be there. "Even if
        # isNewReplica=false and replica is not found on any log directory, broker will still
        # create replica on a good log directory if there is no bad log directory" (the seed;
        # shipped Kafka does the same): a replaced, empty disk refills from the leaders with no
        # LogDirReset. A cordoned dir is not bad (KIP-1066): it only takes no new replica, so
        # they are created on the good, uncordoned dirs (``_create_replica``).
        if r.log is None and (not created or self.log_dirs.no_bad_dir()):
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
                if r.leader == self.core.broker_id and r.log is not None:
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
        if (
            r.log is not None
            and r.leader == self.core.broker_id
            and (isr_changed or leader_changed)
        ):
            update_high_watermark(r, self.core.broker_id)
        if new:
            # A produce racing the metadata that creates the replica found it with no log and
            # answered KAFKA_STORAGE_ERROR (a failed dir) for a partition that was only being
            # made; published whole, it is NOT_LEADER_OR_FOLLOWER until then, which clients retry.
            self.core.replicas[key] = r
        # reported to the controller as created only once published, so a client that waits for
        # the controller's ``created`` list finds the replica here
        if r.log is not None and not created:
            self.pending_created.add(partition_key(*key))
        elif created:
            self.pending_created.discard(partition_key(*key))
        with r.cond:
            r.cond.notify_all()

    def _create_replica(self, r: Replica, t: dict) -> None:
        """KIP-112: new replicas only on good dirs, never on a cordoned one (KIP-1066;
        :func:`broker_agent.contract.placement.next_log_dir`), or where a log-dir removal plan placed
        them."""
        dirs = self.log_dirs.dirs
        good = [d for d in dirs.values() if d.good and not d.cordoned]
        if not good:
            return
        counts = {d.name: 0 for d in good}
        for other in self.core.replicas.values():
            if other.online and other.dir_name in counts:
                counts[other.dir_name] += 1
        d = dirs[next_log_dir(counts)]
        planned = self.log_dirs.planned_dir(r.topic, r.partition)
        if planned is not None and planned in counts:
            d = dirs[planned]  # where the log-dir removal plan found room
        seg_bytes = int(t["configs"].get(TopicConfig.SEGMENT_BYTES, self.segment_bytes))
        plog = PartitionLog(d, r.topic, r.partition, t["topic_id"], seg_bytes)
        try:
            plog.create()
        except StorageError as exc:
            log.error("cannot create %s-%s on %s: %s", r.topic, r.partition, d.name, exc)
            return
        r.log, r.dir_name, r.needs_truncation = plog, d.name, True
        self.log_dirs.placed(r.topic, r.partition)

    def heartbeat_loop(self) -> None:
        """The ``heartbeat`` thread."""
        while not self.core.stopped.wait(0.25):
            self.heartbeat_once()

    def heartbeat_once(self) -> None:
        """Register the broker and report its dirs, offline replicas and created replicas
        (KIP-112)."""
        with self.core.lock:
            offline = [partition_key(*k) for k, r in self.core.replicas.items() if r.log is None]
            empty = [
                partition_key(*k)
                for k, r in self.core.replicas.items()
                if r.log is not None
                and r.marked_for_deletion
                and r.leader == self.core.broker_id
                and r.log.log_start_offset >= r.log.log_end_offset
            ]
            body = {
                "broker_id": self.core.broker_id,
                "url": self.url,
                "kafka_listener": self.kafka_listener,
                "online": self.log_dirs.online,
                "log_dirs": [self.log_dirs.info(d) for d in self.log_dirs.dirs.values()],
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
