"""The broker's snapshot for the console's sync: log dirs, replicas and the replicas being
moved between dirs (their future replicas, as Kafka's DescribeLogDirs lists them), versioned so
a sync asks only for what changed since (``since``), and the recovery status of re-created
replicas.

:class:`Snapshots` is a part of :class:`broker_agent.simulator.broker.Broker`: a read-only view over the
other parts that owns only the snapshot's versioning.
"""

from __future__ import annotations

import contextlib
import json
import threading

from broker_agent.contract.choices import LogDirState, ReplicaState, TaskState, TieredState
from broker_agent.contract.models import partition_key
from broker_agent.simulator.broker.dirmoves import ReplicaDirMover
from broker_agent.simulator.broker.logdirs import LogDirs
from broker_agent.simulator.broker.state import BrokerCore, Replica, _now_ms
from broker_agent.simulator.broker.tiering import Tiering
from broker_agent.simulator.remote import RemoteStorageError, RemoteStore

__all__ = ["Snapshots"]


class Snapshots:
    """The broker's snapshot (module docstring). Owns the version state: each replica's last
    answer and the version it changed at, the removed replicas, and the broker-wide head
    (online, dirs, expiration mode); reads the ``core``, ``log_dirs``, ``tiering`` and the
    ``remote`` store's health."""

    def __init__(
        self,
        core: BrokerCore,
        *,
        log_dirs: LogDirs,
        tiering: Tiering,
        remote: RemoteStore,
        dir_mover: ReplicaDirMover | None = None,
    ):
        self.core = core
        self.dir_mover = dir_mover
        self.log_dirs = log_dirs
        self.tiering = tiering
        self.remote = remote
        self.version = 0
        self._entries: dict[str, tuple[dict, int]] = {}
        self._head: tuple | None = None
        self._removed: dict[str, int] = {}
        self._lock = threading.Lock()

    def _replica_info(self, r: Replica) -> dict:
        t = self.core.topics.get(r.topic, {})
        tier = self.tiering.states.get(r.topic, {})
        plog = r.log
        info = {
            "topic": r.topic,
            "topic_id": r.topic_id,
            "partition": r.partition,
            "log_dir": r.dir_name,
            "state": ReplicaState.ONLINE if plog is not None else ReplicaState.OFFLINE,
            "is_leader": r.leader == self.core.broker_id and plog is not None,
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
            "copier_state": self.tiering.copier_state(r) if plog else TaskState.STOPPED,
            "expiration_state": self.tiering.expiration_state(r) if plog else TaskState.STOPPED,
            "marked_for_deletion": r.marked_for_deletion,
        }
        view = None
        if plog is not None and t.get("tiered_state", TieredState.NONE) != TieredState.NONE:
            with contextlib.suppress(RemoteStorageError):  # never read yet, store unreachable
                view = self.tiering.remote_view(r)
        if view is not None:
            info.update(
                remote_log_start_offset=view["remote_log_start_offset"],
                remote_log_end_offset=view["remote_log_end_offset"],
                remote_bytes=view["remote_bytes"],
                remote_segments=len(view["readable"]),
            )
            if r.leader == self.core.broker_id:
                info.update(self.tiering.tier_metrics(r, view))
        return info

    def take(self, since: int | None) -> dict:
        """Broker snapshot with a version; ``since`` returns only replicas changed after it."""
        with self.core.lock:
            entries = {
                partition_key(r.topic, r.partition): self._replica_info(r)
                for r in self.core.replicas.values()
            }
            dirs = [self.log_dirs.info(d) for d in self.log_dirs.dirs.values()]
            moves = self.dir_mover.moves() if self.dir_mover is not None else []
        head = (
            self.log_dirs.online,
            json.dumps(dirs, sort_keys=True, default=str),
            self.tiering.expiration_mode,
            json.dumps(moves),
        )
        with self._lock:
            changed = [k for k, v in entries.items() if self._entries.get(k, (None,))[0] != v]
            removed = [k for k in self._entries if k not in entries]
            if changed or removed or head != self._head:
                self.version += 1
                v = self.version
                for k in changed:
                    self._entries[k] = (entries[k], v)
                for k in removed:
                    del self._entries[k]
                    self._removed[k] = v
                self._head = head
            version = self.version
            full = since is None or since > version
            replicas = [
                dict(e, version=v)
                for _k, (e, v) in sorted(self._entries.items())
                if full or v > since
            ]
            gone = [] if full else [k for k, v in self._removed.items() if v > since]
        offline_replicas = sum(1 for e in entries.values() if e["state"] == ReplicaState.OFFLINE)
        return {
            "broker_id": self.core.broker_id,
            "version": version,
            "since": None if full else since,
            "full": full,
            "state": "ONLINE" if self.log_dirs.online else "OFFLINE",
            "expiration_mode": self.tiering.expiration_mode,
            "log_dirs": dirs,
            "replicas": replicas,
            "removed": gone,
            "offline_log_directory_count": sum(
                1 for d in dirs if d["state"] == LogDirState.OFFLINE
            ),
            "offline_replica_count": offline_replicas,
            "generated_at_ms": _now_ms(),
            "remote_store_unreachable_since_ms": self.remote.unreachable_since,
            "remote_store_error": self.remote.last_error,
            "dir_moves": moves,
        }

    def recreate_status(self) -> dict:
        rows = []
        with self.core.lock:
            for r in self.core.replicas.values():
                rows.append(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "state": ReplicaState.ONLINE if r.log else ReplicaState.OFFLINE,
                        "log_dir": r.dir_name,
                        "log_end_offset": r.log.log_end_offset if r.log else -1,
                        "in_isr": self.core.broker_id in r.isr,
                    }
                )
        return {
            "total": len(rows),
            "in_sync": sum(1 for x in rows if x["in_isr"] and x["state"] == ReplicaState.ONLINE),
            "replicas": rows,
        }
