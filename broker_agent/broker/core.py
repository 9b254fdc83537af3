"""A simulated broker: replica manager, replica fetcher, tiering tasks, log-dir health.

Threads (all daemons, one process per broker):

- metadata: long-polls the controller and applies changes (LeaderAndIsr / UpdateMetadata).
- heartbeat: registers the broker, reports offline replicas and created replicas (KIP-112).
- fetcher-<leader>: one replica fetcher per leader broker (followers pull, as in Kafka).
- maintenance: ISR shrink, high-watermark checkpoints, segment copier, local retention and
  remote expiration (two separate tasks per partition, as KIP-950 asks).
- probe: probes every good log dir each ``probe_interval`` s so a dir fails within 5 s even idle.
- events: pushes signed webhook events; drops them after a few attempts when nobody listens.

Where it lives: :mod:`.state` (Replica), :mod:`.logdirs`, :mod:`.metadata`, :mod:`.partitions`,
:mod:`.replication`, :mod:`.tiering`, :mod:`.snapshot`, :mod:`.dirmoves` (a composed part,
not a mixin); this module builds the broker from
them and starts its threads.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
import uuid

from broker_agent.broker.dirmoves import ReplicaDirMover
from broker_agent.broker.logdirs import LogDirsMixin
from broker_agent.broker.metadata import MetadataMixin
from broker_agent.broker.partitions import PartitionIOMixin
from broker_agent.broker.replication import ReplicationMixin
from broker_agent.broker.snapshot import SnapshotMixin
from broker_agent.broker.state import (
    Replica,
    log,
)
from broker_agent.broker.tiering import TieringMixin
from broker_agent.choices import (
    EventType,
    ExpirationMode,
    LogDirState,
)
from broker_agent.client import ControllerClient
from broker_agent.objectstore import S3Location, remote_store_uri
from broker_agent.remote import RemoteStore
from broker_agent.storage import (
    LogDir,
    PartitionLog,
    StorageError,
)

__all__ = ["Broker"]


class Broker(
    LogDirsMixin, MetadataMixin, PartitionIOMixin, ReplicationMixin, TieringMixin, SnapshotMixin
):
    """One simulated broker process: its log dirs, replicas and threads (module docstring)."""

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
        self.broker_id = broker_id
        #: this process's identity: a new one at every start, so a caller that restarts the
        #: broker can tell a restart already done from one still to do (``/v1/health``)
        self.incarnation = uuid.uuid4().hex
        self.started_ms = int(time.time() * 1000)
        self.root = os.path.join(data_dir, f"broker-{broker_id}")
        self.meta_dir = os.path.join(self.root, "meta")
        self.secret = secret
        self.url = url
        #: ``host:port`` of this broker's Kafka-protocol listener (``broker_agent.kafka_wire``)
        self.kafka_listener = kafka_listener
        #: the listener accepts clients (it opens once this broker has caught up; see
        #: ``kafka_wire.open_when_caught_up``)
        self.kafka_listener_serving = False
        self.cluster_id = cluster_id
        self.segment_bytes = segment_bytes
        self.expiration_mode = expiration_mode
        self.webhook_url = webhook_url
        self.probe_interval = probe_interval
        #: the last DEGRADED_WINDOW probe latencies per good dir (see ``_grade``)
        self._probe_history: dict[str, collections.deque[float]] = {}
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.task_interval = task_interval
        self.copier_paused = False  # set only by the tests' agent entry point
        self.controller = ControllerClient(controller_url, secret, retries=0, timeout=10)
        self.remote = RemoteStore(
            S3Location.parse(remote_store_uri(cluster_id, remote_store)), cluster_id
        )
        self.lock = threading.RLock()
        self.data_cond = threading.Condition()
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.topics: dict[str, dict] = {}
        self.broker_urls: dict[int, str] = {}
        self.cluster_brokers: list[dict] = []
        self.metadata_version = -1
        self.pending_created: set[str] = set()
        self.failures: queue.Queue = queue.Queue()
        self.events: queue.Queue = queue.Queue()
        self.fetchers: dict[int, threading.Thread] = {}
        self.stopped = threading.Event()
        self.offline_announced = False
        # Dirs whose LogDirFailure event is queued; BrokerOffline follows only when every dir is
        # in here, so listeners always see each dir's failure before the broker's.
        self.failure_announced: set[str] = set()
        # KIP-950 state applied by DisableRemoteTopic / EnableRemoteTopic, persisted.
        self.tiering: dict[str, dict] = {}
        self.applied_commands: dict[str, dict] = {}
        # snapshot versioning
        self.snapshot_version = 0
        self._snap_entries: dict[str, tuple[dict, int]] = {}
        self._snap_head: tuple | None = None
        self._snap_removed: dict[str, int] = {}
        self._snap_lock = threading.Lock()
        os.makedirs(self.meta_dir, exist_ok=True)
        # Log dir configuration: dirs removed by KIP-112 recovery (option 2) stay removed across
        # restarts; planned targets say where their replicas are re-created; cordoned dirs
        # (KIP-1066 ``cordoned.log.dirs``) stay cordoned.
        config = self._load_dir_config()
        self.removed_log_dirs: list[str] = config.get("removed", [])
        self.planned_dirs: dict[str, str] = config.get("planned", {})
        self.log_dirs = {
            name: LogDir(name, os.path.join(self.root, name), self._on_dir_failure)
            for name in log_dir_names
            if name not in self.removed_log_dirs
        }
        cordoned = set(config.get("cordoned", []))
        for d in self.log_dirs.values():
            d.capacity_bytes = log_dir_capacity_bytes
            d.cordoned = d.name in cordoned
        #: replicas moving between this broker's dirs (AlterReplicaLogDirs)
        self.dir_mover = ReplicaDirMover(self)

    def start(self) -> None:
        self._load_tiering()
        for d in self.log_dirs.values():
            try:
                if not os.path.exists(d.path):
                    os.makedirs(d.path)
                d.probe_latency_ms = d.probe()
            except OSError as exc:
                # KIP-112 "Broker bootstraps with bad log directories": come up on the good ones.
                d.state = LogDirState.OFFLINE
                d.error = f"{type(exc).__name__}: {exc}"
                log.error("log dir %s is bad at startup: %s", d.name, d.error)
                self.events.put(self._event(EventType.LOG_DIR_FAILURE, d.name, d.error))
                self.failure_announced.add(d.name)
        for d in self.log_dirs.values():
            if d.good:
                self._load_dir(d)
        for target, name in (
            (self._metadata_loop, "metadata"),
            (self._heartbeat_loop, "heartbeat"),
            (self._maintenance_loop, "maintenance"),
            (self._probe_loop, "probe"),
            (self._failure_loop, "failures"),
            (self._events_loop, "events"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    def _load_dir(self, d: LogDir) -> None:
        try:
            names = d.io(lambda: os.listdir(d.path))
        except StorageError:
            return
        for name in names:
            full = os.path.join(d.path, name)
            topic, _, p = name.rpartition("-")
            if not topic or not p.isdigit() or not os.path.isdir(full):
                continue
            key = (topic, int(p))
            with self.lock:
                r = self.replicas.get(key)
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
                self.replicas[key] = r
