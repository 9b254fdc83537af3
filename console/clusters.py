"""Actions on cluster registrations (Strata configuration, not cluster state)."""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from audit.choices import AuditContext
from console.choices import ClusterBackend
from console.kafka_client import validate_bootstrap, validate_client_config
from console.models import Cluster

__all__ = ["ClusterAction", "do_register_cluster"]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


class ClusterAction:
    """Audit action names of cluster registrations."""

    REGISTERED = "config.cluster_registered"
    CHANGED = "config.cluster_changed"


def _registration(cluster: Cluster) -> dict[str, Any]:
    """What the audit shows of a registration: the secret's *reference*, never the secret (an
    agents cluster's ``secret_ref``, a kafka cluster's ``sasl_password_ref``)."""
    if cluster.backend == ClusterBackend.KAFKA:
        return {
            "name": cluster.name,
            "backend": cluster.backend,
            "kafka_bootstrap": cluster.kafka_bootstrap,
            "kafka_client_config": dict(cluster.kafka_client_config),
        }
    return {
        "name": cluster.name,
        "controller_url": cluster.controller_url,
        "secret_ref": cluster.secret_ref,
    }


def _settings(
    controller_url: str, secret_ref: str, kafka_bootstrap: str, kafka_client_config: dict | None
) -> dict[str, Any]:
    """The registration's fields, validated: exactly one of a controller (agents) or bootstrap
    servers (kafka); the other backend's fields emptied."""
    if bool(controller_url) == bool(kafka_bootstrap):
        raise ValueError("give either a controller URL (agents) or Kafka bootstrap servers (kafka)")
    if kafka_bootstrap:
        return {
            "backend": ClusterBackend.KAFKA,
            "kafka_bootstrap": validate_bootstrap(kafka_bootstrap),
            "kafka_client_config": validate_client_config(kafka_client_config or {}),
            "controller_url": "",
            "secret_ref": "",
        }
    if not controller_url.startswith(("http://", "https://")):
        raise ValueError("the controller URL must start with http:// or https://")
    if not secret_ref:
        raise ValueError("an agents cluster needs the reference of its agents' secret")
    return {
        "backend": ClusterBackend.AGENTS,
        "controller_url": controller_url,
        "secret_ref": secret_ref,
        "kafka_bootstrap": "",
        "kafka_client_config": {},
    }


def do_register_cluster(
    *,
    name: str,
    controller_url: str = "",
    secret_ref: str = "",
    kafka_bootstrap: str = "",
    kafka_client_config: dict | None = None,
    acting_user: Any,
) -> tuple[Cluster, bool]:
    """Register ``name`` or update how Strata reaches it: an ``agents`` cluster by its controller
    URL and the reference of its agents' secret, a ``kafka`` cluster by its bootstrap servers and
    client settings (:mod:`console.kafka_client`; the SASL password by reference).

    Audited in the same transaction (fail closed): one ``config.cluster_registered`` event, or
    one ``config.cluster_changed`` event with ``before`` / ``after`` when an update changes
    something (an update that changes nothing writes nothing). Data already synced is kept on
    update: the next sync reconciles it with whatever the (new) source says. Raises
    ``ValueError`` (a :class:`ClientConfigError` for Kafka settings) with what to fix.
    """
    from audit import trail

    if not NAME_RE.match(name):
        raise ValueError("cluster names use letters, digits, '-' and '_' (at most 100)")
    fields = _settings(controller_url, secret_ref, kafka_bootstrap, kafka_client_config)
    with transaction.atomic():
        cluster, created = Cluster.objects.select_for_update().get_or_create(
            name=name, defaults=fields
        )
        before = None if created else _registration(cluster)
        if not created and any(getattr(cluster, k) != v for k, v in fields.items()):
            for k, v in fields.items():
                setattr(cluster, k, v)
            cluster.metadata_version = -1  # a new source: start from full metadata
            cluster.backend_features = {}  # and learn again what it supports
            cluster.save(update_fields=[*fields, "metadata_version", "backend_features"])
        after = _registration(cluster)
        if created or before != after:
            trail.record(
                ClusterAction.REGISTERED if created else ClusterAction.CHANGED,
                actor=acting_user,
                context=None if trail.current_scope() else AuditContext.CLI,
                target_type="cluster",
                target_id=cluster.name,
                before=before,
                after=after,
            )
    return cluster, created
