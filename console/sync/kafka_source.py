"""The sync's :class:`~console.sync.sources.ClusterSource` for a ``kafka`` cluster: Kafka's own
protocol through its bootstrap servers, translated into the same :mod:`broker_agent.contract.models`
answers the agents give, so nothing above the seam knows which backend it reads.

One sync builds one source; its first call reads the whole cluster once
(:func:`console.sync.kafka_reads.read_cluster`) and later calls answer from that read. Tiering
comes from topic configs through :func:`broker_agent.contract.kafka39.from_configs` (the one mapping).
Kafka has no metadata version, so ``version`` is a digest of the answer (unchanged: nothing
rewritten). What only JMX has (probe latency, KIP-963 gauges) is None where the models allow,
else their neutral value (0, ""). An unreachable or unsupported cluster raises
:class:`~console.sync.sources.SourceError`; a broker whose own calls fail fails alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time

import kafka.errors as Errors
from kafka import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector

from broker_agent.contract import kafka39
from broker_agent.contract.choices import ExpirationMode, LogDirState, ReplicaState, TieredState
from broker_agent.contract.client import gc_paused
from broker_agent.contract.metadata_rows import metadata_rows_body, metadata_tsv
from broker_agent.contract.models import (
    SNAPSHOT_TSV_COLUMNS,
    TIER_METRIC_FIELDS,
    BrokerInfo,
    BrokerSnapshot,
    ClusterMetadata,
    LogDirInfo,
    PartitionMetadata,
    ReplicaDirMove,
    ReplicaInfo,
    TopicMetadata,
    group_changes_tsv,
    snapshot_tsv,
    tsv_value,
)
from console.sync.kafka_reads import (
    DEFAULT_CONFIG,
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    ClusterRead,
    UnsupportedApi,
    read_cluster,
    read_groups,
    uuid_text,
)
from console.sync.sources import SourceError

__all__ = ["CORDONED_LOG_DIRS", "KafkaClusterSource", "backend_features", "connect_admin"]

log = logging.getLogger("console.sync")

#: KIP-1066's broker config (Kafka 4.3): the dirs no new replica is placed on.
CORDONED_LOG_DIRS = "cordoned.log.dirs"
#: Brokers are asked for everything at once: a broker gets its log dirs, its configs, four
#: ListOffsets and a share of the topic configs in flight together.
MAX_IN_FLIGHT = 64


def dir_names(paths: list[str]) -> dict[str, str]:
    """A broker's log dirs by name: the last part of each path where those are unique on the
    broker (``/var/lib/kafka/data-0`` is ``data-0``), so the dir grid lines up the same dirs of
    every broker as it does for agents; the whole path where two share a last part
    (``/disk1/kafka``, ``/disk2/kafka``). Kafka itself names a dir only by its path."""
    base = {p: os.path.basename(p.rstrip("/")) or p for p in paths}
    unique = len(set(base.values())) == len(base)
    return {p: base[p] if unique else p for p in paths}


def _digest(value: object) -> int:
    """A stable 62-bit digest of ``value`` (JSON-able): a version that fits a bigint."""
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") >> 2


def backend_features(read: ClusterRead) -> dict:
    """What this read learnt the cluster supports (``Cluster.backend_features``): each API's
    version range from the bootstrap broker's ApiVersions, and whether the brokers have
    ``cordoned.log.dirs`` (KIP-1066)."""
    return {
        "api_versions": {str(k): [lo, hi] for k, (lo, hi) in sorted(read.api_versions.items())},
        "broker_configs": {
            CORDONED_LOG_DIRS: any(CORDONED_LOG_DIRS in b.configs for b in read.per_broker.values())
        },
        "tiered_offsets_refused": read.tiered_offsets_refused,
    }


class _Manager(KafkaConnectionManager):
    """kafka-python's connection manager, which also stops bootstrapping at the first refused
    SASL login. kafka-python retries a refused login until its bootstrap times out and then
    says only "Unable to bootstrap"; and as Kafka closes the connection right after a failed
    authentication, kafka-python often sees the close before the error it answered (its
    ``_sock_recv`` drops what it read with the end of the stream). Either is noted in
    ``refused``: the broker's error, or the connection closed while authenticating."""

    refused: Exception | None = None

    def get_connection(self, node_id, *args, **kwargs):
        conn = super().get_connection(node_id, *args, **kwargs)
        conn.close_future.add_errback(lambda exc: self._closed_with(conn, exc))
        return conn

    def _closed_with(self, conn, exc: Exception) -> None:
        refused = isinstance(exc, Errors.SaslAuthenticationFailedError | Errors.AuthorizationError)
        in_sasl = (
            conn.sasl_enabled
            and conn.broker_version_data is not None  # ApiVersions answered: SASL was next
            and not conn.init_future.succeeded()
        )
        if refused or in_sasl:
            self.refused = exc if refused else None
            self.dropped_in_sasl = not refused
            self.close()  # ends the bootstrap loop now rather than at its timeout

    dropped_in_sasl = False


