"""Brokers and their JBOD log directories (KIP-112)."""

from __future__ import annotations

from django.db import models

from console.choices import BrokerState, LogDirState, choices
from console.models.clusters import Cluster

__all__ = ["Broker", "LogDir"]


class Broker(models.Model):
    """A broker as the controller and its agent last reported it.

    ``broker_id`` is Kafka's broker id; the row's ``pk`` is Strata's own. Per-agent staleness:
    ``last_good_at`` is the end of the last sync that got this agent's snapshot, ``error`` (with
    ``error_at``) says why the latest one did not. The rest of the cluster keeps syncing.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="brokers")
    broker_id = models.IntegerField()
    url = models.CharField(max_length=500)
    alive = models.BooleanField(default=False, help_text="Registered and heartbeating (KRaft).")
    state = models.CharField(
        max_length=16, choices=choices(BrokerState.ALL), default=BrokerState.UNKNOWN
    )
    agent_state = models.CharField(max_length=32, blank=True)
    expiration_mode = models.CharField(max_length=16, blank=True)
    offline_log_directory_count = models.IntegerField(default=0)  # KIP-112 metric
    offline_replica_count = models.IntegerField(
        default=0,
        help_text="KIP-112 OfflineReplicaCount as the broker reports it: its replicas on its "
        "offline log dirs (a live broker's metric; 0 while the broker is down).",
    )
    down_replica_count = models.IntegerField(
        default=0,
        db_default=0,  # the sync inserts brokers with raw SQL
        help_text="Replicas unavailable because the broker itself is down (not alive): counted "
        "here, not in OfflineReplicaCount, which a dead broker does not report.",
    )
    remote_store_unreachable_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when this broker's calls to the remote object store fail (issue #13): "
        "copying waits, local segments are kept. Null: reachable.",
    )
    remote_store_error = models.TextField(blank=True, db_default="")
    last_heartbeat_ms = models.BigIntegerField(default=0)
    snapshot_version = models.BigIntegerField(
        default=-1, help_text="Agent snapshot version last applied (-1: never)."
    )
    last_good_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "broker_id"], name="broker_unique_id")
        ]

    def __str__(self) -> str:
        return f"broker {self.broker_id}"

    @property
    def stale(self) -> bool:
        return bool(self.error)


class LogDir(models.Model):
    """One log directory of one broker (``log.dirs`` entry), with its KIP-112 health."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    broker = models.ForeignKey(Broker, on_delete=models.CASCADE, related_name="log_dirs")
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1000)
    state = models.CharField(
        max_length=16,
        choices=choices((LogDirState.ONLINE, LogDirState.DEGRADED, LogDirState.OFFLINE)),
        default=LogDirState.ONLINE,
    )
    state_changed_at = models.DateTimeField(null=True, blank=True)
    total_bytes = models.BigIntegerField(default=0)
    usable_bytes = models.BigIntegerField(default=0)
    probe_latency_ms = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    replica_count = models.IntegerField(default=0)
    offline_replica_count = models.IntegerField(default=0)
    cordoned = models.BooleanField(default=False)
    """KIP-1066 ``cordoned.log.dirs``: no new replica is placed on it; its replicas keep serving
    and its state stays what it is (a cordon is no failure)."""
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["broker", "name"]
        constraints = [
            models.UniqueConstraint(fields=["broker", "name"], name="logdir_unique_name")
        ]
        indexes = [models.Index(fields=["cluster", "state"])]

    def __str__(self) -> str:
        return f"{self.broker} {self.name}"

    @property
    def used_bytes(self) -> int:
        return self.used_of(self.total_bytes, self.usable_bytes)

    @staticmethod
    def used_of(total_bytes: int, usable_bytes: int) -> int:
        """Bytes used of a dir with these total and usable bytes (its rows read as tuples)."""
        return max(total_bytes - usable_bytes, 0)
