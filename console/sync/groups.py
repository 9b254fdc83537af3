"""The sync's step for consumer groups: the controller's group coordinator (committed offsets,
generation, members) into :class:`console.models.GroupOffset`, replaced whole each sync.

Groups change without the metadata version moving (a commit is not metadata), so this runs on
every sync whose controller answered. A controller without a coordinator (the synthetic scale
mode) answers 404 and the cluster simply has no groups. A failure here is recorded as the
``groups`` error of the run and leaves the previous rows in place.
"""

from __future__ import annotations

import logging

from django.db import transaction

from console.models import GroupOffset
from console.sync.common import error_text

__all__ = ["GroupSync"]

log = logging.getLogger("console.sync")


class GroupSync:
    def sync_groups(self) -> None:
        reader = getattr(self.source, "groups", None)
        if reader is None or not self.run_stats["controller_ok"]:
            return
        try:
            views = reader()
        except Exception as exc:  # the groups fail alone; the rest of the sync stands
            log.warning("cluster %s: groups failed: %s", self.cluster.name, exc)
            self.errors["groups"] = error_text(exc)
            return
        if views is None:
            return
        rows = [
            GroupOffset(
                cluster=self.cluster,
                group_id=g.group_id,
                topic_name=topic,
                partition=p,
                committed_offset=offset,
                generation=g.generation,
                members=len(g.members),
                synced_at=self.now,
            )
            for g in views
            for topic, parts in g.offsets.items()
            for p, offset in parts.items()
        ]
        with transaction.atomic():
            GroupOffset.objects.filter(cluster=self.cluster).delete()
            GroupOffset.objects.bulk_create(rows, batch_size=2000)
