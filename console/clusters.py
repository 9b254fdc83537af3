"""Actions on cluster registrations (Strata configuration, not cluster state)."""

from __future__ import annotations

import re

from django.db import transaction

from console.models import Cluster

__all__ = ["do_register_cluster"]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def do_register_cluster(
    *, name: str, controller_url: str, secret_ref: str, acting_user
) -> tuple[Cluster, bool]:
    """Register ``name`` or update its controller URL and secret reference.

    The registration is a configuration change; the workflows app audits it (a post_save on
    :class:`Cluster`, like its API-token audit). Data already synced is kept on update: the next
    sync reconciles it with whatever the (new) controller says.
    """
    if not NAME_RE.match(name):
        raise ValueError("cluster names use letters, digits, '-' and '_' (at most 100)")
    if not controller_url.startswith(("http://", "https://")):
        raise ValueError("the controller URL must start with http:// or https://")
    with transaction.atomic():
        cluster, created = Cluster.objects.select_for_update().get_or_create(
            name=name, defaults={"controller_url": controller_url, "secret_ref": secret_ref}
        )
        if not created and (cluster.controller_url, cluster.secret_ref) != (
            controller_url,
            secret_ref,
        ):
            cluster.controller_url = controller_url
            cluster.secret_ref = secret_ref
            cluster.metadata_version = -1  # a new controller: start from full metadata
            cluster.save(update_fields=["controller_url", "secret_ref", "metadata_version"])
    return cluster, created
