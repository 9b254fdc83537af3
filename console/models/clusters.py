"""Registered clusters, the record of every sync, and the events agents pushed."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from broker_agent.contract.signing import read_secret, read_secret_file
from console.choices import ClusterBackend, SyncTrigger, choices

__all__ = ["TOPIC_STATE_SUMS", "AgentEvent", "Cluster", "SyncRun", "read_secret_ref"]

#: The topic figures :attr:`Cluster.topic_states` sums per KIP-950 tiered state (KIP-963's
#: tiered metrics and the fenced bytes pending purge), besides the count of topics.
TOPIC_STATE_SUMS = (
    "remote_copy_lag_bytes",
    "remote_copy_lag_segments",
    "remote_delete_lag_bytes",
    "remote_delete_lag_segments",
    "remote_log_size_bytes",
    "fenced_remote_bytes",
)


def read_secret_ref(ref: str, cluster: str) -> bytes:
    """A cluster's agent secret from a reference: ``env:NAME`` (the variable ``NAME``, else the
    file named by ``NAME_FILE``, as every Strata secret is read) or the path of a file (its
    contents, stripped). Empty is an error naming ``cluster``.

    Read by :mod:`broker_agent.contract.signing`'s one secret reader, so a secret means the same bytes
    to the console as to the agents that verify it."""
    if ref.startswith("env:"):
        value = read_secret(ref[4:])
        if value is None:
            raise RuntimeError(f"cluster {cluster}: environment variable {ref[4:]} is empty")
    else:
        value = read_secret_file(ref)
        if value is None:
            raise RuntimeError(f"cluster {cluster}: secret file {ref} is empty")
    return value.encode("utf-8", "surrogateescape")


class Cluster(models.Model):
    """A Kafka cluster Strata watches, by its ``backend``: an ``agents`` cluster by its controller
    and the secret its agents sign with, a ``kafka`` cluster by its bootstrap servers and client
    settings (:mod:`console.kafka_client`).

    ``secret_ref`` and ``sasl_password_ref`` are *references*, never secrets: a file path
    (``/etc/strata/local.secret``) or ``env:NAME`` for an environment variable. The sync keeps the cluster-wide aggregates below
    up to date so that the overview never scans partitions.
    """

    name = models.SlugField(max_length=100, unique=True)
    backend = models.CharField(
        max_length=16,
        choices=choices(ClusterBackend.ALL),
        default=ClusterBackend.AGENTS,
        db_default=ClusterBackend.AGENTS,
        help_text="agents: controller + broker agents over HTTP; kafka: Kafka's own protocol.",
    )
    controller_url = models.URLField(max_length=500, blank=True)
    secret_ref = models.CharField(
        max_length=500, blank=True, help_text="A file path, or env:NAME (agents backend)."
    )
    kafka_bootstrap = models.CharField(
        max_length=1000, blank=True, help_text="host:port[,host:port...] (kafka backend)."
    )
    kafka_client_config = models.JSONField(
        default=dict,
        blank=True,
        help_text="Kafka client settings (kafka backend): security_protocol, sasl_mechanism, "
        "sasl_username, sasl_password_ref (a file path or env:NAME, never the password), "
        "ssl_cafile, ssl_certfile, ssl_keyfile.",
    )
    backend_features = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the sync learnt the cluster supports (kafka backend: each API's version "
        "range from ApiVersions, broker configs such as cordoned.log.dirs); read by "
        "console.capabilities.",
    )
    cluster_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    metadata_version = models.BigIntegerField(
        default=-1, help_text="Controller metadata version last applied (-1: never)."
    )
    groups_version = models.BigIntegerField(
        default=-1,
        db_default=-1,
        help_text="Group coordinator version last applied (-1: never; groups are asked since).",
    )
    synced_at = models.DateTimeField(null=True, blank=True, help_text="End of the last sync.")
    sync_duration_ms = models.IntegerField(null=True, blank=True)
    controller_last_good_at = models.DateTimeField(null=True, blank=True)
    controller_error = models.TextField(blank=True)
    controller_error_at = models.DateTimeField(null=True, blank=True)
    history_sampled_at = models.DateTimeField(
        null=True, blank=True, help_text="When the sync last wrote history samples (trends)."
    )

    # Aggregates maintained by the sync (see console.sync.aggregates).
    broker_count = models.IntegerField(default=0)
    topic_count = models.IntegerField(default=0)
    partition_count = models.IntegerField(default=0)
    offline_partition_count = models.IntegerField(default=0)
    under_replicated_partition_count = models.IntegerField(default=0)
    under_min_isr_partition_count = models.IntegerField(default=0)
    offline_replica_count = models.IntegerField(default=0)
    marked_for_deletion_count = models.IntegerField(default=0)
    topic_states = models.JSONField(
        default=dict,
        blank=True,
        help_text="Per KIP-950 tiered state: its topics ('topics') and their TOPIC_STATE_SUMS.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def controller_stale(self) -> bool:
        return bool(self.controller_error)

    def read_secret(self) -> bytes:
        """The agents' HMAC secret, read from where ``secret_ref`` points (never stored here)."""
        return read_secret_ref(self.secret_ref, self.name)

    def read_kafka_password(self) -> str | None:
        """The SASL password of a ``kafka`` cluster, read from where ``sasl_password_ref`` points
        (never stored here); ``None`` without SASL."""
        ref = (self.kafka_client_config or {}).get("sasl_password_ref")
        if not ref:
            return None
        return read_secret_ref(ref, self.name).decode("utf-8", "surrogateescape")

    def kafka_client_kwargs(self) -> dict[str, object]:
        """kafka-python ``KafkaAdminClient`` arguments for a ``kafka`` cluster (bootstrap
        servers, security protocol, SASL user and password, TLS files, ``client_id="strata"``),
        the password read now from its reference."""
        from console.kafka_client import admin_client_kwargs

        config = self.kafka_client_config or {}
        return admin_client_kwargs(self.kafka_bootstrap, config, self.read_kafka_password())

    @property
    def is_kafka(self) -> bool:
        return self.backend == ClusterBackend.KAFKA

    @property
    def sync_error_label(self) -> str:
        """What the sync's source is called on pages and in health: the bootstrap servers of a
        ``kafka`` cluster, the controller of an ``agents`` one (both write ``controller_error``)."""
        return "Kafka bootstrap" if self.is_kafka else "controller"