def connect_admin(client: dict, *, timeout: float, request_timeout: float) -> KafkaAdminClient:
    """A bootstrapped kafka-python admin client with ``client`` (``Cluster.kafka_client_kwargs()``)
    or :class:`SourceError` saying why not (unreachable, refused credentials): the sync's reads
    and the workflows' writes (``workflows.kinds.cluster_writes``) connect the same way."""
    made: list[KafkaNetClient] = []

    def net_client(**configs):
        net = NetworkSelector(**configs)
        made.append(KafkaNetClient(net=net, manager=_Manager(net, **configs), **configs))
        return made[-1]

    servers = client.get("bootstrap_servers", "")
    if not isinstance(servers, str):  # kafka-python takes a list too
        servers = ",".join(servers)
    try:
        return KafkaAdminClient(
            **{
                "request_timeout_ms": int(request_timeout * 1000),
                "bootstrap_timeout_ms": int(timeout * 1000),
                "max_in_flight_requests_per_connection": MAX_IN_FLIGHT,
                "reconnect_backoff_max_ms": 1000,
                **client,
                "kafka_client": net_client,
            }
        )
    except Exception as exc:
        refused, dropped = None, False
        for net in made:  # the admin client left its network thread running
            refused = net._manager.refused or refused
            dropped = dropped or net._manager.dropped_in_sasl
            net.close()
            net._net.stop()
        if refused is not None:
            raise SourceError(
                f"Kafka at {servers} refused the credentials: {_error_text(refused)}"
            ) from exc
        if dropped:
            raise SourceError(
                f"Kafka at {servers} closed the connection during SASL authentication: "
                "it refused the credentials (user, password or mechanism)"
            ) from exc
        if isinstance(exc, Errors.KafkaTimeoutError):
            raise SourceError(
                f"cannot reach Kafka at {servers}: no bootstrap server answered within "
                f"{timeout:g} s"
            ) from exc
        raise SourceError(f"Kafka at {servers}: {_error_text(exc)}") from exc


