"""What every part of a broker shares: the core state (:class:`BrokerCore`), one replica's state
(:class:`Replica`), the log, and small helpers."""

from __future__ import annotations

import logging
import threading
import time

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.simulator.storage import PartitionLog, StorageError

__all__ = [
    "DEGRADED_WINDOW",
    "OFFSET_MOVED_TO_TIERED_STORAGE",
    "BrokerCore",
    "Replica",
    "log",
    "update_high_watermark",
]

log = logging.getLogger("broker_agent.simulator.broker")

#: Consecutive slow probes that make a log dir DEGRADED (see ``logdirs.ProbeGrades``).
DEGRADED_WINDOW = 3
OFFSET_MOVED_TO_TIERED_STORAGE = "OFFSET_MOVED_TO_TIERED_STORAGE"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _storage_error(exc: StorageError, topic: str, partition: int) -> ApiError:
    """503 KAFKA_STORAGE_ERROR naming the offline log dir. The I/O error itself (errno, paths)
    stays in the log (``log dir ... failed``, once per failure), as Kafka answers
    KafkaStorageException without the OS's text."""
    log.debug("%s-%d on %s: %s", topic, partition, exc.log_dir, exc.error)
    return ApiError(503, ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {exc.log_dir} is offline")


class BrokerCore:
    """The state every part of a broker reads, under one lock: its id, its replicas and the
    metadata cache. The metadata part (:class:`broker_agent.simulator.broker.metadata.Metadata`) is the
    only writer of ``topics``, ``broker_urls`` and ``cluster_brokers`` and adds / drops
    replicas; the start-up scan loads replicas from disk, and a failing dir or a dir move
    changes a replica's log. ``data_cond`` wakes follower fetches waiting for data;
    ``stopped`` ends every thread."""

    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.lock = threading.RLock()
        self.data_cond = threading.Condition()
        self.stopped = threading.Event()
        self.replicas: dict[tuple[str, int], Replica] = {}
        #: the controller's topics as this broker applied them last (name -> metadata entry)
        self.topics: dict[str, dict] = {}
        self.broker_urls: dict[int, str] = {}
        #: the metadata cache the Kafka listener reads (every registered broker)
        self.cluster_brokers: list[dict] = []

    def notify_data(self) -> None:
        """Wake the follower fetches waiting on ``data_cond`` (new records, a moved log)."""
        with self.data_cond:
            self.data_cond.notify_all()


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
        # KIP-253: the topic's undeleted_partition_count and enable.ordered.delivery as of the
        # metadata that set ``leader_epoch``; both change together under ``cond``, so a produce
        # checked against one count is stamped with the leader epoch of that same count.
        self.undeleted_partition_count: int | None = None
        self.ordered_delivery = True
        self.follower_leo: dict[int, int] = {}
        self.caught_up_ms: dict[int, float] = {}
        self.became_leader_ms = 0.0
        self.needs_truncation = True
        self.isr_inflight = False
        #: the ISR a pending AlterPartition asks for (Kafka's ``maximalIsr``): the high
        #: watermark waits for a joining follower too, so a record acknowledged meanwhile is on
        #: every replica the controller may elect from the new ISR (a reassignment completed
        #: by that very change makes the joining replica leader)
        self.pending_isr: list[int] = []
        self.last_size_bytes: int | None = None
        self.cond = threading.Condition(threading.RLock())

    @property
    def online(self) -> bool:
        return self.log is not None


def update_high_watermark(r: Replica, broker_id: int) -> None:
    """HW = min LEO over the ISR (monotonic) on leader ``broker_id``; wakes acks=all
    producers. The pending ISR counts too (see :attr:`Replica.pending_isr`)."""
    plog = r.log
    if plog is None:
        return
    with r.cond:
        leo = plog.log_end_offset
        maximal = {*r.isr, *(b for b in r.pending_isr if b in r.replicas)}
        others = [r.follower_leo.get(b, 0) for b in maximal if b != broker_id]
        hw = min([leo, *others])
        if hw > plog.high_watermark:
            plog.high_watermark = hw
            r.cond.notify_all()
