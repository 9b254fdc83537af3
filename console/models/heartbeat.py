"""Liveness: the beat and worker heartbeats."""

from __future__ import annotations

from django.db import models

__all__ = ["Heartbeat"]


class Heartbeat(models.Model):
    """Last time a named heartbeat was written: ``beat`` by a task beat schedules, and
    ``worker:<node name>`` by each Celery worker (see :mod:`console.tasks`)."""

    name = models.CharField(max_length=100, unique=True)
    beat_at = models.DateTimeField()
    hostname = models.CharField(max_length=255, blank=True)
    count = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at:%Y-%m-%d %H:%M:%S}"