class SyncRun(models.Model):
    """One sync of one cluster: when, how long, what it changed, which sources failed."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_runs")
    trigger = models.CharField(max_length=16, choices=choices(SyncTrigger.ALL))
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.IntegerField()
    full = models.BooleanField(default=False, help_text="Snapshots were requested in full.")
    metadata_version = models.BigIntegerField(default=-1)
    metadata_changed = models.BooleanField(default=False)
    topics_changed = models.IntegerField(default=0)
    partitions_upserted = models.IntegerField(default=0)
    replicas_upserted = models.IntegerField(default=0)
    replicas_deleted = models.IntegerField(default=0)
    brokers_synced = models.IntegerField(default=0)
    brokers_failed = models.IntegerField(default=0)
    controller_ok = models.BooleanField(default=True)
    errors = models.JSONField(default=dict, blank=True, help_text="source -> error message")

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["cluster", "-started_at"])]

    def __str__(self) -> str:
        return f"sync {self.cluster_id} @ {self.started_at:%H:%M:%S} ({self.duration_ms} ms)"

    @property
    def ok(self) -> bool:
        return not self.errors


class AgentEvent(models.Model):
    """A signed event an agent pushed (KIP-112 LogDirFailure, its recovery, BrokerOffline).

    Kept for the incident panel ("when did this dir fail, with which error"); each event also
    triggers an immediate sync. ``event_id`` makes a redelivered event count once.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="agent_events")
    event_id = models.CharField(max_length=100)
    event = models.CharField(max_length=32)
    broker_id = models.IntegerField()
    log_dir = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    offline_replicas = ArrayField(models.CharField(max_length=300), default=list, blank=True)
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-occurred_at"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "event_id"], name="agentevent_unique_id")
        ]
        indexes = [models.Index(fields=["cluster", "broker_id", "log_dir", "-occurred_at"])]

    def __str__(self) -> str:
        return f"{self.event} broker {self.broker_id} {self.log_dir}"
