"""Build the pydantic objects a controller and agents would send, for the sync to ingest.

:class:`ClusterBuilder` keeps a small Kafka-shaped state (topics, partitions, replicas on log
dirs, offsets) and renders it as :class:`ClusterMetadata` and :class:`BrokerSnapshot` objects,
full or incremental by version, exactly the shapes ``broker_agent`` serves. Tests build
inventories with it through the real sync code; nothing here touches the database.
"""

from __future__ import annotations

import dataclasses
import uuid

from broker_agent.contract.choices import (
    LogDirState,
    ReplicaState,
    TaskState,
    TieredState,
    TopicConfig,
)
from broker_agent.contract.models import (
    BrokerInfo,
    BrokerSnapshot,
    ClusterMetadata,
    LogDirInfo,
    PartitionMetadata,
    ReplicaInfo,
    TopicMetadata,
)
from console.sync import StaticClusterSource

GiB = 1024**3


@dataclasses.dataclass
class Rep:
    broker: int
    log_dir: str | None
    state: str = ReplicaState.ONLINE
    version: int = 0


@dataclasses.dataclass
class Part:
    partition: int
    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0
    offline_replicas: list[int] = dataclasses.field(default_factory=list)
    marked_for_deletion: bool = False
    log_start_offset: int = 0
    local_log_start_offset: int = 0
    log_end_offset: int = 0
    remote_log_start_offset: int = -1
    remote_log_end_offset: int = -1
    remote_bytes: int = 0
    local_bytes: int = 0
    leader_epoch_after_creation: dict[str, int] = dataclasses.field(default_factory=dict)
    tier_metrics: dict[str, int] = dataclasses.field(default_factory=dict)  # KIP-963, leader


@dataclasses.dataclass
class TopicState:
    name: str
    topic_id: str
    configs: dict
    tiered_state: str
    tiered_epoch: int
    disable_policy: str | None
    initial_partition_count: int
    undeleted_partition_count: int
    parts: dict[int, Part]
    reps: dict[tuple[int, int], Rep]  # (partition, broker) -> replica


