"""KIP-112 log dirs of a broker: failure handling, the probe loop and its DEGRADED grading, cordon
(KIP-1066), the simulator-only re-probe, removal of a dir from the configuration, and each dir's
figures.

A failed dir stays OFFLINE until the broker restarts, as in Kafka (``LogManager.handleLogDirFailure``
drops it for the life of the process): dirs are re-read only at :meth:`LogDirs.start`. Cordon and
removal are configuration, persisted in ``meta/log-dirs.json``: a cordoned dir keeps serving and
gets no new replicas; a removed dir leaves at the next start. A part of
:class:`broker_agent.simulator.broker.Broker`: it owns the dirs and reads the replicas from the core.
"""

from __future__ import annotations

import collections
import json
import os
import queue
from collections.abc import Callable

import httpx

from broker_agent.contract.choices import ErrorCode, EventType, LogDirState
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.errors import ApiError
from broker_agent.contract.models import partition_key
from broker_agent.contract.placement import leader_sizes, place_replicas
from broker_agent.contract.probes import slow_probe
from broker_agent.simulator.broker.events import WebhookEvents
from broker_agent.simulator.broker.state import DEGRADED_WINDOW, BrokerCore, Replica, log
from broker_agent.simulator.storage import LogDir

__all__ = ["LogDirs", "ProbeGrades"]


class ProbeGrades:
    """DEGRADED grading of a broker's good dirs from their recent probe latencies; owns the
    last ``DEGRADED_WINDOW`` latencies per dir."""

    def __init__(self) -> None:
        self.history: dict[str, collections.deque[float]] = {}

    def grade(self, dirs: dict, latencies: dict[str, float]) -> None:
        """DEGRADED: a dir whose probes were *all* of the last ``DEGRADED_WINDOW`` slow
        (:func:`broker_agent.contract.probes.slow_probe`: more than 10x the median of its peers and
        > 50 ms); each dir is judged by the fastest of its recent probes. One slow fsync (a burst of writes, a busy host) is no sign of a
        failing disk, and a single sample made a healthy dir flap to DEGRADED and back."""
        for name in list(self.history):
            if name not in latencies:
                del self.history[name]
        sustained = {}
        for name, ms in latencies.items():
            window = self.history.setdefault(name, collections.deque(maxlen=DEGRADED_WINDOW))
            window.append(ms)
            sustained[name] = min(window)
        for name, ms in sustained.items():
            d = dirs[name]
            peers = [v for k, v in sustained.items() if k != name]
            full = len(self.history[name]) == DEGRADED_WINDOW
            slow = full and slow_probe(ms, peers)
            if d.good:
                d.state = LogDirState.DEGRADED if slow else LogDirState.ONLINE


