"""Console Celery tasks."""

from __future__ import annotations

import socket

from celery import shared_task
from django.db.models import F
from django.utils import timezone

from console.models import Heartbeat


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