class KafkaClusterSource:
    """A ``kafka`` cluster read over Kafka's protocol (see the module docstring).

    ``client`` holds KafkaAdminClient settings (``Cluster.kafka_client_kwargs()``). A source
    reads the cluster once, at its first call: it is one sync's, like the HTTP source.

    The cyclic GC stays paused from that read to :meth:`close`: the read is millions of
    kafka-python objects alive for the whole sync, which every collection meanwhile would walk
    again (the snapshots' rows set off dozens: ~1 s of a 200,000-partition first sync). What a
    sync allocates besides is freed by reference counting.
    """

    def __init__(self, client: dict, *, timeout: float = 8.0, request_timeout: float = 30.0):
        self.client = dict(client)
        self.timeout = timeout
        self.request_timeout = request_timeout
        self._lock = threading.Lock()
        self._admin: KafkaAdminClient | None = None
        self._read: ClusterRead | None = None
        self._assigned: dict[int, list] = {}
        self._metadata: tuple | None = None
        self._failure: SourceError | None = None
        self._version = int(time.time() * 1000)  # the snapshots' version (they are full)
        self._gc = contextlib.ExitStack()  # the GC's pause, from the read to close()

    # -- the one read ------------------------------------------------------------------------

    def _connect(self) -> KafkaAdminClient:
        return connect_admin(
            self.client, timeout=self.timeout, request_timeout=self.request_timeout
        )

    def read(self) -> ClusterRead:
        """The cluster, read once (thread-safe: the sync asks brokers from several threads)."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._read is None:
                try:
                    if self._admin is None:
                        self._admin = self._connect()
                    self._gc.enter_context(gc_paused())  # decoded on kafka-python's thread
                    self._read = self._admin._manager.run(read_cluster, self._admin)
                    self._assigned = _assigned(self._read)
                except SourceError as exc:
                    self._failure = exc
                except UnsupportedApi as exc:
                    self._failure = SourceError(str(exc))
                except Exception as exc:  # a protocol error mid-read fails the whole read
                    self._failure = SourceError(f"Kafka protocol error: {_error_text(exc)}")
                if self._failure is not None:
                    self._gc.close()
                    raise self._failure
            return self._read

    @property
    def backend_features(self) -> dict | None:
        """The cluster's features when this source read it (None before or after a failure)."""
        return backend_features(self._read) if self._read is not None else None

    # -- metadata ----------------------------------------------------------------------------

    def _metadata_parts(self) -> tuple[dict, list[tuple[dict, list[tuple], list[str]]]]:
        """(the answer's envelope with its digest as ``version``, [(topic fields, partitions as
        ``(partition, replicas, leader, leader_epoch, isr, offline_replicas)``, their
        ``format=tsv`` rows)]): plain values, computed once per read."""
        if self._metadata is None:
            self._metadata = self._metadata_of(self.read())
        return self._metadata

    def _metadata_of(self, read: ClusterRead) -> tuple:
        live = read.brokers
        named: set[int] = set()
        digest = hashlib.blake2b(digest_size=8)
        topics = []
        for t in read.topics:
            configs = read.topic_configs.get(t.name, {})
            view = kafka39.from_configs({k: v for k, (v, _) in configs.items()})
            parts = sorted(
                (
                    p.partition_index,
                    list(p.replica_nodes),
                    p.leader_id,
                    max(p.leader_epoch, 0),
                    list(p.isr_nodes),
                    list(p.offline_replicas or []),
                )
                for p in t.partitions
            )
            name = tsv_value(t.name)
            rows = [
                f"{name}\t{n}\t{_array(r)}\t{lead}\t{epoch}\t0\t{_array(isr)}\t{_array(off)}"
                "\t{}\t{}\t{}\tf"
                for n, r, lead, epoch, isr, off in parts
            ]
            for _, r, *_ in parts:
                named.update(r)
            fields = {
                "name": t.name,
                "topic_id": uuid_text(t.topic_id),
                "configs": {
                    k: v for k, (v, src) in sorted(configs.items()) if src != DEFAULT_CONFIG
                },
                "tiered_state": view.tiered_state,
                "tiered_epoch": 0,
                "disable_policy": view.disable_policy,
                "tiering_acks": [],
                "initial_partition_count": len(parts),
                "undeleted_partition_count": len(parts),
            }
            digest.update(json.dumps(fields, sort_keys=True).encode())
            digest.update("\n".join(rows).encode())
            topics.append((fields, parts, rows))
        brokers = [
            {
                "broker_id": bid,
                "url": f"{live[bid][0]}:{live[bid][1]}" if bid in live else "",
                "alive": bid in live,
                "kafka_listener": f"{live[bid][0]}:{live[bid][1]}" if bid in live else None,
            }
            for bid in sorted(set(live) | named)
        ]
        envelope = {"cluster_id": read.cluster_id, "brokers": brokers}
        digest.update(json.dumps(envelope, sort_keys=True).encode())
        version = int.from_bytes(digest.digest(), "big") >> 2  # 62 bits: fits a bigint
        return {**envelope, "version": version}, topics

    def metadata(self, since: int | None) -> ClusterMetadata:
        """Cluster metadata; ``changed=False`` (nothing else) when its digest is ``since``."""
        envelope, topics = self._metadata_parts()
        if since is not None and since == envelope["version"]:
            return ClusterMetadata(
                cluster_id=envelope["cluster_id"],
                version=since,
                brokers=[],
                topics=[],
                changed=False,
            )
        return ClusterMetadata(
            cluster_id=envelope["cluster_id"],
            version=envelope["version"],
            brokers=[BrokerInfo(**b) for b in envelope["brokers"]],
            topics=[
                TopicMetadata(
                    **fields,
                    partitions=[
                        PartitionMetadata(
                            partition=n,
                            replicas=r,
                            leader=lead,
                            leader_epoch=epoch,
                            isr=isr,
                            offline_replicas=off,
                        )
                        for n, r, lead, epoch, isr, off in parts
                    ],
                )
                for fields, parts, _ in topics
            ],
        )

    def metadata_tsv(self, since: int | None) -> bytes:
        """:meth:`metadata` as the sync stages it: ``format=tsv``, its rows written from plain
        values (no pydantic object per partition)."""
        envelope, topics = self._metadata_parts()
        if since is not None and since == envelope["version"]:
            return metadata_tsv(self.metadata(since))
        head = ClusterMetadata(
            cluster_id=envelope["cluster_id"],
            version=envelope["version"],
            brokers=[BrokerInfo(**b) for b in envelope["brokers"]],
            topics=[],
        ).model_dump(mode="json", exclude={"topics"})
        return metadata_rows_body(head, ((fields, rows) for fields, _, rows in topics))

    # -- snapshots ---------------------------------------------------------------------------

    def _snapshot_parts(self, broker_id: int) -> tuple[dict, list[tuple]]:
        """(the snapshot without replicas as a dict, its replicas as ``(topic, topic id,
        partition, log dir, size, offline, tiered state, the leader's offsets)``)."""
        read = self.read()
        if broker_id in read.broker_errors:
            raise SourceError(f"broker {broker_id}: {read.broker_errors[broker_id]}")
        mine = read.per_broker.get(broker_id)
        if mine is None:
            raise SourceError(
                f"broker {broker_id} is not live in the cluster's metadata (down or removed)"
            )
        cordoned = {
            d.strip() for d in (mine.configs.get(CORDONED_LOG_DIRS) or "").split(",") if d.strip()
        }
        hosted: dict[tuple[str, int], tuple[str, int]] = {}  # replica -> (dir, size)
        futures: list[tuple[str, int, str, int, int]] = []  # a move's future replicas
        dirs = []
        failed = []
        name_of = dir_names([d.log_dir for d in mine.log_dirs or ()])
        for d in mine.log_dirs or ():
            if d.error_code:
                failed.append(d.log_dir)
                continue
            count = 0
            for t in d.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        hosted[(t.name, p.partition_index)] = (
                            name_of[d.log_dir],
                            p.partition_size,
                        )
                        count += 1
                    else:  # AlterReplicaLogDirs under way: the copy on its target dir
                        futures.append(
                            (
                                t.name,
                                p.partition_index,
                                name_of[d.log_dir],
                                p.partition_size,
                                p.offset_lag,
                            )
                        )
            dirs.append(
                {
                    "name": name_of[d.log_dir],
                    "path": d.log_dir,
                    "state": LogDirState.ONLINE,
                    "total_bytes": max(getattr(d, "total_bytes", -1), 0),
                    "usable_bytes": max(getattr(d, "usable_bytes", -1), 0),
                    "probe_latency_ms": None,
                    "error": None,
                    "replica_count": count,
                    "offline_replica_count": 0,
                    "cordoned": d.log_dir in cordoned,
                }
            )
        # a live broker's offline replicas sit on its failed dirs: with one, that one
        failed_dir = name_of[failed[0]] if len(failed) == 1 else None
        replicas = []
        offline = 0
        for topic, tid, tiered, p in self._assigned.get(broker_id, ()):
            key = (topic, p.partition_index)
            is_offline = broker_id in (p.offline_replicas or [])
            if key not in hosted and not is_offline and mine.log_dirs is not None:
                continue  # not on this broker's disks yet (being created)
            offsets = read.per_broker.get(p.leader_id)
            offsets = offsets.offsets.get(key, {}) if offsets is not None else {}
            log_dir, size = hosted.get(key, (failed_dir, 0))
            offline += is_offline
            replicas.append((topic, tid, p, log_dir, size, is_offline, tiered, offsets))
        for path in failed:
            name = name_of[path]
            dirs.append(
                {
                    "name": name,
                    "path": path,
                    "state": LogDirState.OFFLINE,
                    "total_bytes": 0,
                    "usable_bytes": 0,
                    "probe_latency_ms": None,
                    "error": "KAFKA_STORAGE_ERROR",
                    "replica_count": 0,
                    "offline_replica_count": offline if name == failed_dir else 0,
                    "cordoned": path in cordoned,
                }
            )
        head = {
            "broker_id": broker_id,
            "version": self._version,
            "since": None,
            "full": True,
            "state": "ONLINE",
            "expiration_mode": ExpirationMode.INTERNAL,
            "log_dirs": dirs,
            "removed": [],
            "offline_log_directory_count": len(failed),
            "offline_replica_count": offline,
            "generated_at_ms": self._version,
            "remote_store_unreachable_since_ms": None,
            "remote_store_error": None,
            "dir_moves": [
                {
                    "topic": topic,
                    "partition": p,
                    "log_dir": hosted.get((topic, p), (None,))[0],
                    "future_log_dir": target,
                    "future_size_bytes": size,
                    "future_offset_lag": lag,
                }
                for topic, p, target, size, lag in sorted(futures)
            ],
        }
        return head, replicas

    def snapshot(self, broker_id: int, url: str, since: int | None) -> BrokerSnapshot:
        """One broker's snapshot, in full whatever ``since`` (see the module docstring)."""
        head, replicas = self._snapshot_parts(broker_id)
        return BrokerSnapshot(
            **{k: v for k, v in head.items() if k not in ("log_dirs", "dir_moves")},
            log_dirs=[LogDirInfo(**d) for d in head["log_dirs"]],
            dir_moves=[ReplicaDirMove(**m) for m in head["dir_moves"]],
            replicas=[
                ReplicaInfo(**_replica(broker_id, *r), version=self._version) for r in replicas
            ],
        )

    def snapshot_tsv(self, broker_id: int, url: str, since: int | None) -> bytes:
        """:meth:`snapshot` as the sync stages it: the head as JSON, then COPY rows."""
        head, replicas = self._snapshot_parts(broker_id)
        dirs = {d["name"]: tsv_value(d["name"]) for d in head["log_dirs"]} | {None: "\\N"}
        rows = [_replica_row(broker_id, self._version, dirs, *r) for r in replicas]
        envelope = BrokerSnapshot(
            **{k: v for k, v in head.items() if k not in ("log_dirs", "dir_moves")},
            log_dirs=[LogDirInfo(**d) for d in head["log_dirs"]],
            dir_moves=[ReplicaDirMove(**m) for m in head["dir_moves"]],
            replicas=[],
        )
        body = snapshot_tsv(envelope)
        return body + ("\n".join(rows) + "\n" if rows else "").encode()

    def eligible_leader_replicas(self) -> dict[tuple[str, int], tuple[list[int], list[int]]] | None:
        """KIP-966's ELR and last known ELR of the partitions with either (DescribeTopicPartitions);
        None when the brokers do not answer it (``console.sync.extras`` applies it)."""
        return self.read().elr

    # -- groups ------------------------------------------------------------------------------

    def group_changes(self, since: int | None) -> bytes | None:
        """The consumer groups and their committed offsets as the coordinator's rows
        (:func:`broker_agent.contract.models.group_changes_tsv`): in full, or no group at all when
        their digest is ``since``. Generation and member count are not in ListGroups: 0."""
        read = self.read()
        try:
            groups = self._admin._manager.run(read_groups, self._admin, sorted(read.brokers))
        except Exception as exc:
            raise SourceError(f"Kafka groups: {_error_text(exc)}") from exc
        heads = [(g, 0, 0) for g in sorted(groups)]
        rows = [
            (g, topic, p, offset, 0, 0)
            for g in sorted(groups)
            for (topic, p), offset in sorted(groups[g][1].items())
        ]
        version = _digest([heads, rows])
        if since is not None and since == version:
            return group_changes_tsv(version, False, [], [])
        return group_changes_tsv(version, True, heads, rows)

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
            self._read = self._metadata = None
            self._assigned = {}
            self._gc.close()


