"""The synthetic fleet answers Kafka's read calls (issue #35): one Kafka listener per synthetic
broker, all in the synthetic process, answered by :mod:`broker_agent.kafka_wire`'s own handlers
from the same :class:`~broker_agent.simulator.synthetic.SyntheticCluster` state the HTTP API serves, so
the agents' path and the Kafka path describe one cluster.

:class:`SyntheticBroker` gives the handlers what a simulated broker has (metadata cache,
replicas, log dirs, tiering, groups) as views over the shared arrays, built per request: nothing
per partition is kept at 1,000,000 partitions. No bytes, no remote segments, no leader-epoch
history. Only the read calls (:data:`READ_APIS`) are served; a write closes the connection, as
any unsupported request does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import kafka.errors as Errors
from kafka.protocol.api_key import ApiKey

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentError
from broker_agent.kafka_wire import APIS, start_listener
from broker_agent.kafka_wire.cluster import live_brokers
from broker_agent.kafka_wire.groups import coordinator_among
from broker_agent.kafka_wire.offsets import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED
from broker_agent.simulator.synthetic import DIR_TOTAL_BYTES, DIR_USABLE_BYTES

if TYPE_CHECKING:
    from broker_agent.simulator.synthetic import SyntheticCluster

__all__ = ["READ_APIS", "SyntheticBroker", "SyntheticKafka"]

#: What a synthetic broker answers: the handshake and the read calls of issue #35.
READ_APIS = {
    key: APIS[key]
    for key in (
        ApiKey.ApiVersions,
        ApiKey.SaslHandshake,
        ApiKey.SaslAuthenticate,
        ApiKey.Metadata,
        ApiKey.DescribeCluster,
        ApiKey.DescribeConfigs,
        ApiKey.DescribeLogDirs,
        ApiKey.ListOffsets,
        ApiKey.FindCoordinator,
        ApiKey.ListGroups,
        ApiKey.OffsetFetch,
    )
}

_BULK_SPECS = frozenset((LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED))
_UNKNOWN_PARTITION = Errors.UnknownTopicOrPartitionError.errno
_NOT_LEADER = Errors.NotLeaderForPartitionError.errno
_FENCED = Errors.FencedLeaderEpochError.errno
_UNKNOWN_EPOCH = Errors.UnknownLeaderEpochError.errno

#: Kafka's defaults for the broker configs DescribeConfigs shows (the fleet keeps no segments).
SEGMENT_BYTES = 1 << 30
REPLICA_LAG_TIME_MAX_MS = 30_000


class _Replica:
    """Partition ``i``'s replica on broker ``b`` and its log, read live from the arrays (under
    the cluster's lock, which is also the log's ``lock``)."""

    __slots__ = ("_c", "_i", "_t", "partition")

    def __init__(self, cluster: SyntheticCluster, i: int, t: int, p: int):
        self._c, self._i, self._t, self.partition = cluster, i, t, p

    @property
    def topic(self) -> str:
        return self._c.topics[self._t]

    @property
    def topic_id(self) -> str:
        return self._c.topic_ids[self._t]

    @property
    def lock(self):
        return self._c.lock

    @property
    def log(self) -> _Replica:
        return self  # synthetic dirs never fail, so the log is always there

    @property
    def dir_name(self) -> str:
        return f"logdir-{self._i % self._c.log_dirs}"  # as the snapshot's ``log_dir``

    @property
    def leader(self) -> int:
        return self._c.leader(self._i)

    @property
    def leader_epoch(self) -> int:
        return self._c.leader_epoch[self._i]

    @property
    def leader_epochs(self) -> list[tuple[int, int]]:
        return [(self._c.leader_epoch[self._i], self._c.lso[self._i])]

    @property
    def log_start_offset(self) -> int:
        return self._c.lso[self._i]

    local_log_start_offset = log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._c.leo[self._i]

    log_end_offset = high_watermark
    latest_epoch = leader_epoch
    size_bytes = 0
    segments = ()  # no records: a lookup by time finds none (offset -1), as in an empty log


class _Partitions(Sequence):
    """Topic ``t``'s partitions as metadata entries, in partition order, built when read
    (iterating builds them all at once, under the lock, so a topic is read at one version)."""

    def __init__(self, cluster: SyntheticCluster, t: int):
        self._c, self._t = cluster, t

    def _entry(self, i: int) -> dict:
        c = self._c
        replicas = c.replicas(i)
        return {
            "partition": c.locate(i)[1],
            "leader": c.leader(i),
            "leader_epoch": c.leader_epoch[i],
            "replicas": replicas,
            "isr": c.isr(i, replicas),
            "offline_replicas": [],
        }

    def __len__(self) -> int:
        return len(self._c.topic_range(self._t))

    @property
    def numbers(self) -> range:
        """The partition numbers, without an entry built: a synthetic topic's are 0..n-1 (an
        expansion appends the next ones). ListOffsets checks each requested one here."""
        return range(self._c.sizes[self._t])

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._entry(i) for i in self._c.topic_range(self._t)[k]]
        return self._entry(self._c.topic_range(self._t)[k])

    def __iter__(self):
        with self._c.lock:
            return iter([self._entry(i) for i in self._c.topic_range(self._t)])


class _Topics(Mapping):
    """name -> the topic as the controller's metadata has it (``TopicMetadata`` fields, the
    live tiering state's configs), its partitions a :class:`_Partitions`. The topics read are
    kept for the metadata version they were read at (every topic-level change, tiering
    included, is a new version): each ListOffsets reads every topic it names, and a first
    sync sends 240 of them (a few KB per topic, nothing per partition)."""

    def __init__(self, cluster: SyntheticCluster):
        self._c = cluster
        self._version: int | None = None
        self._read: dict[str, dict] = {}

    def __getitem__(self, name: str) -> dict:
        c = self._c
        t = c._index[name]  # KeyError: an unknown topic
        with c.lock:
            if self._version != c.metadata_version:
                self._version, self._read = c.metadata_version, {}
            fields = self._read.get(name)
            if fields is None:
                fields = c._topic_fields(t)
                fields["partitions"] = _Partitions(c, t)
                self._read[name] = fields
            return fields

    def __iter__(self):
        return iter(self._c.topics)

    def __len__(self) -> int:
        return len(self._c.topics)


class _Replicas(Mapping):
    """(topic, partition) -> :class:`_Replica` for the partitions broker ``b`` hosts."""

    def __init__(self, cluster: SyntheticCluster, b: int):
        self._c, self._b = cluster, b

    def get(self, key: tuple[str, int], default=None):
        """The replica or ``default``, without a KeyError raised and caught per miss (ListOffsets
        and the log dirs look up every requested partition)."""
        topic, p = key
        c = self._c
        t = c._index.get(topic)
        if t is None:
            return default
        parts = c.topic_range(t)
        if not 0 <= p < len(parts) or not c._hosts(self._b, parts[p]):
            return default
        return _Replica(c, parts[p], t, p)

    def __getitem__(self, key: tuple[str, int]) -> _Replica:
        r = self.get(key)
        if r is None:
            raise KeyError(key)
        return r

    def __iter__(self):
        return (k for k, _ in self.items())

    def __len__(self) -> int:
        return len(self._c.hosted[self._b])

    def items(self) -> list[tuple[tuple[str, int], _Replica]]:
        """One pass over the hosted indexes (not a lookup per key); DescribeLogDirs reads it
        once per request, whatever the number of dirs."""
        c = self._c
        with c.lock:
            topics, topic_of, start, layout_n = c.topics, c._topic_of, c.topic_start, c._layout_n
            out = []
            for i in c.hosted[self._b]:
                t = topic_of[i]
                p = i - start[t] if i < layout_n else c._extra_part[i - layout_n]
                out.append(((topics[t], p), _Replica(c, i, t, p)))
            return out


class _BrokerTiering(Mapping):
    """topic -> ``{"state", "policy"}`` the broker applied last (KIP-950 commands of
    :mod:`broker_agent.simulator.synthetic_tiering`); a topic it never got a command for is absent (the
    handlers then read the controller's state, which the broker adopted)."""

    def __init__(self, cluster: SyntheticCluster, b: int):
        self._c, self._b = cluster, b

    def __getitem__(self, name: str) -> dict:
        tiering = self._c.tiering
        st = None if tiering is None else tiering.brokers.get((self._b, self._c._index[name]))
        if st is None:
            raise KeyError(name)
        return st

    def _applied(self) -> list[str]:
        tiering = self._c.tiering
        brokers = {} if tiering is None else tiering.brokers
        return [self._c.topics[t] for b, t in brokers if b == self._b]

    def __iter__(self):
        return iter(self._applied())

    def __len__(self) -> int:
        return len(self._applied())


class _Tiering:
    """A synthetic broker's tiering as the handlers read a broker's ``tiering`` part: the
    applied ``states`` and nothing in remote storage (its snapshot's ``remote_log_end_offset``
    is -1 too)."""

    def __init__(self, states: _BrokerTiering):
        self.states = states

    def purge_below_tiered_epoch(self, topic: str) -> int:
        return self.states.get(topic, {}).get("purge_below_tiered_epoch", 0)

    def remote_log_end_offset(self, _replica) -> int:
        return -1


class _NoDirMoves:
    """A fleet moves no replica between dirs: no future replica, no throttle set."""

    futures: dict = {}
    throttle_bytes_per_s = None


class _NoRemoteSegments:
    """The remote store of a fleet that tiers nothing: no segment to search by time."""

    def segments(self, _topic: str, _topic_id: str, _partition: int) -> list:
        return []


@dataclasses.dataclass(frozen=True)
class _LogDir:
    name: str
    path: str
    good: bool = True


class _LogDirs:
    """A synthetic broker's dirs as the handlers read a broker's ``log_dirs`` part."""

    def __init__(self, dirs: dict[str, _LogDir]):
        self.dirs = dirs

    def info(self, d: _LogDir) -> dict:
        return {"path": d.path, "total_bytes": DIR_TOTAL_BYTES, "usable_bytes": DIR_USABLE_BYTES}


@dataclasses.dataclass(frozen=True)
class _GroupView:
    """What the group handlers read of a coordinator's ``GroupView``."""

    group_id: str
    members: tuple[str, ...]
    offsets: dict[str, dict[int, int]]


_GROUP_NAME = re.compile(r"synthetic\.group-(\d{5,})")


class _Coordinator:
    """The synthetic groups as the controller's coordinator answers them to a broker's group
    handlers. ``groups()`` lists only the groups broker ``b`` coordinates (the handler's own
    filter keeps exactly those): each broker of a 60-broker fleet hashing all 20,000 group ids
    per ListGroups would be 1.2 million hashes per sync; the map is computed once."""

    def __init__(self, fleet: SyntheticKafka, b: int):
        self._fleet, self._b = fleet, b

    def groups(self) -> list[_GroupView]:
        groups = self._fleet.cluster.groups
        if groups is None:
            return []
        return [
            _GroupView(groups.name(g), (f"member-{g:05d}",), {})
            for g in self._fleet.coordinated_by(self._b)
        ]

    def group(self, group_id: str) -> _GroupView:
        c = self._fleet.cluster
        groups = c.groups
        m = _GROUP_NAME.fullmatch(group_id)
        g = int(m.group(1)) if m else -1
        if groups is None or not 0 <= g < groups.count or groups.name(g) != group_id:
            raise AgentError(404, ErrorCode.GROUP_ID_NOT_FOUND, f"unknown group {group_id!r}")
        with c.lock:
            base, size = groups.offset[g], groups.size[g]
            positions = {j: groups.position[base + j] for j in range(size)}
            return _GroupView(
                group_id, (f"member-{g:05d}",), {c.topics[groups.topic[g]]: positions}
            )


class SyntheticBroker:
    """One synthetic broker as :mod:`broker_agent.kafka_wire`'s handlers read a broker (see the
    module docstring)."""

    def __init__(self, fleet: SyntheticKafka, broker_id: int):
        c = fleet.cluster
        self.fleet = fleet
        self.broker_id = broker_id
        self.cluster_id = c.cluster_id
        self.secret = fleet.secret
        self.lock = c.lock
        self.topics = _Topics(c)
        self.replicas = _Replicas(c, broker_id)
        self.tiering = _Tiering(_BrokerTiering(c, broker_id))
        self.controller = _Coordinator(fleet, broker_id)
        self.log_dirs = _LogDirs(
            {
                f"logdir-{d}": _LogDir(f"logdir-{d}", f"/synthetic/broker-{broker_id}/logdir-{d}")
                for d in range(c.log_dirs)
            }
        )
        self.remote = _NoRemoteSegments()
        self.dir_mover = _NoDirMoves()
        self.segment_bytes = SEGMENT_BYTES
        self.replica_lag_time_max_ms = REPLICA_LAG_TIME_MAX_MS

    @property
    def cluster_brokers(self) -> list[dict]:
        return self.fleet.cluster_brokers

    def log_dir_rows(self, wanted: set | None) -> dict[str, dict[str, list[tuple]]]:
        """:func:`broker_agent.kafka_wire.logdirs._by_dir`'s answer from the hosted indexes at
        once, without a replica view each: dir -> topic -> ``(partition, size, offset lag,
        is future)`` in (topic, partition) order, of ``wanted`` only (None: all). A synthetic
        log has no bytes and no lag, and the fleet moves nothing between dirs."""
        c = self.fleet.cluster
        with c.lock:
            topics, topic_of, start, layout_n = c.topics, c._topic_of, c.topic_start, c._layout_n
            extra, dirs = c._extra_part, c.log_dirs
            entries = sorted(
                (
                    topics[topic_of[i]],
                    i - start[topic_of[i]] if i < layout_n else extra[i - layout_n],
                    i % dirs,
                )
                for i in c.hosted[self.broker_id]
            )
        names = [f"logdir-{d}" for d in range(dirs)]
        out: dict[str, dict[str, list[tuple]]] = {}
        for topic, p, d in entries:
            if wanted is None or (topic, p) in wanted:
                out.setdefault(names[d], {}).setdefault(topic, []).append((p, 0, 0, False))
        return out

    def list_offsets(self, topic, partitions) -> list[tuple[int, int, int, int, int]] | None:
        """ListOffsets of ``topic``'s requested ``partitions`` at once, under the lock once:
        :func:`broker_agent.kafka_wire.offsets._partition`'s checks and answers for the specs
        -1 / -2 / -4 / -5 (a synthetic log's epochs are one entry from its log start, nothing
        is in remote storage, no dir fails); None for any other spec (the handler answers)."""
        c = self.fleet.cluster
        t = c._index.get(topic.name)
        if t is None:
            return None
        out = []
        with c.lock:
            parts = c.topic_range(t)
            n, leo, lso, epochs, b = len(parts), c.leo, c.lso, c.leader_epoch, self.broker_id
            for req in partitions:
                p, spec = req.partition_index, req.timestamp
                if spec not in _BULK_SPECS:
                    return None
                if not 0 <= p < n:
                    out.append((p, _UNKNOWN_PARTITION, -1, -1, -1))
                    continue
                i = parts[p]
                if c.leader(i) != b:
                    out.append((p, _NOT_LEADER, -1, -1, -1))
                    continue
                epoch, current = epochs[i], getattr(req, "current_leader_epoch", -1)
                if current is not None and current >= 0 and current != epoch:
                    out.append((p, _FENCED if current < epoch else _UNKNOWN_EPOCH, -1, -1, -1))
                elif spec == LATEST:
                    out.append((p, 0, -1, leo[i], epoch))
                elif spec == LATEST_TIERED:  # no remote segment: -1 (KIP-1005)
                    out.append((p, 0, -1, -1, -1))
                else:  # -2 / -4: the log start, local and remote alike
                    out.append((p, 0, -1, lso[i], epoch))
        return out


class SyntheticKafka:
    """The fleet's Kafka listeners: broker ``b`` on ``listeners[b - 1]`` (``(host, port)``),
    every broker live (the synthetic cluster has no fencing), racks unset."""

    def __init__(self, cluster: SyntheticCluster, secret: bytes, listeners: list[tuple[str, int]]):
        if len(listeners) != cluster.brokers:
            raise ValueError(f"{cluster.brokers} brokers need as many Kafka listeners")
        self.cluster = cluster
        self.secret = secret
        self.listeners = listeners
        self.cluster_brokers = [
            {"broker_id": b, "alive": True, "kafka_listener": f"{host}:{port}"}
            for b, (host, port) in enumerate(listeners, start=1)
        ]
        self.brokers = {b: SyntheticBroker(self, b) for b in range(1, cluster.brokers + 1)}
        self._coordinated: dict[int, list[int]] | None = None
        self._coordinated_lock = threading.Lock()
        self.servers: list[asyncio.Server] = []
        # Every broker's requests are answered in this one thread, one at a time: they read one
        # state under one lock (the cluster's), so parallel workers would only contend for it
        # and for the GIL, and one request ending would resume the cyclic GC another paused.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="synthetic-kafka")

    def coordinated_by(self, b: int) -> list[int]:
        """The synthetic groups broker ``b`` coordinates (Kafka's rule:
        :func:`broker_agent.kafka_wire.groups.coordinator_among`), computed once for all brokers."""
        with self._coordinated_lock:
            if self._coordinated is None:
                groups = self.cluster.groups
                out: dict[int, list[int]] = {}
                brokers = live_brokers(self.brokers[1])  # all of them: none is ever fenced
                for g in range(groups.count if groups is not None else 0):
                    node = coordinator_among(brokers, groups.name(g))
                    out.setdefault(node[0], []).append(g)
                self._coordinated = out
            return self._coordinated.get(b, [])

    async def start(self) -> None:
        for b, (host, port) in enumerate(self.listeners, start=1):
            self.servers.append(
                await start_listener(self.brokers[b], host, port, READ_APIS, self._executor)
            )

    def close(self) -> None:
        for server in self.servers:
            server.close()
        self._executor.shutdown(wait=False)
