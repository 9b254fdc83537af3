"""The broker's snapshot for the console's sync: log dirs and replicas, versioned so a sync
asks only for what changed since (``since``), and the recovery status of re-created replicas.

A mixin of :class:`broker_agent.broker.Broker`; it uses the broker's ``log_dirs``,
``replicas``, ``lock`` and the ``_snap_*`` version state.
"""

from __future__ import annotations

import contextlib
import json
import os

from broker_agent.broker.state import (
    Replica,
    _now_ms,
)
from broker_agent.choices import (
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
)
from broker_agent.models import partition_key
from broker_agent.remote import RemoteStorageError
from broker_agent.storage import (
    LogDir,
)

__all__ = ["SnapshotMixin"]


class SnapshotMixin:
    """Part of :class:`broker_agent.broker.Broker` (see the module docstring)."""

    def log_dir_info(self, d: LogDir) -> dict:
        total, free = d.usage() if d.good else (0, 0)
        count = sum(1 for r in self.replicas.values() if r.dir_name == d.name and r.log is not None)
        if d.capacity_bytes and d.good:
            used = sum(
                r.log.size_bytes
                for r in list(self.replicas.values())
                if r.dir_name == d.name and r.log is not None
            ) + sum(  # a replica being moved here (AlterReplicaLogDirs) takes room already
                f.log.size_bytes
                for f in list(self.dir_mover.futures.values())
                if f.dir_name == d.name
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
            "cordoned": d.cordoned,
            "removal_pending": d.name in self.removed_log_dirs,
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
        view = None
        if plog is not None and t.get("tiered_state", TieredState.NONE) != TieredState.NONE:
            with contextlib.suppress(RemoteStorageError):  # never read yet, store unreachable
                view = self._remote_view(r)
        if view is not None:
            info.update(
                remote_log_start_offset=view["remote_log_start_offset"],
                remote_log_end_offset=view["remote_log_end_offset"],
                remote_bytes=view["remote_bytes"],
                remote_segments=len(view["readable"]),
            )
            if r.leader == self.broker_id:
                info.update(self.tier_metrics(r, view))
        return info

    def snapshot(self, since: int | None) -> dict:
        """Broker snapshot with a version; ``since`` returns only replicas changed after it."""
        with self.lock:
            entries = {
                partition_key(r.topic, r.partition): self._replica_info(r)
                for r in self.replicas.values()
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
            "remote_store_unreachable_since_ms": self.remote.unreachable_since,
            "remote_store_error": self.remote.last_error,
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
