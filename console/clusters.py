"""Actions on cluster registrations (Strata configuration, not cluster state)."""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from audit.choices import AuditContext
from console.models import Cluster

__all__ = ["ClusterAction", "do_register_cluster"]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


class ClusterAction:
    """Audit action names of cluster registrations."""

    REGISTERED = "config.cluster_registered"
    CHANGED = "config.cluster_changed"


def _registration(cluster: Cluster) -> dict[str, str]:
    """What the audit shows of a registration: the secret's *reference*, never the secret."""
    return {
        "name": cluster.name,
        "controller_url": cluster.controller_url,
        "secret_ref": cluster.secret_ref,
    }


def do_register_cluster(
    *, name: str, controller_url: str, secret_ref: str, acting_user: Any
) -> tuple[Cluster, bool]:
    """Register ``name`` or update its controller URL and secret reference.

    Audited in the same transaction (fail closed): one ``config.cluster_registered`` event, or
    one ``config.cluster_changed`` event with ``before`` / ``after`` when an update changes
    something (an update that changes nothing writes nothing). Data already synced is kept on
    update: the next sync reconciles it with whatever the (new) controller says.
    """
    from audit import trail

    if not NAME_RE.match(name):
        raise ValueError("cluster names use letters, digits, '-' and '_' (at most 100)")
    if not controller_url.startswith(("http://", "https://")):
        raise ValueError("the controller URL must start with http:// or https://")
    with transaction.atomic():
        cluster, created = Cluster.objects.select_for_update().get_or_create(
            name=name, defaults={"controller_url": controller_url, "secret_ref": secret_ref}
        )
        before = None if created else _registration(cluster)
        if not created and (cluster.controller_url, cluster.secret_ref) != (
            controller_url,
            secret_ref,
        ):
            cluster.controller_url = controller_url
            cluster.secret_ref = secret_ref
            cluster.metadata_version = -1  # a new controller: start from full metadata
            cluster.save(update_fields=["controller_url", "secret_ref", "metadata_version"])
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
