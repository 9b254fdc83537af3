"""Console Celery tasks: the beat heartbeat and the cluster sync."""

from __future__ import annotations

import logging
import socket

from celery import shared_task
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from console.choices import SyncTrigger
from console.models import Cluster, Heartbeat

log = logging.getLogger(__name__)


@shared_task(name="console.tasks.heartbeat", soft_time_limit=20, time_limit=30)
def heartbeat(name: str = "beat") -> int:
    """Record that the scheduler and a worker are alive; returns the heartbeat's count.

    Idempotent enough for acks_late: a redelivered heartbeat only bumps the counter again.
    """
    now = timezone.now()
    host = socket.gethostname()
    updated = Heartbeat.objects.filter(name=name).update(
        beat_at=now, hostname=host, count=F("count") + 1
    )
    if not updated:
        Heartbeat.objects.get_or_create(
            name=name, defaults={"beat_at": now, "hostname": host, "count": 1}
        )
    return Heartbeat.objects.values_list("count", flat=True).get(name=name)


@shared_task(name="console.tasks.sync_all_clusters", soft_time_limit=20, time_limit=30)
def sync_all_clusters() -> int:
    """Beat: one ``sync_cluster`` task per registered cluster (they run in parallel).

    Each expires after one interval: a sync still queued when the next beat fires is dropped.
    """
    interval = settings.STRATA_SYNC_INTERVAL_SECONDS
    pks = list(Cluster.objects.values_list("pk", flat=True))
    for pk in pks:
        sync_cluster.apply_async((pk,), {"trigger": SyncTrigger.BEAT}, expires=interval)
    return len(pks)


@shared_task(
    bind=True,
    name="console.tasks.sync_cluster",
    soft_time_limit=240,
    time_limit=300,
    max_retries=20,
)
def sync_cluster(self, cluster_pk: int, trigger: str = SyncTrigger.BEAT, full: bool = False):
    """Sync one cluster. Idempotent (a redelivery syncs again from the versions applied).

    When another sync of the cluster holds the lock, a beat sync gives up (the running one is as
    good) but a webhook sync retries shortly: the event may postdate what the running one read.
    """
    from console.sync import SyncBusy, do_sync_cluster

    cluster = Cluster.objects.filter(pk=cluster_pk).first()
    if cluster is None:
        return None
    try:
        result = do_sync_cluster(cluster, full=full, trigger=trigger)
    except SyncBusy:
        if trigger == SyncTrigger.BEAT:
            return "busy"
        raise self.retry(countdown=0.5) from None
    return {
        "run": result.run.pk,
        "duration_ms": result.run.duration_ms,
        "errors": result.run.errors,
    }
