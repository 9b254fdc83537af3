"""Liveness: the beat and worker heartbeats."""

from __future__ import annotations

from django.db import models

__all__ = ["Heartbeat", "ObjectStoreProbe"]


class Heartbeat(models.Model):
    """Last time a named heartbeat was written: ``beat`` by a task beat schedules, and
    ``worker:<node name>`` by each Celery worker (see :mod:`console.tasks`)."""

    name = models.CharField(max_length=100, unique=True)
    beat_at = models.DateTimeField()
    hostname = models.CharField(max_length=255, blank=True)
    count = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at:%Y-%m-%d %H:%M:%S}"


class ObjectStoreProbe(models.Model):
    """The remote tier's object store as the Celery workers last saw it (``HeadBucket`` on the
    configured bucket at each worker heartbeat, see :mod:`console.tasks`). Health reads this row;
    a web request never calls the store itself. ``failing_since`` is when the current run of
    failures began (null while it answers)."""

    store = models.CharField(max_length=500, unique=True)
    endpoint = models.CharField(max_length=500, blank=True)
    checked_at = models.DateTimeField()
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.store}: {'ok' if self.ok else self.error}"