class ClusterBuilder:
    def __init__(self, brokers: int = 3, log_dirs: int = 2, cluster_id: str = "test-cluster"):
        self.cluster_id = cluster_id
        self.version = 1
        self.broker_ids = list(range(1, brokers + 1))
        self.alive = {b: True for b in self.broker_ids}
        self.dirs = {
            b: {f"logdir-{d}": LogDirState.ONLINE for d in range(log_dirs)} for b in self.broker_ids
        }
        self.dir_errors: dict[tuple[int, str], str] = {}
        self.cordoned: set[tuple[int, str]] = set()
        self.topics: dict[str, TopicState] = {}
        self.broker_versions = {b: 1 for b in self.broker_ids}
        self.removed: dict[int, list[tuple[int, str]]] = {b: [] for b in self.broker_ids}
        self.groups: list | None = None  # GroupView list: what the controller's coordinator says

    # -- mutations (each bumps the versions it touches) -----------------------------------

    def _touch(self, *brokers: int) -> int:
        self.version += 1
        for b in brokers:
            self.broker_versions[b] = self.version
        return self.version

    def add_topic(
        self,
        name: str,
        partitions: int = 3,
        rf: int = 3,
        *,
        configs: dict | None = None,
        tiered: bool = False,
        records: int = 100,
        remote_records: int = 0,
    ) -> TopicState:
        rf = min(rf, len(self.broker_ids))
        cfg = dict(configs or {})
        if tiered:
            cfg[TopicConfig.REMOTE_STORAGE_ENABLE] = "true"
        t = TopicState(
            name=name,
            topic_id=uuid.uuid5(uuid.NAMESPACE_URL, name).hex[:22],
            configs=cfg,
            tiered_state=TieredState.ENABLED if tiered else TieredState.NONE,
            tiered_epoch=0,
            disable_policy=None,
            initial_partition_count=partitions,
            undeleted_partition_count=partitions,
            parts={},
            reps={},
        )
        self.topics[name] = t
        for p in range(partitions):
            self._add_partition(t, p, rf, records, remote_records)
        self._touch(*self.broker_ids)
        return t

    def _add_partition(self, t: TopicState, p: int, rf: int, records: int, remote: int) -> None:
        n = len(self.broker_ids)
        replicas = [self.broker_ids[(p + i) % n] for i in range(rf)]
        part = Part(
            partition=p,
            replicas=replicas,
            leader=replicas[0],
            isr=list(replicas),
            log_end_offset=records,
            local_log_start_offset=remote // 2 if remote else 0,
            local_bytes=(records - (remote // 2 if remote else 0)) * 100,
        )
        if remote:
            part.remote_log_start_offset = 0
            part.remote_log_end_offset = remote - 1
            part.remote_bytes = remote * 100
        t.parts[p] = part
        for b in replicas:
            dirs = sorted(self.dirs[b])
            t.reps[(p, b)] = Rep(broker=b, log_dir=dirs[p % len(dirs)], version=self.version + 1)

    def fail_log_dir(self, broker: int, log_dir: str, error: str = "Permission denied") -> None:
        """KIP-112: the dir goes offline, its replicas go offline, leaders move, ISR shrinks."""
        self.dirs[broker][log_dir] = LogDirState.OFFLINE
        self.dir_errors[(broker, log_dir)] = error
        for t in self.topics.values():
            for (p, b), rep in t.reps.items():
                if b == broker and rep.log_dir == log_dir:
                    rep.state = ReplicaState.OFFLINE
                    rep.version = self.version + 1
                    self._replica_offline(t.parts[p], broker)
        self._touch(*self.broker_ids)

    def restart_with_failed_dir(self, broker: int, log_dir: str) -> None:
        """KIP-112: the broker restarted with ``log_dir`` already failed, so its replicas there
        are offline with no dir known (it found them on no good dir)."""
        self.fail_log_dir(broker, log_dir)
        for t in self.topics.values():
            for (_p, b), rep in t.reps.items():
                if b == broker and rep.log_dir == log_dir:
                    rep.log_dir = None
                    rep.version = self.version + 1
        self._touch(broker)

    def heal_log_dir(self, broker: int, log_dir: str) -> None:
        self.dirs[broker][log_dir] = LogDirState.ONLINE
        self.dir_errors.pop((broker, log_dir), None)
        for t in self.topics.values():
            for (p, b), rep in t.reps.items():
                if b == broker and rep.log_dir == log_dir:
                    rep.state = ReplicaState.ONLINE
                    rep.version = self.version + 1
                    part = t.parts[p]
                    part.offline_replicas = [r for r in part.offline_replicas if r != broker]
                    if broker not in part.isr:
                        part.isr.append(broker)
                        part.partition_epoch += 1
                    if part.leader < 0:
                        part.leader = broker
                        part.leader_epoch += 1
        self._touch(*self.broker_ids)

    def cordon_log_dir(self, broker: int, log_dir: str) -> None:
        """KIP-1066: the dir takes no new replicas; its state and replicas stay as they are."""
        self.cordoned.add((broker, log_dir))
        self._touch(broker)

    def degrade_log_dir(self, broker: int, log_dir: str) -> None:
        self.dirs[broker][log_dir] = LogDirState.DEGRADED
        self._touch(broker)

    def kill_broker(self, broker: int) -> None:
        self.alive[broker] = False
        for t in self.topics.values():
            for (p, b), rep in t.reps.items():
                if b == broker:
                    self._replica_offline(t.parts[p], broker)
                    rep.version = self.version + 1
        self._touch(*[b for b in self.broker_ids if b != broker])

    @staticmethod
    def _replica_offline(part: Part, broker: int) -> None:
        if broker not in part.offline_replicas:
            part.offline_replicas.append(broker)
        if broker in part.isr and len(part.isr) > 1:
            part.isr.remove(broker)
            part.partition_epoch += 1
        if part.leader == broker:
            candidates = [
                r for r in part.replicas if r in part.isr and r not in part.offline_replicas
            ]
            part.leader = candidates[0] if candidates else -1
            part.leader_epoch += 1
            part.partition_epoch += 1

    def disable_tiering(self, topic: str, policy: str = "retain", done: bool = False) -> None:
        t = self.topics[topic]
        t.tiered_state = TieredState.DISABLED if done else TieredState.DISABLING
        t.tiered_epoch += 1
        t.disable_policy = policy
        self._touch_topic(t)

    def _touch_topic(self, t: TopicState) -> None:
        v = self.version + 1
        for rep in t.reps.values():
            rep.version = v
        self._touch(*self.broker_ids)

    def produce(self, topic: str, partition: int, records: int) -> None:
        t = self.topics[topic]
        part = t.parts[partition]
        part.log_end_offset += records
        part.local_bytes += records * 100
        v = self.version + 1
        for b in part.replicas:
            t.reps[(partition, b)].version = v
        self._touch(*part.replicas)

    def tier(self, topic: str, partition: int, upto: int) -> None:
        """Copy records below ``upto`` to remote and expire them locally."""
        t = self.topics[topic]
        part = t.parts[partition]
        if part.remote_log_end_offset < 0:
            part.remote_log_start_offset = part.log_start_offset
        part.remote_bytes += (upto - 1 - part.remote_log_end_offset) * 100
        part.remote_log_end_offset = upto - 1
        part.local_bytes -= (upto - part.local_log_start_offset) * 100
        part.local_log_start_offset = upto
        self._touch_topic(t)

    def set_tier_metrics(self, topic: str, partition: int, **metrics: int) -> None:
        """KIP-963 metrics the partition's leader reports (e.g. ``remote_copy_lag_bytes``)."""
        t = self.topics[topic]
        t.parts[partition].tier_metrics.update(metrics)
        self.produce(topic, partition, 0)  # bumps the replicas' versions

    def alter_partition_count(self, topic: str, count: int) -> None:
        """KIP-253: expansion adds partitions; a shrink marks the highest ones for deletion."""
        t = self.topics[topic]
        rf = len(next(iter(t.parts.values())).replicas)
        after_creation = {str(p): part.leader_epoch for p, part in t.parts.items()}
        for p in range(count):
            if p not in t.parts:
                self._add_partition(t, p, rf, 0, 0)
                t.parts[p].leader_epoch_after_creation = dict(after_creation)
        for p, part in t.parts.items():
            part.marked_for_deletion = p >= count
        t.undeleted_partition_count = count
        self._touch_topic(t)

    def remove_partition(self, topic: str, partition: int) -> None:
        t = self.topics[topic]
        part = t.parts.pop(partition)
        for b in part.replicas:
            t.reps.pop((partition, b))
            self.removed[b].append((self.version + 1, f"{topic}:{partition}"))
        self._touch(*self.broker_ids)

    def delete_topic(self, topic: str) -> None:
        t = self.topics.pop(topic)
        for p, b in t.reps:
            self.removed[b].append((self.version + 1, f"{topic}:{p}"))
        self._touch(*self.broker_ids)

    # -- rendering ------------------------------------------------------------------------

    def _log_dirs(self, b: int) -> list[LogDirInfo]:
        out = []
        for name, state in sorted(self.dirs[b].items()):
            reps = [
                r
                for t in self.topics.values()
                for r in t.reps.values()
                if r.broker == b and r.log_dir == name
            ]
            out.append(
                LogDirInfo(
                    name=name,
                    path=f"/data/broker-{b}/{name}",
                    state=state,
                    total_bytes=100 * GiB,
                    usable_bytes=60 * GiB,
                    probe_latency_ms=None if state == LogDirState.OFFLINE else 1.5,
                    error=self.dir_errors.get((b, name)),
                    replica_count=len(reps),
                    offline_replica_count=sum(r.state == ReplicaState.OFFLINE for r in reps),
                    cordoned=(b, name) in self.cordoned,
                )
            )
        return out

    def metadata(self) -> ClusterMetadata:
        topics = [
            TopicMetadata(
                name=t.name,
                topic_id=t.topic_id,
                configs=t.configs,
                tiered_state=t.tiered_state,
                tiered_epoch=t.tiered_epoch,
                disable_policy=t.disable_policy,
                initial_partition_count=t.initial_partition_count,
                undeleted_partition_count=t.undeleted_partition_count,
                partitions=[
                    PartitionMetadata(
                        partition=p.partition,
                        replicas=p.replicas,
                        leader=p.leader,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        isr=p.isr,
                        offline_replicas=p.offline_replicas,
                        created=[r for r in p.replicas if r not in p.offline_replicas],
                        marked_for_deletion=p.marked_for_deletion,
                        leader_epoch_after_creation=p.leader_epoch_after_creation,
                        leader_epoch_before_deletion=(
                            {str(p.partition): p.leader_epoch} if p.marked_for_deletion else {}
                        ),
                    )
                    for p in sorted(t.parts.values(), key=lambda x: x.partition)
                ],
            )
            for t in sorted(self.topics.values(), key=lambda x: x.name)
        ]
        brokers = [
            BrokerInfo(
                broker_id=b,
                url=f"http://127.0.0.1:1/broker-{b}",
                alive=self.alive[b],
                log_dirs=self._log_dirs(b),
            )
            for b in self.broker_ids
        ]
        return ClusterMetadata(
            cluster_id=self.cluster_id, version=self.version, brokers=brokers, topics=topics
        )

    def snapshot(self, broker: int, since: int | None = None) -> BrokerSnapshot:
        replicas = []
        for t in self.topics.values():
            for (p, b), rep in t.reps.items():
                if b != broker or (since is not None and rep.version <= since):
                    continue
                part = t.parts[p]
                leader = part.leader == broker
                replicas.append(
                    ReplicaInfo(
                        topic=t.name,
                        topic_id=t.topic_id,
                        partition=p,
                        log_dir=rep.log_dir,
                        state=rep.state,
                        is_leader=leader,
                        leader=part.leader,
                        leader_epoch=part.leader_epoch,
                        isr=part.isr,
                        log_start_offset=part.log_start_offset,
                        local_log_start_offset=part.local_log_start_offset,
                        log_end_offset=part.log_end_offset,
                        high_watermark=part.log_end_offset,
                        size_bytes=part.local_bytes,
                        tiered_state=t.tiered_state,
                        tiered_epoch=t.tiered_epoch,
                        copier_state=TaskState.RUNNING
                        if leader and t.tiered_state == TieredState.ENABLED
                        else (TaskState.STOPPED if leader else TaskState.NOT_LEADER),
                        expiration_state=TaskState.RUNNING if leader else TaskState.NOT_LEADER,
                        remote_log_start_offset=part.remote_log_start_offset,
                        remote_log_end_offset=part.remote_log_end_offset,
                        remote_bytes=part.remote_bytes,
                        marked_for_deletion=part.marked_for_deletion,
                        version=rep.version,
                        **(part.tier_metrics if leader else {}),
                    )
                )
        dirs = self._log_dirs(broker)
        return BrokerSnapshot(
            broker_id=broker,
            version=self.broker_versions[broker],
            since=since,
            full=since is None,
            state="ONLINE" if self.alive[broker] else "OFFLINE",
            expiration_mode="internal",
            log_dirs=dirs,
            replicas=replicas,
            removed=[k for v, k in self.removed[broker] if since is not None and v > since],
            offline_log_directory_count=sum(d.state == LogDirState.OFFLINE for d in dirs),
            offline_replica_count=sum(r.state == ReplicaState.OFFLINE for r in replicas),
            generated_at_ms=0,
        )

    def source(self, down: set[int] | frozenset = frozenset()) -> BuilderSource:
        return BuilderSource(self, set(down))


class BuilderSource(StaticClusterSource):
    """A source that renders the builder's current state on each request, honouring ``since``
    and failing the agents in ``down`` (connection refused), or the controller if ``-1`` is."""

    def __init__(self, builder: ClusterBuilder, down: set[int]):
        super().__init__(builder.metadata())
        self.builder = builder
        self.down = down
        self.group_views = builder.groups

    def metadata(self, since: int | None) -> ClusterMetadata:
        if -1 in self.down:
            raise ConnectionError("controller: connection refused")
        self.set_metadata(self.builder.metadata())
        return super().metadata(since)

    def snapshot(self, broker_id: int, url: str, since: int | None) -> BrokerSnapshot:
        self.requests.append(("snapshot", broker_id, since))
        if broker_id in self.down or not self.builder.alive.get(broker_id, False):
            raise ConnectionError(f"broker {broker_id}: connection refused")
        return self.builder.snapshot(broker_id, since)