class LogDirs:
    """The dirs of one broker (module docstring). Collaborators: the broker's ``core``
    (replicas, lock), its ``events``, the ``controller`` client, ``report`` (send a heartbeat
    now, so the controller learns of a failure or a cordon at once) and ``incoming_bytes``
    (bytes of replicas being moved onto a dir, which take room already)."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        root: str,
        meta_dir: str,
        names: list[str],
        capacity_bytes: int | None,
        probe_interval: float,
        events: WebhookEvents,
        controller: ControllerClient,
        secret: bytes,
        report: Callable[[], None],
        incoming_bytes: Callable[[str], int],
    ):
        self.core = core
        self.meta_dir = meta_dir
        self.probe_interval = probe_interval
        self.events = events
        self.controller = controller
        self.secret = secret
        self.report = report
        self.incoming_bytes = incoming_bytes
        self.grades = ProbeGrades()
        self.failures: queue.Queue = queue.Queue()
        self.offline_announced = False
        # Dirs whose LogDirFailure event is queued; BrokerOffline follows only when every dir is
        # in here, so listeners always see each dir's failure before the broker's.
        self.failure_announced: set[str] = set()
        # Log dir configuration: dirs removed by KIP-112 recovery (option 2) stay removed across
        # restarts; planned targets say where their replicas are re-created; cordoned dirs
        # (KIP-1066 ``cordoned.log.dirs``) stay cordoned.
        config = self._load_config()
        self.removed: list[str] = config.get("removed", [])
        self.planned: dict[str, str] = config.get("planned", {})
        self.dirs = {
            name: LogDir(name, os.path.join(root, name), self._on_dir_failure)
            for name in names
            if name not in self.removed
        }
        cordoned = set(config.get("cordoned", []))
        for d in self.dirs.values():
            d.capacity_bytes = capacity_bytes
            d.cordoned = d.name in cordoned

    def start(self) -> None:
        """Create and probe every dir; a bad one is OFFLINE from the start (its failure event
        queued): KIP-112 "Broker bootstraps with bad log directories", the broker comes up on
        the good ones."""
        for d in self.dirs.values():
            try:
                if not os.path.exists(d.path):
                    os.makedirs(d.path)
                d.probe_latency_ms = d.probe()
            except OSError as exc:
                d.state = LogDirState.OFFLINE
                d.error = f"{type(exc).__name__}: {exc}"
                log.error("log dir %s is bad at startup: %s", d.name, d.error)
                self.events.publish(EventType.LOG_DIR_FAILURE, d.name, d.error)
                self.failure_announced.add(d.name)

    def _load_config(self) -> dict:
        try:
            with open(os.path.join(self.meta_dir, "log-dirs.json")) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {}

    def save_config(self) -> None:
        path = os.path.join(self.meta_dir, "log-dirs.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(
                {
                    "removed": self.removed,
                    "planned": self.planned,
                    "cordoned": sorted(n for n, d in self.dirs.items() if d.cordoned),
                },
                fh,
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(path + ".tmp", path)

    def planned_dir(self, topic: str, partition: int) -> str | None:
        """Where a removal plan (or an AlterReplicaLogDirs ahead of the replica) wants the
        partition's replica created."""
        return self.planned.get(partition_key(topic, partition))

    def prefer_dir(self, topic: str, partition: int, name: str) -> None:
        """Kafka's preferred log dir: the partition's replica, once assigned here, is created
        on ``name`` (kept in memory; persisted with the next configuration change)."""
        self.planned[partition_key(topic, partition)] = name

    def placed(self, topic: str, partition: int) -> None:
        """The partition's replica was created: its planned dir, if any, is used up."""
        if self.planned.pop(partition_key(topic, partition), None) is not None:
            self.save_config()

    def _on_dir_failure(self, d: LogDir, error: str) -> None:
        # Called from inside storage operations (locks held): hand over to the failures thread.
        self.failures.put((d.name, error))

    def failure_loop(self) -> None:
        """The ``failures`` thread: takes a failed dir's replicas offline and tells the
        controller, the heartbeat and the webhook."""
        core = self.core
        while not core.stopped.is_set():
            name, error = self.failures.get()
            d = self.dirs[name]
            log.error("log dir %s failed: %s", name, error)
            offline = []
            with core.lock:
                for r in core.replicas.values():
                    if r.dir_name == name and r.log is not None:
                        r.last_size_bytes = r.log.size_bytes
                        r.log = None
                        offline.append(partition_key(r.topic, r.partition))
                        with r.cond:
                            r.cond.notify_all()
            core.notify_data()
            self.events.publish(EventType.LOG_DIR_FAILURE, name, d.error, offline)
            self.failure_announced.add(name)
            try:
                self.controller.request(
                    "POST",
                    f"/v1/brokers/{core.broker_id}/log-dir-events",
                    body={
                        "broker_id": core.broker_id,
                        "event": EventType.LOG_DIR_FAILURE,
                        "log_dir": name,
                        "error": d.error,
                    },
                    retries=2,
                )
            except (AgentError, httpx.HTTPError) as exc:
                log.warning("could not tell the controller about %s: %s", name, exc)
            self.report()
            # A dir already marked OFFLINE may not have had its turn in this loop yet (cordoning
            # two dirs back to back): its failure event goes out first, the broker's after it.
            every_failure_sent = self.failure_announced.issuperset(self.dirs)
            if every_failure_sent and not self.online and not self.offline_announced:
                self.offline_announced = True
                log.error("all log dirs are offline: broker %s goes offline", core.broker_id)
                self.events.publish(EventType.BROKER_OFFLINE, None, "no good log dir")

    @property
    def online(self) -> bool:
        return any(d.good for d in self.dirs.values())

    def no_bad_dir(self) -> bool:
        return all(d.good for d in self.dirs.values())

    def probe_loop(self) -> None:
        """The ``probe`` thread: every good dir each ``probe_interval`` s, so a dir fails
        within 5 s even idle."""
        while not self.core.stopped.wait(self.probe_interval):
            latencies = {}
            for d in list(self.dirs.values()):
                if not d.good:
                    continue
                try:
                    latencies[d.name] = d.probe()
                    d.probe_latency_ms = latencies[d.name]
                except OSError as exc:
                    d.fail(f"probe failed: {type(exc).__name__}: {exc}")
            self.grades.grade(self.dirs, latencies)

    def info(self, d: LogDir) -> dict:
        """The dir as the broker reports it (``LogDirInfo``); with a capacity, usable bytes
        count what its replicas and the replicas moving onto it take."""
        replicas = self.core.replicas
        total, free = d.usage() if d.good else (0, 0)
        count = sum(1 for r in replicas.values() if r.dir_name == d.name and r.log is not None)
        if d.capacity_bytes and d.good:
            used = sum(
                r.log.size_bytes
                for r in list(replicas.values())
                if r.dir_name == d.name and r.log is not None
            ) + self.incoming_bytes(d.name)
            total = d.capacity_bytes
            free = max(0, min(free, d.capacity_bytes - used))
        offline = sum(1 for r in replicas.values() if r.dir_name == d.name and r.log is None)
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
            "cordoned": d.cordoned,
            "removal_pending": d.name in self.removed,
        }

    def cordon(self, name: str, cordoned: bool = True) -> dict:
        """KIP-1066 ``cordoned.log.dirs``: no new replica is placed on a cordoned dir (new
        partitions, re-created replicas); the replicas already there keep serving, its state is
        unchanged and it does not count in OfflineLogDirectoryCount. Persisted as configuration
        (survives a restart); ``cordoned=False`` lifts it. Idempotent."""
        d = self.get(name)
        with self.core.lock:
            d.cordoned = cordoned
            self.save_config()
        log.warning("log dir %s %s", name, "cordoned" if cordoned else "uncordoned")
        self.report()
        return self.info(d)

    def reprobe(self, name: str) -> dict:
        """Simulator-only control: probe a dir now, outside the probe loop. A good dir that
        fails the probe fails as on any I/O error. An OFFLINE dir stays OFFLINE even when the
        probe succeeds (the disk was fixed): Kafka brings a failed dir back only when the broker
        process restarts (KIP-112 "fix disks and reboot broker"); the answer's
        ``probe_latency_ms`` says whether the disk works now."""
        d = self.get(name)
        try:
            ms = d.probe()
        except OSError as exc:
            d.fail(f"{type(exc).__name__}: {exc}")
            return self.info(d)
        d.probe_latency_ms = ms
        return self.info(d)

    def _sizes_from_leaders(self, replicas: list[Replica]) -> dict[str, int]:
        """Local size of each partition on its current leader (what catching up will write)."""
        broker_id, urls = self.core.broker_id, self.core.broker_urls
        by_leader: dict[int, set[str]] = {}
        for r in replicas:
            if r.leader >= 0 and r.leader != broker_id and r.leader in urls:
                by_leader.setdefault(r.leader, set()).add(partition_key(r.topic, r.partition))
        sizes: dict[str, int] = {}
        for leader, keys in by_leader.items():
            try:
                with AgentClient(urls[leader], self.secret, retries=1, timeout=5) as agent:
                    snap = agent.snapshot()
            except (AgentError, httpx.HTTPError) as exc:
                log.warning("removal plan: leader %s unreachable: %s", leader, exc)
                continue
            sizes.update(leader_sizes(snap.replicas, keys))
        return sizes

    def removal_plan(self, name: str) -> dict:
        """What removing ``name`` from this broker's config needs: the replicas that must be
        re-created on good dirs (sized by their leaders), a placement on the good dirs
        (:func:`broker_agent.contract.placement.place_replicas`), and per good dir needed vs usable bytes.

        Replicas that must move: offline replicas on this dir, and offline replicas whose dir is
        unknown (a broker that booted with the dir already bad could not read it); for a
        cordoned dir that still serves, every replica on it."""
        d = self.get(name)
        with self.core.lock:
            moving = [
                r
                for r in self.core.replicas.values()
                if r.dir_name == name or (r.log is None and r.dir_name is None)
            ]
            others = [
                x for x in self.dirs.values() if x.name != name and x.name not in self.removed
            ]
            targets = [x for x in others if x.good and not x.cordoned]
            infos = {x.name: self.info(x) for x in targets}
        from_leaders = self._sizes_from_leaders(moving)
        rows = []
        for r in moving:
            key = partition_key(r.topic, r.partition)
            if key in from_leaders:
                size, source = from_leaders[key], "leader"
            elif r.log is not None:  # a cordoned dir's replica that still serves
                size, source = r.log.size_bytes, "local"
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
        placement = place_replicas(
            {(x["topic"], x["partition"]): x["size_bytes"] for x in rows},
            {n: i["usable_bytes"] for n, i in infos.items()},
        )
        for row in rows:
            row["target_dir"] = placement.targets[(row["topic"], row["partition"])]
        needed = placement.needed_bytes
        rows.sort(key=lambda x: (x["topic"], x["partition"]))
        total_needed = sum(x["size_bytes"] for x in rows)
        available = sum(i["usable_bytes"] for i in infos.values())
        unplaced = [x for x in rows if x["target_dir"] is None]
        error, message = None, ""
        if not others:
            error, message = ErrorCode.LAST_LOG_DIR, f"{name} is the broker's only log dir"
        elif d.state != LogDirState.OFFLINE and not d.cordoned:
            error = ErrorCode.LOG_DIR_NOT_OFFLINE
            message = f"{name} is {d.state}: only an OFFLINE (failed) or a cordoned dir is removed"
        elif unplaced:
            error = ErrorCode.INSUFFICIENT_SPACE
            message = (
                f"the good dirs lack usable space for {len(unplaced)} of {len(rows)} replicas "
                f"({total_needed} bytes needed, {available} usable)"
            )
        return {
            "broker_id": self.core.broker_id,
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

    def remove(self, name: str, dry_run: bool = False) -> dict:
        """Remove a failed (or cordoned) dir from this broker's configuration (persisted in
        ``meta/log-dirs.json``), or refuse with the plan's error. Like an edit of Kafka's
        ``log.dirs`` it takes effect when the broker process restarts: the broker then starts
        without the dir and re-creates its replicas on the planned good dirs (it has no bad dir
        left), and they catch up from their leaders. Until then nothing changes."""
        plan = self.removal_plan(name)
        if not plan["removable"]:
            status = 400 if plan["error"] == ErrorCode.LAST_LOG_DIR else 409
            raise ApiError(status, plan["error"], plan["message"], plan=plan)
        if dry_run:
            return plan
        with self.core.lock:
            self.removed = sorted({*self.removed, name})
            for row in plan["replicas"]:
                self.planned[partition_key(row["topic"], row["partition"])] = row["target_dir"]
            self.save_config()
        log.warning(
            "log dir %s removed from broker %s's configuration (effective at restart)",
            name,
            self.core.broker_id,
        )
        return dict(plan, removed=True)

    def set_probe_delay(self, name: str, delay_ms: float) -> dict:
        """Slow every probe of a dir down (the tests' agent entry point drives it)."""
        d = self.get(name)
        d.probe_delay_ms = delay_ms
        return {"log_dir": name, "probe_delay_ms": delay_ms}

    def get(self, name: str) -> LogDir:
        d = self.dirs.get(name)
        if d is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"unknown log dir {name!r}")
        return d