# -- rows ------------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    """``Name: message`` of an error, without kafka-python's repeats (``[Error 58] Name: Name:
    message``)."""
    name = type(exc).__name__
    text = str(exc.args[0]) if exc.args else ""
    while text.startswith(f"{name}: "):
        text = text[len(name) + 2 :]
    return f"{name}: {text}" if text and text != name else name


def _assigned(read: ClusterRead) -> dict[int, list]:
    """broker id -> ``(topic, topic id, tiered state, partition)`` of every replica Metadata
    assigns it: one pass over the partitions, not one per broker (60 brokers x 200,000)."""
    out: dict[int, list] = {}
    for t in read.topics:
        tid = uuid_text(t.topic_id)
        configs = read.topic_configs.get(t.name, {})
        tiered = kafka39.from_configs({k: v for k, (v, _) in configs.items()}).tiered_state
        for p in t.partitions:
            for bid in p.replica_nodes:
                out.setdefault(bid, []).append((t.name, tid, tiered, p))
    return out


def _array(values: list[int]) -> str:
    """A list of ints as a COPY array literal (``models.tsv_value``'s spelling)."""
    return "{" + ",".join(map(str, values)) + "}"


#: ``models.SNAPSHOT_TSV_COLUMNS`` as :func:`_replica_row` writes them, checked at import: a
#: change of the agents' row format fails here rather than shifting a column.
_ROW_COLUMNS = (
    *("broker_id", "topic", "partition", "log_dir", "state", "is_leader", "leader_epoch"),
    *("log_start_offset", "local_log_start_offset", "log_end_offset", "high_watermark"),
    *("size_bytes", "tiered_epoch", "copier_state", "expiration_state"),
    *("remote_log_start_offset", "remote_log_end_offset", "remote_bytes", "remote_segments"),
    *TIER_METRIC_FIELDS,
    "version",
)
if _ROW_COLUMNS != SNAPSHOT_TSV_COLUMNS:
    raise ImportError("models.SNAPSHOT_TSV_COLUMNS changed: update kafka_source._replica_row")
#: KIP-963's gauges: JMX only, the model's 0.
_NO_METRICS = "\t0" * len(TIER_METRIC_FIELDS)


def _replica_values(broker_id, topic, p, log_dir, size, offline, offsets) -> dict:
    """The values of a replica's ``format=tsv`` row that Kafka's answers give (``offsets``:
    spec -> offset, of the partition's leader); the others are the model's defaults."""
    start = offsets.get(EARLIEST, 0)
    latest = offsets.get(LATEST, 0)
    tiered_end = offsets.get(LATEST_TIERED, -1)
    return {
        "topic": topic,
        "partition": p.partition_index,
        "log_dir": log_dir,
        "state": ReplicaState.OFFLINE if offline else ReplicaState.ONLINE,
        "is_leader": p.leader_id == broker_id,
        "leader_epoch": max(p.leader_epoch, 0),
        "log_start_offset": start,
        "local_log_start_offset": offsets.get(EARLIEST_LOCAL, start),
        "log_end_offset": latest,
        "high_watermark": latest,
        "size_bytes": size,
        "remote_log_start_offset": start if tiered_end >= 0 else -1,
        "remote_log_end_offset": tiered_end,
    }


def _replica(broker_id, topic, topic_id, p, log_dir, size, offline, tiered, offsets) -> dict:
    """A :class:`ReplicaInfo`'s fields (see :func:`_replica_values`)."""
    return {
        **_replica_values(broker_id, topic, p, log_dir, size, offline, offsets),
        "topic_id": topic_id,
        "leader": p.leader_id,
        "isr": list(p.isr_nodes),
        "tiered_state": tiered or TieredState.NONE,
        "tiered_epoch": 0,
        "copier_state": "",
        "expiration_state": "",
    }


def _replica_row(bid, version, dirs, topic, _tid, p, log_dir, size, offline, _tiered, offsets):
    """:func:`_replica` as a ``format=tsv`` row (:data:`_ROW_COLUMNS`), written as
    ``models.tsv_value`` writes each value but without a Python object per field: ~600,000
    replicas a first sync at fleet size. ``dirs``: each log dir as ``tsv_value`` writes it; a
    topic name holds no character COPY escapes."""
    start = offsets.get(EARLIEST, 0)
    latest = offsets.get(LATEST, 0)
    local = offsets.get(EARLIEST_LOCAL, start)
    tiered_end = offsets.get(LATEST_TIERED, -1)
    remote_start = start if tiered_end >= 0 else -1
    state = ReplicaState.OFFLINE if offline else ReplicaState.ONLINE
    leader = "t" if p.leader_id == bid else "f"
    return (
        f"{bid}\t{topic}\t{p.partition_index}\t{dirs[log_dir]}\t{state}\t{leader}\t"
        f"{max(p.leader_epoch, 0)}\t{start}\t{local}\t{latest}\t{latest}\t{size}\t0\t\t\t"
        f"{remote_start}\t{tiered_end}\t0\t0{_NO_METRICS}\t{version}"
    )
