"""A simulated broker: replica manager, replica fetcher, tiering tasks, log-dir health.

Threads (all daemons, one process per broker):

- metadata: long-polls the controller and applies changes (LeaderAndIsr / UpdateMetadata).
- heartbeat: registers the broker, reports offline replicas and created replicas (KIP-112).
- fetcher-<leader>: one replica fetcher per leader broker (followers pull, as in Kafka).
- maintenance: ISR shrink, high-watermark checkpoints, segment copier, local retention and
  remote expiration (two separate tasks per partition, as KIP-950 asks).
- probe: probes every good log dir each ``probe_interval`` s so a dir fails within 5 s even idle.
- events: pushes signed webhook events; drops them after a few attempts when nobody listens.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import logging
import os
import queue
import statistics
import threading
import time
import uuid

import httpx

from broker_agent.choices import (
    CleanupPolicy,
    DisablePolicy,
    ErrorCode,
    EventType,
    ExpirationMode,
    LogDirState,
    RemoteSegmentState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.client import AgentClient, AgentError, ControllerClient
from broker_agent.remote import RemoteStore, is_readable
from broker_agent.signing import sign_headers
from broker_agent.storage import (
    Batch,
    LogDir,
    PartitionLog,
    StorageError,
    decode_batches,
    encode_batch,
)
from broker_agent.web import ApiError

__all__ = ["Broker"]

log = logging.getLogger("broker_agent.broker")

#: Consecutive slow probes that make a log dir DEGRADED (see ``Broker._grade``).
DEGRADED_WINDOW = 3
OFFSET_MOVED_TO_TIERED_STORAGE = "OFFSET_MOVED_TO_TIERED_STORAGE"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _storage_error(exc: StorageError, topic: str, partition: int) -> ApiError:
    """503 KAFKA_STORAGE_ERROR naming the offline log dir. The I/O error itself (errno, paths)
    stays in the log (``log dir ... failed``, once per failure), as Kafka answers
    KafkaStorageException without the OS's text."""
    log.debug("%s-%d on %s: %s", topic, partition, exc.log_dir, exc.error)
    return ApiError(503, ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {exc.log_dir} is offline")


class Replica:
    def __init__(self, topic: str, partition: int, topic_id: str):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log: PartitionLog | None = None
        self.dir_name: str | None = None
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.isr: list[int] = []
        self.replicas: list[int] = []
        self.marked_for_deletion = False
        self.follower_leo: dict[int, int] = {}
        self.caught_up_ms: dict[int, float] = {}
        self.became_leader_ms = 0.0
        self.needs_truncation = True
        self.isr_inflight = False
        self.last_size_bytes: int | None = None
        self.cond = threading.Condition(threading.RLock())

    @property
    def online(self) -> bool:
        return self.log is not None


class Broker:
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
    ):
        self.broker_id = broker_id
        self.root = os.path.join(data_dir, f"broker-{broker_id}")
        self.meta_dir = os.path.join(self.root, "meta")
        self.secret = secret
        self.url = url
        self.cluster_id = cluster_id
        self.segment_bytes = segment_bytes
        self.expiration_mode = expiration_mode
        self.webhook_url = webhook_url
        self.probe_interval = probe_interval
        #: the last DEGRADED_WINDOW probe latencies per good dir (see ``_grade``)
        self._probe_history: dict[str, collections.deque[float]] = {}
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.task_interval = task_interval
        self.controller = ControllerClient(controller_url, secret, retries=0, timeout=10)
        self.remote = RemoteStore(os.path.join(data_dir, "remote"), cluster_id)
        self.lock = threading.RLock()
        self.data_cond = threading.Condition()
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.topics: dict[str, dict] = {}
        self.broker_urls: dict[int, str] = {}
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
        # restarts; planned targets say where their replicas are re-created.
        config = self._load_dir_config()
        self.removed_log_dirs: list[str] = config.get("removed", [])
        self.planned_dirs: dict[str, str] = config.get("planned", {})
        self.log_dirs = {
            name: LogDir(name, os.path.join(self.root, name), self._on_dir_failure)
            for name in log_dir_names
            if name not in self.removed_log_dirs
        }
        for d in self.log_dirs.values():
            d.capacity_bytes = log_dir_capacity_bytes

    # -- startup -----------------------------------------------------------------------------

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

    # -- persistence of tiering state ---------------------------------------------------------

    def _load_tiering(self) -> None:
        try:
            with open(os.path.join(self.meta_dir, "tiering.json")) as fh:
                obj = json.load(fh)
            self.tiering = obj.get("topics", {})
            self.applied_commands = obj.get("commands", {})
        except FileNotFoundError:
            pass

    def _load_dir_config(self) -> dict:
        try:
            with open(os.path.join(self.meta_dir, "log-dirs.json")) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {}

    def _save_dir_config(self) -> None:
        path = os.path.join(self.meta_dir, "log-dirs.json")
        with open(path + ".tmp", "w") as fh:
            json.dump({"removed": self.removed_log_dirs, "planned": self.planned_dirs}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(path + ".tmp", path)

    def _save_tiering(self) -> None:
        path = os.path.join(self.meta_dir, "tiering.json")
        with open(path + ".tmp", "w") as fh:
            json.dump({"topics": self.tiering, "commands": self.applied_commands}, fh)
        os.replace(path + ".tmp", path)

    # -- log dir failure ----------------------------------------------------------------------

    def _on_dir_failure(self, d: LogDir, error: str) -> None:
        # Called from inside storage operations (locks held): hand over to the failures thread.
        self.failures.put((d.name, error))

    def _failure_loop(self) -> None:
        while not self.stopped.is_set():
            name, error = self.failures.get()
            d = self.log_dirs[name]
            log.error("log dir %s failed: %s", name, error)
            offline = []
            with self.lock:
                for r in self.replicas.values():
                    if r.dir_name == name and r.log is not None:
                        r.last_size_bytes = r.log.size_bytes
                        r.log = None
                        offline.append(_key(r.topic, r.partition))
                        with r.cond:
                            r.cond.notify_all()
            with self.data_cond:
                self.data_cond.notify_all()
            self.events.put(self._event(EventType.LOG_DIR_FAILURE, name, d.error, offline))
            self.failure_announced.add(name)
            try:
                self.controller.request(
                    "POST",
                    f"/v1/brokers/{self.broker_id}/log-dir-events",
                    body={
                        "broker_id": self.broker_id,
                        "event": EventType.LOG_DIR_FAILURE,
                        "log_dir": name,
                        "error": d.error,
                    },
                    retries=2,
                )
            except (AgentError, httpx.HTTPError) as exc:
                log.warning("could not tell the controller about %s: %s", name, exc)
            self._heartbeat_once()
            # A dir already marked OFFLINE may not have had its turn in this loop yet (cordoning
            # two dirs back to back): its failure event goes out first, the broker's after it.
            every_failure_sent = self.failure_announced.issuperset(self.log_dirs)
            if every_failure_sent and not self.online and not self.offline_announced:
                self.offline_announced = True
                log.error("all log dirs are offline: broker %s goes offline", self.broker_id)
                self.events.put(self._event(EventType.BROKER_OFFLINE, None, "no good log dir"))

    @property
    def online(self) -> bool:
        return any(d.good for d in self.log_dirs.values())

    def _probe_loop(self) -> None:
        while not self.stopped.wait(self.probe_interval):
            latencies = {}
            for d in list(self.log_dirs.values()):
                if not d.good:
                    continue
                try:
                    latencies[d.name] = d.probe()
                    d.probe_latency_ms = latencies[d.name]
                except OSError as exc:
                    d.fail(f"probe failed: {type(exc).__name__}: {exc}")
            self._grade(latencies)

    def _grade(self, latencies: dict[str, float]) -> None:
        """DEGRADED: a dir whose probes were *all* of the last ``DEGRADED_WINDOW`` more than 10x
        slower than the median of its peers (and > 50 ms); each dir is judged by the fastest of
        its recent probes. One slow fsync (a burst of writes, a busy host) is no sign of a
        failing disk, and a single sample made a healthy dir flap to DEGRADED and back."""
        for name in list(self._probe_history):
            if name not in latencies:
                del self._probe_history[name]
        sustained = {}
        for name, ms in latencies.items():
            window = self._probe_history.setdefault(name, collections.deque(maxlen=DEGRADED_WINDOW))
            window.append(ms)
            sustained[name] = min(window)
        for name, ms in sustained.items():
            d = self.log_dirs[name]
            peers = [v for k, v in sustained.items() if k != name]
            full = len(self._probe_history[name]) == DEGRADED_WINDOW
            slow = full and bool(peers) and ms > max(50.0, 10 * statistics.median(peers))
            if d.good:
                d.state = LogDirState.DEGRADED if slow else LogDirState.ONLINE

    def cordon(self, name: str) -> dict:
        d = self._dir(name)
        d.cordoned = True
        d.fail("cordoned by admin")
        deadline = time.monotonic() + 5
        while not self.failures.empty() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.log_dir_info(d)

    def reprobe(self, name: str) -> dict:
        """Re-probe a dir (after the disk was fixed or replaced): ONLINE again if it works,
        then load any replica folders it still holds (the disk "can either be empty or contain
        the old data", KIP-112)."""
        d = self._dir(name)
        try:
            if not os.path.exists(d.path):
                os.makedirs(d.path)
            ms = d.probe()
        except OSError as exc:
            # A dir that was good fails like any other (event, controller told, replicas off).
            d.fail(f"{type(exc).__name__}: {exc}")
            d.error = f"{type(exc).__name__}: {exc}"
            return self.log_dir_info(d)
        was_offline = d.state == LogDirState.OFFLINE
        d.state, d.error, d.cordoned, d.probe_latency_ms = LogDirState.ONLINE, None, False, ms
        if was_offline:
            self._load_dir(d)
            self.failure_announced.discard(name)
            self.offline_announced = False
            self.events.put(self._event(EventType.LOG_DIR_RECOVERED, name, None))
            self._heartbeat_once()
        return self.log_dir_info(d)

    # -- KIP-112 recovery, option 2: remove a bad dir from the configuration -------------------

    def _sizes_from_leaders(self, replicas: list[Replica]) -> dict[str, int]:
        """Local size of each partition on its current leader (what catching up will write)."""
        by_leader: dict[int, set[str]] = {}
        for r in replicas:
            if r.leader >= 0 and r.leader != self.broker_id and r.leader in self.broker_urls:
                by_leader.setdefault(r.leader, set()).add(_key(r.topic, r.partition))
        sizes: dict[str, int] = {}
        for leader, keys in by_leader.items():
            try:
                with AgentClient(
                    self.broker_urls[leader], self.secret, retries=1, timeout=5
                ) as agent:
                    snap = agent.snapshot()
            except (AgentError, httpx.HTTPError) as exc:
                log.warning("removal plan: leader %s unreachable: %s", leader, exc)
                continue
            for info in snap.replicas:
                key = _key(info.topic, info.partition)
                if key in keys and info.is_leader:
                    sizes[key] = info.size_bytes
        return sizes

    def removal_plan(self, name: str) -> dict:
        """What removing ``name`` from this broker's config needs: the replicas that must be
        re-created on good dirs (sized by their leaders), a placement on the good dirs (largest
        first onto the dir with the most room left), and per good dir needed vs usable bytes.

        Replicas that must move: offline replicas on this dir, and offline replicas whose dir is
        unknown (a broker that booted with the dir already bad could not read it)."""
        d = self._dir(name)
        with self.lock:
            moving = [
                r
                for r in self.replicas.values()
                if r.log is None and (r.dir_name == name or r.dir_name is None)
            ]
            others = [x for x in self.log_dirs.values() if x.name != name]
            targets = [x for x in others if x.good and not x.cordoned]
            infos = {x.name: self.log_dir_info(x) for x in targets}
        leader_sizes = self._sizes_from_leaders(moving)
        rows = []
        for r in moving:
            key = _key(r.topic, r.partition)
            if key in leader_sizes:
                size, source = leader_sizes[key], "leader"
            elif r.last_size_bytes is not None:
                size, source = r.last_size_bytes, "last_known"
            else:
                size, source = 0, "unknown"
            rows.append(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "size_bytes": size,
                    "size_source": source,
                    "target_dir": None,
                }
            )
        room = {n: i["usable_bytes"] for n, i in infos.items()}
        needed = dict.fromkeys(room, 0)
        for row in sorted(rows, key=lambda x: (-x["size_bytes"], x["topic"], x["partition"])):
            best = max(room, key=lambda n: (room[n], n), default=None)
            if best is None:
                continue
            if room[best] >= row["size_bytes"]:
                row["target_dir"] = best
            # an unplaceable replica still counts against the dir with the most room, so that
            # dir shows needed > usable (fits: false)
            room[best] -= row["size_bytes"]
            needed[best] += row["size_bytes"]
        rows.sort(key=lambda x: (x["topic"], x["partition"]))
        total_needed = sum(x["size_bytes"] for x in rows)
        available = sum(i["usable_bytes"] for i in infos.values())
        unplaced = [x for x in rows if x["target_dir"] is None]
        error, message = None, ""
        if not others:
            error, message = ErrorCode.LAST_LOG_DIR, f"{name} is the broker's only log dir"
        elif d.state != LogDirState.OFFLINE:
            error = ErrorCode.LOG_DIR_NOT_OFFLINE
            message = f"{name} is {d.state}: only an OFFLINE (failed or cordoned) dir is removed"
        elif unplaced:
            error = ErrorCode.INSUFFICIENT_SPACE
            message = (
                f"the good dirs lack usable space for {len(unplaced)} of {len(rows)} replicas "
                f"({total_needed} bytes needed, {available} usable)"
            )
        return {
            "broker_id": self.broker_id,
            "log_dir": name,
            "state": d.state,
            "removable": error is None,
            "removed": False,
            "error": error,
            "message": message,
            "needed_bytes": total_needed,
            "available_bytes": available,
            "replicas": rows,
            "good_dirs": [
                {
                    "name": n,
                    "state": infos[n]["state"],
                    "usable_bytes": infos[n]["usable_bytes"],
                    "needed_bytes": needed[n],
                    "fits": needed[n] <= infos[n]["usable_bytes"],
                }
                for n in sorted(infos)
            ],
        }

    def remove_log_dir(self, name: str, dry_run: bool = False) -> dict:
        """Remove a bad dir from this broker's configuration (persisted in
        ``meta/log-dirs.json``), or refuse with the plan's error. Its replicas stay offline
        until LogDirReset, then are re-created on the planned good dirs and catch up."""
        plan = self.removal_plan(name)
        if not plan["removable"]:
            status = 400 if plan["error"] == ErrorCode.LAST_LOG_DIR else 409
            raise ApiError(status, plan["error"], plan["message"], plan=plan)
        if dry_run:
            return plan
        with self.lock:
            self.removed_log_dirs = sorted({*self.removed_log_dirs, name})
            for row in plan["replicas"]:
                self.planned_dirs[_key(row["topic"], row["partition"])] = row["target_dir"]
            self._save_dir_config()
            self.log_dirs.pop(name, None)
            for r in self.replicas.values():
                if r.log is None and r.dir_name == name:
                    r.dir_name = None
        log.warning("log dir %s removed from broker %s's configuration", name, self.broker_id)
        self._heartbeat_once()
        return dict(plan, removed=True)

    def set_probe_delay(self, name: str, delay_ms: float) -> dict:
        """Test hook (``STRATA_AGENT_TEST_HOOKS=1`` only): slow every probe of a dir down."""
        d = self._dir(name)
        d.probe_delay_ms = delay_ms
        return {"log_dir": name, "probe_delay_ms": delay_ms}

    def _dir(self, name: str) -> LogDir:
        d = self.log_dirs.get(name)
        if d is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"unknown log dir {name!r}")
        return d

    # -- events -------------------------------------------------------------------------------

    def _event(self, event: str, log_dir: str | None, error: str | None, offline=None) -> dict:
        return {
            "event_id": uuid.uuid4().hex,
            "event": event,
            "cluster": self.cluster_id,
            "broker_id": self.broker_id,
            "log_dir": log_dir,
            "error": error,
            "offline_replicas": offline or [],
            "timestamp_ms": _now_ms(),
        }

    def _events_loop(self) -> None:
        with httpx.Client(timeout=3) as http:
            while not self.stopped.is_set():
                ev = self.events.get()
                url = self.webhook_url or os.environ.get("STRATA_EVENTS_WEBHOOK_URL")
                if not url:
                    continue
                body = json.dumps(ev).encode()
                path = httpx.URL(url).raw_path.decode()
                for attempt in range(3):
                    try:
                        headers = sign_headers(self.secret, "POST", path, body)
                        headers["Content-Type"] = "application/json"
                        r = http.post(url, content=body, headers=headers)
                        if r.status_code < 500:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2 * (attempt + 1))
                else:
                    log.info("webhook %s unreachable; dropped %s", url, ev["event"])

    # -- metadata -----------------------------------------------------------------------------

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
        if r is None:
            r = Replica(key[0], key[1], t["topic_id"])
            self.replicas[key] = r
        if r.log is not None and r.log.topic_id and r.log.topic_id != t["topic_id"]:
            log.info("replica %s-%s belongs to a deleted topic id; recreating", *key)
            with contextlib.suppress(StorageError):
                r.log.delete()
            r.log = None
        r.topic_id = t["topic_id"]
        created = self.broker_id in part["created"]
        if r.log is None and not created:
            self._create_replica(r, t)
        if r.log is not None and not created:
            self.pending_created.add(_key(*key))
        elif created:
            self.pending_created.discard(_key(*key))
        r.replicas = part["replicas"]
        r.marked_for_deletion = part["marked_for_deletion"]
        leader_changed = part["leader"] != r.leader or part["leader_epoch"] != r.leader_epoch
        isr_changed = part["isr"] != r.isr
        r.leader, r.isr, r.partition_epoch = part["leader"], part["isr"], part["partition_epoch"]
        if leader_changed:
            r.leader_epoch = part["leader_epoch"]
            if r.leader == self.broker_id and r.log is not None:
                with r.log.lock:
                    r.log.set_leader_epoch_start(r.leader_epoch, r.log.log_end_offset)
                r.follower_leo = {}
                r.caught_up_ms = {b: time.monotonic() * 1000 for b in r.isr}
                r.became_leader_ms = time.monotonic() * 1000
            else:
                r.needs_truncation = True
        if r.log is not None and r.leader == self.broker_id and (isr_changed or leader_changed):
            self._update_hw(r)
        with r.cond:
            r.cond.notify_all()

    def _create_replica(self, r: Replica, t: dict) -> None:
        """KIP-112: new replicas only on good dirs (the one holding the fewest replicas)."""
        good = [d for d in self.log_dirs.values() if d.good and not d.cordoned]
        if not good:
            return
        counts = {d.name: 0 for d in good}
        for other in self.replicas.values():
            if other.online and other.dir_name in counts:
                counts[other.dir_name] += 1
        d = min(good, key=lambda x: (counts[x.name], x.name))
        planned = self.planned_dirs.get(_key(r.topic, r.partition))
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
        self.pending_created.add(_key(r.topic, r.partition))
        if self.planned_dirs.pop(_key(r.topic, r.partition), None) is not None:
            self._save_dir_config()

    # -- heartbeat ----------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self.stopped.wait(0.25):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        with self.lock:
            offline = [_key(*k) for k, r in self.replicas.items() if r.log is None]
            empty = [
                _key(*k)
                for k, r in self.replicas.items()
                if r.log is not None
                and r.marked_for_deletion
                and r.leader == self.broker_id
                and r.log.log_start_offset >= r.log.log_end_offset
            ]
            body = {
                "broker_id": self.broker_id,
                "url": self.url,
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

    # -- leader side ----------------------------------------------------------------------------

    def _leader(self, topic: str, partition: int) -> Replica:
        r = self.replicas.get((topic, partition))
        if r is None:
            if topic not in self.topics:
                raise ApiError(
                    404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
                )
            raise ApiError(
                409, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} has no replica"
            )
        if r.log is None:
            raise ApiError(
                503, ErrorCode.KAFKA_STORAGE_ERROR, "replica is offline (log dir failed)"
            )
        if r.leader != self.broker_id:
            raise ApiError(
                409,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leader of {topic}-{partition} is {r.leader}",
            )
        return r

    def _update_hw(self, r: Replica) -> None:
        """HW = min LEO over the ISR (monotonic); wakes acks=all producers."""
        plog = r.log
        if plog is None:
            return
        with r.cond:
            leo = plog.log_end_offset
            others = [r.follower_leo.get(b, 0) for b in r.isr if b != self.broker_id]
            hw = min([leo, *others])
            if hw > plog.high_watermark:
                plog.high_watermark = hw
                r.cond.notify_all()

    def produce(self, req) -> dict:
        """Leader append. acks=all waits until the ISR has the batch (HW past it). Idempotent:
        a batch whose (producer_id, base_sequence) is already in the log is not appended again.
        KIP-253: a producer whose undeleted_partition_count differs from the leader's is refused
        with INVALID_PARTITION_METADATA (unless enable.ordered.delivery=false)."""
        r = self._leader(req.topic, req.partition)
        t = self.topics.get(req.topic, {})
        configs = t.get("configs", {})
        ordered = configs.get(TopicConfig.ENABLE_ORDERED_DELIVERY, "true") == "true"
        if (
            ordered
            and req.undeleted_partition_count is not None
            and req.undeleted_partition_count != t.get("undeleted_partition_count")
        ):
            raise ApiError(
                409,
                ErrorCode.INVALID_PARTITION_METADATA,
                f"producer's undeleted_partition_count {req.undeleted_partition_count} != "
                f"{t.get('undeleted_partition_count')}: refresh metadata and retry",
            )
        min_isr = int(configs.get(TopicConfig.MIN_INSYNC_REPLICAS, "1"))
        if req.acks == -1 and len(r.isr) < min_isr:
            raise ApiError(
                503, ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR {r.isr} < min.insync {min_isr}"
            )
        now = _now_ms()
        plog = r.log
        duplicate = False
        with r.cond:
            dup = (
                plog.find_duplicate(req.producer_id, req.base_sequence)
                if req.producer_id >= 0
                else None
            )
            if dup is not None:
                base, last = dup
                duplicate = True
            else:
                batch = encode_batch(
                    [
                        (
                            None if x.key is None else x.key.encode(),
                            x.value.encode(),
                            x.timestamp_ms or now,
                        )
                        for x in req.records
                    ],
                    leader_epoch=r.leader_epoch,
                    producer_id=req.producer_id,
                    base_sequence=req.base_sequence,
                )
                try:
                    plog.append(batch, assign_offsets=True)
                except StorageError as exc:
                    raise _storage_error(exc, req.topic, req.partition) from None
                base, last = batch.base_offset, batch.last_offset
                self._update_hw(r)
        with self.data_cond:
            self.data_cond.notify_all()
        if req.acks == -1:
            deadline = time.monotonic() + req.timeout_ms / 1000
            with r.cond:
                while True:
                    if r.log is not plog or r.leader != self.broker_id:
                        raise ApiError(409, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership moved")
                    if plog.high_watermark > last:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ApiError(504, ErrorCode.REQUEST_TIMED_OUT, "ISR did not acknowledge")
                    r.cond.wait(min(remaining, 0.5))
        return {
            "topic": req.topic,
            "partition": req.partition,
            "base_offset": base,
            "log_end_offset": plog.log_end_offset,
            "high_watermark": plog.high_watermark,
            "duplicate": duplicate,
        }

    def fetch(self, topic: str, partition: int, offset: int, max_records: int) -> dict:
        """Consumer fetch from the leader, up to the high watermark. Below the local log start
        offset it reads readable remote segments (KIP-405); below the log start offset it is
        OFFSET_OUT_OF_RANGE."""
        r = self._leader(topic, partition)
        plog = r.log
        hw = plog.high_watermark
        lso, local_start = plog.log_start_offset, plog.local_log_start_offset
        if offset < lso or offset > hw:
            raise ApiError(
                416,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [{lso}, {hw}]",
                log_start_offset=lso,
                high_watermark=hw,
            )
        records: list[dict] = []
        remote_records = 0
        if offset < local_start:
            batches = self._read_remote(r, offset)
            remote_records = -1
        else:
            try:
                batches = plog.read(offset, 1 << 20, upper=hw)
            except StorageError as exc:
                raise _storage_error(exc, topic, partition) from None
        for b in batches:
            for rec in b.records():
                if rec.offset < offset or rec.offset >= hw:
                    continue
                records.append(
                    {
                        "offset": rec.offset,
                        "timestamp_ms": rec.timestamp_ms,
                        "key": None if rec.key is None else rec.key.decode(errors="replace"),
                        "value": rec.value.decode(errors="replace"),
                    }
                )
                if len(records) >= max_records:
                    break
            if len(records) >= max_records:
                break
        if remote_records == -1:
            remote_records = len(records)
        nxt = records[-1]["offset"] + 1 if records else offset
        return {
            "topic": topic,
            "partition": partition,
            "records": records,
            "next_offset": nxt,
            "high_watermark": hw,
            "log_start_offset": lso,
            "local_log_start_offset": local_start,
            "remote_records": remote_records,
        }

    def _read_remote(self, r: Replica, offset: int) -> list[Batch]:
        tier = self.tiering.get(r.topic, {})
        purge = tier.get("purge_below_tiered_epoch", 0)
        for seg in self.remote.segments(r.topic, r.topic_id, r.partition):
            if seg["start_offset"] <= offset <= seg["end_offset"]:
                if not is_readable(seg, purge, r.log.log_start_offset):
                    continue
                try:
                    data = self.remote.read_object(seg)
                except FileNotFoundError:
                    continue
                return [b for _, b in decode_batches(data) if b.last_offset >= offset]
        raise ApiError(
            416,
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is below the local log start and no readable remote segment holds it",
            log_start_offset=r.log.log_start_offset,
        )

    def replica_fetch(self, req: dict) -> dict:
        """Leader side of follower fetching (long-poll up to ``max_wait_ms``)."""
        follower = req["replica_id"]
        deadline = time.monotonic() + min(req.get("max_wait_ms", 500), 2000) / 1000
        while True:
            out, has_data = [], False
            for p in req["partitions"]:
                res = self._replica_fetch_one(follower, p)
                has_data = has_data or bool(res.get("batches")) or bool(res.get("error"))
                out.append(res)
            remaining = deadline - time.monotonic()
            if has_data or remaining <= 0:
                return {"partitions": out}
            with self.data_cond:
                self.data_cond.wait(min(remaining, 0.2))

    def _replica_fetch_one(self, follower: int, p: dict) -> dict:
        topic, partition, offset = p["topic"], p["partition"], p["fetch_offset"]
        base = {"topic": topic, "partition": partition}
        r = self.replicas.get((topic, partition))
        if r is None or r.log is None or r.leader != self.broker_id:
            return dict(base, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if p["leader_epoch"] != r.leader_epoch:
            return dict(base, error=ErrorCode.FENCED_LEADER_EPOCH)
        plog = r.log
        leo = plog.log_end_offset
        if offset > leo:
            return dict(base, error=ErrorCode.OFFSET_OUT_OF_RANGE, log_end_offset=leo)
        if offset < plog.local_log_start_offset:
            return dict(
                base,
                error=OFFSET_MOVED_TO_TIERED_STORAGE,
                local_log_start_offset=plog.local_log_start_offset,
                log_start_offset=plog.log_start_offset,
            )
        now = time.monotonic() * 1000
        r.follower_leo[follower] = offset
        if offset >= leo:
            r.caught_up_ms[follower] = now
        self._update_hw(r)
        self._maybe_expand_isr(r, follower, offset)
        try:
            batches = plog.read(offset, 1 << 20) if offset < leo else []
        except StorageError:
            return dict(base, error=ErrorCode.KAFKA_STORAGE_ERROR)
        return dict(
            base,
            high_watermark=plog.high_watermark,
            log_start_offset=plog.log_start_offset,
            batches=[base64.b64encode(b.to_bytes()).decode() for b in batches],
        )

    def _maybe_expand_isr(self, r: Replica, follower: int, offset: int) -> None:
        if follower in r.isr or r.isr_inflight or follower not in r.replicas:
            return
        epoch_start = r.log.leader_epochs[-1][1] if r.log.leader_epochs else 0
        if offset >= r.log.high_watermark and offset >= epoch_start:
            self._propose_isr(r, [*r.isr, follower])

    def _propose_isr(self, r: Replica, isr: list[int]) -> None:
        r.isr_inflight = True
        body = {
            "topic": r.topic,
            "partition": r.partition,
            "leader_id": self.broker_id,
            "leader_epoch": r.leader_epoch,
            "partition_epoch": r.partition_epoch,
            "isr": isr,
        }

        def _send():
            try:
                part = self.controller.request(
                    "POST", "/v1/partitions/alter-isr", body=body, retries=1
                )
                with self.lock:
                    if part["leader_epoch"] == r.leader_epoch:
                        r.isr, r.partition_epoch = part["isr"], part["partition_epoch"]
                        self._update_hw(r)
            except (AgentError, httpx.HTTPError) as exc:
                log.info("AlterPartition %s-%s failed: %s", r.topic, r.partition, exc)
            finally:
                r.isr_inflight = False

        threading.Thread(target=_send, daemon=True).start()

    def offsets_for_leader_epoch(self, topic: str, partition: int, epoch: int) -> dict:
        r = self._leader(topic, partition)
        e, end = r.log.end_offset_for_epoch(epoch)
        return {"leader_epoch": e, "end_offset": end}

    # -- follower side ------------------------------------------------------------------------

    def _ensure_fetchers(self) -> None:
        with self.lock:
            leaders = {
                r.leader
                for r in self.replicas.values()
                if r.online and r.leader not in (-1, self.broker_id)
            }
            for leader in leaders:
                th = self.fetchers.get(leader)
                if th is None or not th.is_alive():
                    th = threading.Thread(
                        target=self._fetcher_loop,
                        args=(leader,),
                        name=f"fetcher-{leader}",
                        daemon=True,
                    )
                    self.fetchers[leader] = th
                    th.start()

    def _fetcher_loop(self, leader: int) -> None:
        client: AgentClient | None = None
        url = None
        idle = 0
        while not self.stopped.is_set():
            with self.lock:
                parts = [
                    r
                    for r in self.replicas.values()
                    if r.online and r.leader == leader and r.leader != self.broker_id
                ]
                leader_url = self.broker_urls.get(leader)
            if not parts or leader_url is None:
                idle += 1
                if idle > 50:
                    return
                time.sleep(0.1)
                continue
            idle = 0
            if url != leader_url:
                if client:
                    client.close()
                client, url = (
                    AgentClient(leader_url, self.secret, retries=0, timeout=10),
                    leader_url,
                )
            try:
                self._fetch_round(client, parts)
            except (AgentError, httpx.HTTPError) as exc:
                log.debug("fetch from %s failed: %s", leader, exc)
                time.sleep(0.2)
            except StorageError:
                time.sleep(0.05)

    def _fetch_round(self, client: AgentClient, parts: list[Replica]) -> None:
        for r in parts:
            if r.needs_truncation and r.log is not None:
                epoch = r.log.latest_epoch
                if epoch >= 0:
                    res = client.request(
                        "GET",
                        f"/v1/replica/{r.topic}/{r.partition}/offsets-for-leader-epoch",
                        params={"leader_epoch": epoch},
                        retries=0,
                    )
                    end = res["end_offset"]
                    # Truncate to the leader's end offset for our latest epoch (KIP-101).
                    if 0 <= end < r.log.log_end_offset:
                        log.info("truncating %s-%s to %s", r.topic, r.partition, end)
                        r.log.truncate_to(end)
                r.needs_truncation = False
        req = {
            "replica_id": self.broker_id,
            "max_wait_ms": 500,
            "partitions": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "fetch_offset": r.log.log_end_offset,
                    "leader_epoch": r.leader_epoch,
                }
                for r in parts
                if r.log is not None and not r.needs_truncation
            ],
        }
        if not req["partitions"]:
            time.sleep(0.05)
            return
        resp = client.request("POST", "/v1/replica/fetch", body=req, retries=0, timeout=10)
        errors = 0
        for res in resp["partitions"]:
            r = self.replicas.get((res["topic"], res["partition"]))
            if r is None or r.log is None:
                continue
            err = res.get("error")
            plog = r.log
            if err == OFFSET_MOVED_TO_TIERED_STORAGE:
                plog.truncate_fully_and_start_at(res["local_log_start_offset"])
                plog.advance_log_start_offset(res["log_start_offset"])
                continue
            if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                plog.truncate_to(res["log_end_offset"])
                continue
            if err:
                errors += 1
                continue
            for b64 in res["batches"]:
                for _, batch in decode_batches(base64.b64decode(b64)):
                    if batch.base_offset == plog.log_end_offset:
                        plog.append(batch, assign_offsets=False)
            with r.cond:
                plog.high_watermark = max(
                    plog.high_watermark, min(res["high_watermark"], plog.log_end_offset)
                )
            if res["log_start_offset"] > plog.log_start_offset:
                plog.advance_log_start_offset(min(res["log_start_offset"], plog.log_end_offset))
        if errors == len(resp["partitions"]):
            time.sleep(0.1)

    # -- maintenance: ISR, copier, retention, expiration --------------------------------------

    def _maintenance_loop(self) -> None:
        last_ckpt = 0.0
        while not self.stopped.wait(self.task_interval):
            with self.lock:
                replicas = [r for r in self.replicas.values() if r.log is not None]
            now = time.monotonic()
            for r in replicas:
                try:
                    if r.leader == self.broker_id:
                        self._maybe_shrink_isr(r)
                        self._copier_task(r)
                        self._expiration_task(r)
                    self._local_retention(r)
                    if now - last_ckpt > 2 and r.log is not None:
                        r.log.checkpoint_high_watermark()
                except (StorageError, OSError, AttributeError) as exc:
                    log.debug("maintenance of %s-%s: %s", r.topic, r.partition, exc)
                except Exception:
                    log.exception("maintenance of %s-%s failed", r.topic, r.partition)
            if now - last_ckpt > 2:
                last_ckpt = now
            self._ensure_fetchers()

    def _maybe_shrink_isr(self, r: Replica) -> None:
        now = time.monotonic() * 1000
        lagging = [
            b
            for b in r.isr
            if b != self.broker_id
            and now - r.caught_up_ms.get(b, r.became_leader_ms) > self.replica_lag_time_max_ms
        ]
        if lagging and not r.isr_inflight:
            self._propose_isr(r, [b for b in r.isr if b not in lagging])

    def _topic_config(self, topic: str, name: str) -> str:
        return self.topics.get(topic, {}).get("configs", {}).get(name, TopicConfig.DEFAULTS[name])

    def _remote_view(self, r: Replica) -> dict:
        tier = self.tiering.get(r.topic, {})
        purge = tier.get("purge_below_tiered_epoch", 0)
        segs = self.remote.segments(r.topic, r.topic_id, r.partition)
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

    def copier_state(self, r: Replica) -> str:
        tier = self.tiering.get(r.topic, {})
        meta_state = self.topics.get(r.topic, {}).get("tiered_state")
        if r.leader != self.broker_id:
            return TaskState.NOT_LEADER
        if tier.get("state") == TieredState.ENABLED and meta_state == TieredState.ENABLED:
            return TaskState.RUNNING
        return TaskState.STOPPED

    def expiration_state(self, r: Replica) -> str:
        tier = self.tiering.get(r.topic, {})
        if r.leader != self.broker_id:
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

    def _copier_task(self, r: Replica) -> None:
        """RemoteStorageCopier: copy closed, committed segments above the remote log end with
        the topic's tiered epoch. Runs only while the applied tiering state and the controller's
        metadata are both ENABLED (so a broker that missed the command still stops copying)."""
        if self.copier_state(r) != TaskState.RUNNING:
            return
        if CleanupPolicy.COMPACT in self._topic_config(r.topic, TopicConfig.CLEANUP_POLICY):
            return
        plog = r.log
        tier = self.tiering[r.topic]
        remote_end = self._remote_view(r)["remote_log_end_offset"]
        for seg in plog.closed_segments():
            if seg.last_offset <= remote_end:
                continue
            if seg.last_offset >= plog.high_watermark:
                break
            start = max(seg.base_offset, remote_end + 1, plog.log_start_offset)
            data = plog.read_segment_bytes(seg)
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

    def _local_retention(self, r: Replica) -> None:
        """Delete local segments.

        - Always: segments wholly below the log start offset.
        - Tiered (copying): local.retention.* applies, and only to segments already copied.
        - Disabled with retain and remote data left: nothing local expires until the remote
          data is gone (KIP-950 offset continuity); topic-wide retention runs on remote first.
        - Otherwise (never tiered, delete policy, or no remote data left): retention.* applies
          to local segments, advancing the log start offset.
        """
        plog = r.log
        tier = self.tiering.get(r.topic, {})
        closed = plog.closed_segments()
        for seg in closed:
            if seg.last_offset < plog.log_start_offset:
                plog.delete_segment(seg)
        closed = plog.closed_segments()
        if not closed:
            return
        now = _now_ms()
        view = self._remote_view(r)
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
            eligible = list(closed) if r.leader == self.broker_id else []
            moves_lso = True
        size = plog.size_bytes
        for seg in eligible:
            too_big = rb >= 0 and size - seg.size >= rb
            too_old = rms >= 0 and now - seg.max_timestamp_ms > rms
            if not (too_big or too_old):
                break
            if moves_lso:
                plog.advance_log_start_offset(seg.last_offset + 1)
            plog.delete_segment(seg)
            size -= seg.size

    def _expiration_task(self, r: Replica) -> None:
        """RemoteDataExpiration (internal mode): topic-wide retention over remote segments from
        the remote log start, the log start offset published before any object is deleted, each
        delete DELETE_SEGMENT_STARTED -> object deleted -> DELETE_SEGMENT_FINISHED. In internal
        mode the agent also purges segments fenced by a delete-policy disablement (in external
        mode the Spark purge job does)."""
        if self.expiration_mode != ExpirationMode.INTERNAL:
            return
        view = self._remote_view(r)
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
        plog = r.log
        rb = int(self._topic_config(r.topic, TopicConfig.RETENTION_BYTES))
        rms = int(self._topic_config(r.topic, TopicConfig.RETENTION_MS))
        remote_end = view["remote_log_end_offset"]
        untiered = sum(s.size for s in plog.segments if s.last_offset > remote_end)
        breach = view["remote_bytes"] + untiered - rb if rb >= 0 else None
        now = _now_ms()
        doomed = []
        for seg in view["readable"]:
            if seg["end_offset"] < plog.log_start_offset:
                doomed.append(seg)
            elif rms >= 0 and now - seg["max_timestamp_ms"] > rms:
                doomed.append(seg)
                if breach is not None:
                    breach -= seg["size_bytes"]
            elif breach is not None and breach - seg["size_bytes"] >= 0:
                doomed.append(seg)
                breach -= seg["size_bytes"]
            else:
                break
        if not doomed:
            return
        plog.advance_log_start_offset(max(s["end_offset"] for s in doomed) + 1)
        for seg in doomed:
            self.remote.delete_segment(seg["segment_id"])

    # -- KIP-950 commands ---------------------------------------------------------------------

    def _check_topic(self, cmd) -> dict:
        t = self.topics.get(cmd.topic)
        if t is None or t["topic_id"] != cmd.topic_id:
            raise ApiError(
                404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {cmd.topic!r} / id"
            )
        return t

    def _ack(self, topic: str, epoch: int) -> None:
        try:
            self.controller.ack_disable(topic, self.broker_id, epoch)
        except (AgentError, httpx.HTTPError) as exc:
            raise ApiError(
                503,
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"applied, but the controller did not take the ack: {exc}",
            ) from None

    def disable_remote_topic(self, cmd) -> dict:
        """DisableRemoteTopic (KIP-950).

        Fencing: a tiered epoch below the applied one is refused (STALE_TIERED_EPOCH); so is a
        disable at the epoch a re-enable was applied at, since each disablement brings a new
        epoch. The same idempotency key, or the same disable at the same epoch, is applied once
        and answered again (``applied: false``), re-sending the acknowledgement to the controller.
        retain: the copier stops, remote data stays readable and keeps expiring. delete: copier
        and expiration stop, log start offset := local log start offset, remote segments with a
        tiered epoch below this one become unreadable at once and are purged asynchronously.
        """
        if cmd.policy is not None and cmd.policy not in DisablePolicy.ALL:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, f"unsupported policy {cmd.policy!r}")
        policy = cmd.policy or DisablePolicy.DEFAULT
        with self.lock:
            t = self._check_topic(cmd)
            done = self.applied_commands.get(cmd.idempotency_key)
            if done is not None:
                self._ack(cmd.topic, done["tiered_epoch"])
                return dict(done, applied=False)
            cur = self.tiering.get(cmd.topic) or {
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
            parts = sorted(p for (tp, p), r in self.replicas.items() if tp == cmd.topic)
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
                    for (tp, _p), r in self.replicas.items():
                        if tp == cmd.topic and r.log is not None:
                            r.log.advance_log_start_offset(r.log.local_log_start_offset)
                self.tiering[cmd.topic] = new
            result = {
                "topic": cmd.topic,
                "tiered_epoch": cmd.tiered_epoch,
                "applied": not repeat,
                "tiered_state": TieredState.DISABLED,
                "partitions": parts,
            }
            self.applied_commands[cmd.idempotency_key] = result
            self._save_tiering()
        self._ack(cmd.topic, cmd.tiered_epoch)
        return result

    def enable_remote_topic(self, cmd) -> dict:
        """EnableRemoteTopic: re-enable copying at the topic's (unchanged) tiered epoch, so
        segments tiered from now on carry it and can never be mistaken for segments fenced by an
        earlier delete-policy disablement. Older epochs are refused; repeats are applied once."""
        with self.lock:
            t = self._check_topic(cmd)
            done = self.applied_commands.get(cmd.idempotency_key)
            if done is not None:
                return dict(done, applied=False)
            cur = self.tiering.get(cmd.topic) or {"tiered_epoch": 0, "state": TieredState.NONE}
            if cmd.tiered_epoch < cur["tiered_epoch"]:
                raise ApiError(
                    409,
                    ErrorCode.STALE_TIERED_EPOCH,
                    f"EnableRemoteTopic at tiered epoch {cmd.tiered_epoch}; broker applied {cur['tiered_epoch']}",
                    tiered_epoch=cur["tiered_epoch"],
                )
            repeat = cur["state"] == TieredState.ENABLED and cmd.tiered_epoch == cur["tiered_epoch"]
            if not repeat:
                self.tiering[cmd.topic] = dict(
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
                "partitions": sorted(p for (tp, p) in self.replicas if tp == cmd.topic),
            }
            self.applied_commands[cmd.idempotency_key] = result
            self._save_tiering()
        return result

    # -- remote inventory / external expiration -----------------------------------------------

    def inventory(self, topic: str | None):
        return self.remote.iter_all(topic)

    def partition_states(self, topic: str | None) -> list[dict]:
        out = []
        with self.lock:
            replicas = [
                r
                for r in self.replicas.values()
                if r.log is not None
                and r.leader == self.broker_id
                and (topic is None or r.topic == topic)
            ]
        for r in replicas:
            plog = r.log
            tier = self.tiering.get(r.topic, {})
            view = self._remote_view(r)
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
                    "tiered_state": self.topics.get(r.topic, {}).get(
                        "tiered_state", TieredState.NONE
                    ),
                    "tiered_epoch": tier.get("tiered_epoch", 0),
                    "disable_policy": tier.get("policy"),
                    "purge_below_tiered_epoch": tier.get("purge_below_tiered_epoch", 0),
                }
            )
        return out

    def publish_log_start_offset(self, topic: str, partition: int, offset: int) -> dict:
        """Advance the log start offset (DeleteRecords / the Spark retention job publishing
        before deleting). Never beyond the high watermark; never backwards (no-op)."""
        r = self._leader(topic, partition)
        plog = r.log
        if offset > plog.high_watermark:
            raise ApiError(
                416,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{offset} is above the high watermark {plog.high_watermark}",
            )
        plog.advance_log_start_offset(offset)
        return {"topic": topic, "partition": partition, "log_start_offset": plog.log_start_offset}

    def mark_segment(self, segment_id: str, state: str) -> dict:
        try:
            return self.remote.transition(segment_id, state)
        except KeyError:
            raise ApiError(
                404, ErrorCode.NOT_FOUND, f"unknown remote segment {segment_id}"
            ) from None
        except ValueError as exc:
            raise ApiError(409, ErrorCode.INVALID_STATE_TRANSITION, str(exc)) from None

    def roll(self, topic: str, partition: int) -> dict:
        r = self._leader(topic, partition)
        r.log.maybe_roll()
        return {"topic": topic, "partition": partition, "segments": len(r.log.segments)}

    # -- snapshot -----------------------------------------------------------------------------

    def log_dir_info(self, d: LogDir) -> dict:
        total, free = d.usage() if d.good else (0, 0)
        count = sum(1 for r in self.replicas.values() if r.dir_name == d.name and r.log is not None)
        if d.capacity_bytes and d.good:
            used = sum(
                r.log.size_bytes
                for r in list(self.replicas.values())
                if r.dir_name == d.name and r.log is not None
            )
            total = d.capacity_bytes
            free = max(0, min(free, d.capacity_bytes - used))
        offline = sum(1 for r in self.replicas.values() if r.dir_name == d.name and r.log is None)
        return {
            "name": d.name,
            "path": os.path.abspath(d.path),
            "state": d.state,
            "total_bytes": total,
            "usable_bytes": free,
            "probe_latency_ms": d.probe_latency_ms,
            "error": d.error,
            "replica_count": count,
            "offline_replica_count": offline,
        }

    def _replica_info(self, r: Replica) -> dict:
        t = self.topics.get(r.topic, {})
        tier = self.tiering.get(r.topic, {})
        plog = r.log
        info = {
            "topic": r.topic,
            "topic_id": r.topic_id,
            "partition": r.partition,
            "log_dir": r.dir_name,
            "state": ReplicaState.ONLINE if plog is not None else ReplicaState.OFFLINE,
            "is_leader": r.leader == self.broker_id and plog is not None,
            "leader": r.leader,
            "leader_epoch": r.leader_epoch,
            "isr": r.isr,
            "log_start_offset": plog.log_start_offset if plog else -1,
            "local_log_start_offset": plog.local_log_start_offset if plog else -1,
            "log_end_offset": plog.log_end_offset if plog else -1,
            "high_watermark": plog.high_watermark if plog else -1,
            "size_bytes": plog.size_bytes if plog else 0,
            "tiered_state": t.get("tiered_state", TieredState.NONE),
            "tiered_epoch": tier.get("tiered_epoch", t.get("tiered_epoch", 0)),
            "copier_state": self.copier_state(r) if plog else TaskState.STOPPED,
            "expiration_state": self.expiration_state(r) if plog else TaskState.STOPPED,
            "marked_for_deletion": r.marked_for_deletion,
        }
        if plog is not None and t.get("tiered_state", TieredState.NONE) != TieredState.NONE:
            view = self._remote_view(r)
            info.update(
                remote_log_start_offset=view["remote_log_start_offset"],
                remote_log_end_offset=view["remote_log_end_offset"],
                remote_bytes=view["remote_bytes"],
                remote_segments=len(view["readable"]),
            )
        return info

    def snapshot(self, since: int | None) -> dict:
        """Broker snapshot with a version; ``since`` returns only replicas changed after it."""
        with self.lock:
            entries = {
                _key(r.topic, r.partition): self._replica_info(r) for r in self.replicas.values()
            }
            dirs = [self.log_dir_info(d) for d in self.log_dirs.values()]
        head = (self.online, json.dumps(dirs, sort_keys=True, default=str), self.expiration_mode)
        with self._snap_lock:
            changed = [k for k, v in entries.items() if self._snap_entries.get(k, (None,))[0] != v]
            removed = [k for k in self._snap_entries if k not in entries]
            if changed or removed or head != self._snap_head:
                self.snapshot_version += 1
                v = self.snapshot_version
                for k in changed:
                    self._snap_entries[k] = (entries[k], v)
                for k in removed:
                    del self._snap_entries[k]
                    self._snap_removed[k] = v
                self._snap_head = head
            version = self.snapshot_version
            full = since is None or since > version
            replicas = [
                dict(e, version=v)
                for _k, (e, v) in sorted(self._snap_entries.items())
                if full or v > since
            ]
            gone = [] if full else [k for k, v in self._snap_removed.items() if v > since]
        offline_replicas = sum(1 for e in entries.values() if e["state"] == ReplicaState.OFFLINE)
        return {
            "broker_id": self.broker_id,
            "version": version,
            "since": None if full else since,
            "full": full,
            "state": "ONLINE" if self.online else "OFFLINE",
            "expiration_mode": self.expiration_mode,
            "log_dirs": dirs,
            "replicas": replicas,
            "removed": gone,
            "offline_log_directory_count": sum(
                1 for d in dirs if d["state"] == LogDirState.OFFLINE
            ),
            "offline_replica_count": offline_replicas,
            "generated_at_ms": _now_ms(),
        }

    def recreate_status(self) -> dict:
        rows = []
        with self.lock:
            for r in self.replicas.values():
                rows.append(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "state": ReplicaState.ONLINE if r.log else ReplicaState.OFFLINE,
                        "log_dir": r.dir_name,
                        "log_end_offset": r.log.log_end_offset if r.log else -1,
                        "in_isr": self.broker_id in r.isr,
                    }
                )
        return {
            "total": len(rows),
            "in_sync": sum(1 for x in rows if x["in_isr"] and x["state"] == ReplicaState.ONLINE),
            "replicas": rows,
        }
