"""KIP-112 log dirs of a broker: failure handling (the failures thread), the probe loop and its
DEGRADED grading, cordon (KIP-1066), the simulator-only re-probe, removal of a dir from the
configuration (option 2 of "the disk gets fixed") with its placement plan, and the signed
webhook events they raise.

A failed dir stays OFFLINE until the broker process restarts, as in Kafka (KIP-112: "fix disks
and reboot broker"; Kafka's ``LogManager.handleLogDirFailure`` drops the dir from its live dirs
for the life of the process): the broker re-reads its dirs only
at start (:meth:`Broker.start`). Cordon and removal are configuration, persisted in
``meta/log-dirs.json``: a cordoned dir keeps serving its replicas and only gets no new ones; a
removed dir leaves the broker at its next start.

A mixin of :class:`broker_agent.broker.Broker`; it uses the broker's ``log_dirs``, ``replicas``,
``lock``, ``failures`` / ``events`` queues, ``controller`` and ``meta_dir``.
"""

from __future__ import annotations

import collections
import json
import os
import time
import uuid

import httpx

from broker_agent.broker.state import (
    DEGRADED_WINDOW,
    Replica,
    _now_ms,
    log,
)
from broker_agent.choices import (
    ErrorCode,
    EventType,
    LogDirState,
)
from broker_agent.client import AgentClient, AgentError
from broker_agent.models import partition_key
from broker_agent.placement import leader_sizes, place_replicas
from broker_agent.probes import slow_probe
from broker_agent.signing import sign_headers
from broker_agent.storage import (
    LogDir,
)
from broker_agent.web import ApiError

__all__ = ["LogDirsMixin"]


class LogDirsMixin:
    """Part of :class:`broker_agent.broker.Broker` (see the module docstring)."""

    def _load_dir_config(self) -> dict:
        try:
            with open(os.path.join(self.meta_dir, "log-dirs.json")) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {}

    def _save_dir_config(self) -> None:
        path = os.path.join(self.meta_dir, "log-dirs.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(
                {
                    "removed": self.removed_log_dirs,
                    "planned": self.planned_dirs,
                    "cordoned": sorted(n for n, d in self.log_dirs.items() if d.cordoned),
                },
                fh,
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(path + ".tmp", path)

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
                        offline.append(partition_key(r.topic, r.partition))
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
        """DEGRADED: a dir whose probes were *all* of the last ``DEGRADED_WINDOW`` slow
        (:func:`broker_agent.probes.slow_probe`: more than 10x the median of its peers and
        > 50 ms); each dir is judged by the fastest of its recent probes. One slow fsync (a burst of writes, a busy host) is no sign of a
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
            slow = full and slow_probe(ms, peers)
            if d.good:
                d.state = LogDirState.DEGRADED if slow else LogDirState.ONLINE

    def cordon(self, name: str, cordoned: bool = True) -> dict:
        """KIP-1066 ``cordoned.log.dirs``: no new replica is placed on a cordoned dir (new
        partitions, re-created replicas); the replicas already there keep serving, its state is
        unchanged and it does not count in OfflineLogDirectoryCount. Persisted as configuration
        (survives a restart); ``cordoned=False`` lifts it. Idempotent."""
        d = self._dir(name)
        with self.lock:
            d.cordoned = cordoned
            self._save_dir_config()
        log.warning("log dir %s %s", name, "cordoned" if cordoned else "uncordoned")
        self._heartbeat_once()
        return self.log_dir_info(d)

    def reprobe(self, name: str) -> dict:
        """Simulator-only control: probe a dir now, outside the probe loop. A good dir that
        fails the probe fails as on any I/O error. An OFFLINE dir stays OFFLINE even when the
        probe succeeds (the disk was fixed): Kafka brings a failed dir back only when the broker
        process restarts (KIP-112 "fix disks and reboot broker"); the answer's
        ``probe_latency_ms`` says whether the disk works now."""
        d = self._dir(name)
        try:
            ms = d.probe()
        except OSError as exc:
            d.fail(f"{type(exc).__name__}: {exc}")
            return self.log_dir_info(d)
        d.probe_latency_ms = ms
        return self.log_dir_info(d)

    def _sizes_from_leaders(self, replicas: list[Replica]) -> dict[str, int]:
        """Local size of each partition on its current leader (what catching up will write)."""
        by_leader: dict[int, set[str]] = {}
        for r in replicas:
            if r.leader >= 0 and r.leader != self.broker_id and r.leader in self.broker_urls:
                by_leader.setdefault(r.leader, set()).add(partition_key(r.topic, r.partition))
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
            sizes.update(leader_sizes(snap.replicas, keys))
        return sizes

    def removal_plan(self, name: str) -> dict:
        """What removing ``name`` from this broker's config needs: the replicas that must be
        re-created on good dirs (sized by their leaders), a placement on the good dirs
        (:func:`broker_agent.placement.place_replicas`), and per good dir needed vs usable bytes.

        Replicas that must move: offline replicas on this dir, and offline replicas whose dir is
        unknown (a broker that booted with the dir already bad could not read it); for a
        cordoned dir that still serves, every replica on it."""
        d = self._dir(name)
        with self.lock:
            moving = [
                r
                for r in self.replicas.values()
                if r.dir_name == name or (r.log is None and r.dir_name is None)
            ]
            others = [
                x
                for x in self.log_dirs.values()
                if x.name != name and x.name not in self.removed_log_dirs
            ]
            targets = [x for x in others if x.good and not x.cordoned]
            infos = {x.name: self.log_dir_info(x) for x in targets}
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
        with self.lock:
            self.removed_log_dirs = sorted({*self.removed_log_dirs, name})
            for row in plan["replicas"]:
                self.planned_dirs[partition_key(row["topic"], row["partition"])] = row["target_dir"]
            self._save_dir_config()
        log.warning(
            "log dir %s removed from broker %s's configuration (effective at restart)",
            name,
            self.broker_id,
        )
        return dict(plan, removed=True)

    def set_probe_delay(self, name: str, delay_ms: float) -> dict:
        """Slow every probe of a dir down (the tests' agent entry point drives it)."""
        d = self._dir(name)
        d.probe_delay_ms = delay_ms
        return {"log_dir": name, "probe_delay_ms": delay_ms}

    def _dir(self, name: str) -> LogDir:
        d = self.log_dirs.get(name)
        if d is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"unknown log dir {name!r}")
        return d

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
