"""A simulated broker: replica manager, replica fetcher, tiering tasks, log-dir health.

Composed of parts, each a class with its own state and a narrow interface, built here with the
collaborators it uses (no part reaches into another's state): ``core`` (what every part reads
under one lock), ``events``, ``log_dirs`` (KIP-112), ``dir_mover``, ``tiering`` (KIP-950 /
KIP-405), ``partitions``, ``replication``, ``metadata``, ``snapshots``. Threads, all daemons:
metadata long-poll, heartbeat, one fetcher per leader, maintenance (ISR, checkpoints, copier,
local retention and remote expiration as two separate tasks, as KIP-950 asks), probe (a dir
fails within 5 s even idle), failures, events, and one per running alter-log-dirs copy.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

from broker_agent.contract.choices import ExpirationMode
from broker_agent.contract.client import ControllerClient
from broker_agent.contract.objectstore import S3Location, remote_store_uri
from broker_agent.simulator.broker.dirmoves import ReplicaDirMover
from broker_agent.simulator.broker.events import WebhookEvents
from broker_agent.simulator.broker.logdirs import LogDirs
from broker_agent.simulator.broker.metadata import Metadata
from broker_agent.simulator.broker.partitions import PartitionIO
from broker_agent.simulator.broker.replication import Replication
from broker_agent.simulator.broker.snapshot import Snapshots
from broker_agent.simulator.broker.state import BrokerCore, Replica, log
from broker_agent.simulator.broker.tiering import Tiering
from broker_agent.simulator.remote import RemoteStorageError, RemoteStore
from broker_agent.simulator.storage import LogDir, PartitionLog, StorageError

__all__ = ["Broker"]


class Broker:
    """One simulated broker process: its parts and threads (module docstring). Besides the
    parts, it keeps what :mod:`broker_agent.kafka_wire`'s handlers read of any broker (the
    simulated one and :class:`broker_agent.kafka_wire.synthetic.SyntheticBroker` alike): its
    identity, configuration, the controller and remote-store clients, and the core's
    ``lock``, ``replicas``, ``topics`` and ``cluster_brokers``."""

    def __init__(
        self,
        *,
        broker_id: int,
        data_dir: str,
        log_dir_names: list[str],
        controller_url: str,
        secret: bytes,
        url: str,
        cluster_id: str,
        segment_bytes: int = 1 << 20,
        expiration_mode: str = ExpirationMode.INTERNAL,
        webhook_url: str | None = None,
        probe_interval: float = 1.0,
        replica_lag_time_max_ms: int = 5000,
        task_interval: float = 0.5,
        log_dir_capacity_bytes: int | None = None,
        remote_store: str | None = None,
        kafka_listener: str | None = None,
    ):
        self.core = core = BrokerCore(broker_id)
        #: this process's identity: a new one at every start, so a caller that restarts the
        #: broker can tell a restart already done from one still to do (``/v1/health``)
        self.incarnation = uuid.uuid4().hex
        self.started_ms = int(time.time() * 1000)
        self.root = os.path.join(data_dir, f"broker-{broker_id}")
        meta_dir = os.path.join(self.root, "meta")
        self.secret = secret
        #: ``host:port`` of this broker's Kafka-protocol listener (``broker_agent.kafka_wire``)
        self.kafka_listener = kafka_listener
        #: the listener accepts clients (it opens once this broker has caught up; see
        #: ``kafka_wire.open_when_caught_up``)
        self.kafka_listener_serving = False
        self.cluster_id = cluster_id
        self.segment_bytes = segment_bytes
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.task_interval = task_interval
        self.controller = ControllerClient(controller_url, secret, retries=0, timeout=10)
        self.remote = RemoteStore(
            S3Location.parse(remote_store_uri(cluster_id, remote_store)), cluster_id
        )
        os.makedirs(meta_dir, exist_ok=True)
        self.events = WebhookEvents(
            broker_id=broker_id,
            cluster_id=cluster_id,
            secret=secret,
            webhook_url=webhook_url,
            stopped=core.stopped,
        )
        # The two calls back up the graph (the heartbeat, the moves' room) are late-bound:
        # log dirs come before the parts that use them.
        self.log_dirs = LogDirs(
            core,
            root=self.root,
            meta_dir=meta_dir,
            names=log_dir_names,
            capacity_bytes=log_dir_capacity_bytes,
            probe_interval=probe_interval,
            events=self.events,
            controller=self.controller,
            secret=secret,
            report=lambda: self.metadata.heartbeat_once(),
            incoming_bytes=lambda name: self.dir_mover.incoming_bytes(name),
        )
        #: replicas moving between this broker's dirs (AlterReplicaLogDirs)
        self.dir_mover = ReplicaDirMover(core, self.log_dirs)
        #: leader/follower.replication.throttled.rate as set over Kafka's protocol (kafka_wire)
        self.replication_throttled_rates: dict[str, int] = {}
        self.tiering = Tiering(
            core,
            meta_dir=meta_dir,
            remote=self.remote,
            controller=self.controller,
            cluster_id=cluster_id,
            expiration_mode=expiration_mode,
        )
        self.partitions = PartitionIO(core, remote=self.remote, tiering=self.tiering)
        self.replication = Replication(
            core,
            controller=self.controller,
            secret=secret,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
        )
        self.metadata = Metadata(
            core,
            controller=self.controller,
            remote=self.remote,
            log_dirs=self.log_dirs,
            tiering=self.tiering,
            replication=self.replication,
            segment_bytes=segment_bytes,
            url=url,
            kafka_listener=kafka_listener,
        )
        self.snapshots = Snapshots(
            core,
            log_dirs=self.log_dirs,
            tiering=self.tiering,
            remote=self.remote,
            dir_mover=self.dir_mover,
        )

    # -- what every caller of a broker reads (the core's) ----------------------------------------

    @property
    def broker_id(self) -> int:
        return self.core.broker_id

    @property
    def lock(self) -> threading.RLock:
        return self.core.lock

    @property
    def stopped(self) -> threading.Event:
        return self.core.stopped

    @property
    def replicas(self) -> dict[tuple[str, int], Replica]:
        return self.core.replicas

    @property
    def topics(self) -> dict[str, dict]:
        return self.core.topics

    @property
    def cluster_brokers(self) -> list[dict]:
        return self.core.cluster_brokers

    # -- start-up and the maintenance thread -----------------------------------------------------

    def start(self) -> None:
        self.tiering.load()
        self.log_dirs.start()
        for d in self.log_dirs.dirs.values():
            if d.good:
                self._load_dir(d)
        for target, name in (
            (self.metadata.run, "metadata"),
            (self.metadata.heartbeat_loop, "heartbeat"),
            (self._maintenance_loop, "maintenance"),
            (self.log_dirs.probe_loop, "probe"),
            (self.log_dirs.failure_loop, "failures"),
            (self.events.run, "events"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    def _load_dir(self, d: LogDir) -> None:
        try:
            names = d.io(lambda: os.listdir(d.path))
        except StorageError:
            return
        core = self.core
        for name in names:
            full = os.path.join(d.path, name)
            topic, _, p = name.rpartition("-")
            if not topic or not p.isdigit() or not os.path.isdir(full):
                continue
            key = (topic, int(p))
            with core.lock:
                r = core.replicas.get(key)
                if r is not None and r.online:
                    continue
                plog = PartitionLog(d, topic, int(p), "", self.segment_bytes)
                try:
                    plog.load()
                except (StorageError, ValueError) as exc:
                    log.error("cannot load %s: %s", full, exc)
                    continue
                r = r or Replica(topic, int(p), plog.topic_id)
                r.log, r.dir_name, r.topic_id = plog, d.name, plog.topic_id
                r.needs_truncation = True
                core.replicas[key] = r

    def _maintenance_loop(self) -> None:
        """The ``maintenance`` thread: per replica, the remote metadata refresh, the leader's
        ISR shrink and tiering tasks, local retention and the high-watermark checkpoint."""
        core, tiering = self.core, self.tiering
        last_ckpt = 0.0
        while not core.stopped.wait(self.task_interval):
            with core.lock:
                replicas = [r for r in core.replicas.values() if r.log is not None]
            now = time.monotonic()
            for r in replicas:
                try:
                    tiering.refresh_remote(r)
                except RemoteStorageError as exc:
                    # copy, expiration and retention below go on from what the cache knows:
                    # nothing is copied or expired remotely, and local segments wait
                    log.debug("remote metadata of %s-%s: %s", r.topic, r.partition, exc)
                try:
                    if r.leader == core.broker_id:
                        self.replication.maybe_shrink_isr(r)
                        tiering.copy_segments(r)
                        tiering.delete_dangling_copies(r)
                        tiering.expire_remote(r)
                    tiering.local_retention(r)
                    if now - last_ckpt > 2 and r.log is not None:
                        r.log.checkpoint_high_watermark()
                except (StorageError, OSError, AttributeError, RemoteStorageError) as exc:
                    log.debug("maintenance of %s-%s: %s", r.topic, r.partition, exc)
                except Exception:
                    log.exception("maintenance of %s-%s failed", r.topic, r.partition)
            if now - last_ckpt > 2:
                last_ckpt = now
            self.replication.ensure_fetchers()
