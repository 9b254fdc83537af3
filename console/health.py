"""Liveness of the parts Strata needs: PostgreSQL, Redis, the Celery workers and the object store.

The object store (the remote tier's S3 bucket) is as the workers last probed it
(:class:`console.models.ObjectStoreProbe`, written at each worker heartbeat): ``ok``,
``error: <reason> (since <time>)``, or ``unknown`` when no fresh probe exists. It is shown, not
counted in ``status``: without it the console, the workflows and the brokers' local logs still
work, and the brokers keep their segments until the store answers again.

Workers are counted from their heartbeat rows (``Heartbeat`` named ``worker:<node name>``, written
by each worker every ``STRATA_WORKER_HEARTBEAT_SECONDS``, see :mod:`console.tasks`): a worker is
up when its row is at most ``STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS`` old. A health check is two
cheap queries and a Redis PING; it never broadcasts to the workers (``control.ping`` held a web
thread for up to half a second on every call, and the overview polls every 5 s per browser).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.models import Heartbeat, ObjectStoreProbe

__all__ = ["WORKER_HEARTBEAT_PREFIX", "Health", "check", "worker_max_age"]


@dataclasses.dataclass(frozen=True)
class Health:
    database: str
    redis: str
    workers: int
    version: str
    object_store: str = "unknown"
    #: the store's own words (may name the endpoint): for signed-in pages, not the public JSON
    object_store_detail: str = ""

    @property
    def ok(self) -> bool:
        return self.database == "ok" and self.redis == "ok" and self.workers >= 1

    def as_dict(self) -> dict:
        return {
            "status": "ok" if self.ok else "unavailable",
            "database": self.database,
            "redis": self.redis,
            "workers": self.workers,
            "object_store": self.object_store,
            "version": self.version,
        }


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # reported, never raised: health must answer
        return f"error: {type(exc).__name__}"


def _redis() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
        )
        client.ping()
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}"


WORKER_HEARTBEAT_PREFIX = "worker:"


def worker_max_age() -> dt.timedelta:
    return dt.timedelta(seconds=settings.STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS)


def _workers() -> int:
    """Workers whose heartbeat row is fresh."""
    try:
        return Heartbeat.objects.filter(
            name__startswith=WORKER_HEARTBEAT_PREFIX, beat_at__gte=timezone.now() - worker_max_age()
        ).count()
    except Exception:  # the database is down: reported by ``database``
        return 0


def _object_store() -> tuple[str, str]:
    """(state, detail) from the freshest probe a worker wrote, if at most a worker max age old.
    The state names the error's code only (public health must not show endpoints)."""
    try:
        row = (
            ObjectStoreProbe.objects.filter(checked_at__gte=timezone.now() - worker_max_age())
            .order_by("-checked_at")
            .first()
        )
    except Exception:  # the database is down: reported by ``database``
        return "unknown", ""
    if row is None:
        return "unknown", "no worker has probed the object store lately"
    if row.ok:
        return "ok", f"{row.store} at {row.endpoint}"
    since = f" (since {row.failing_since:%Y-%m-%d %H:%M:%S} UTC)" if row.failing_since else ""
    code = row.error.split(":", 1)[0].strip() or "error"
    return f"error: {code}{since}", f"{row.store} at {row.endpoint}: {row.error}"


def check() -> Health:
    database = _database()
    redis_state = _redis()
    # A worker without Redis receives no task, whatever its heartbeat says.
    workers = _workers() if database == "ok" and redis_state == "ok" else 0
    store, store_detail = _object_store() if database == "ok" else ("unknown", "")
    return Health(
        database=database,
        redis=redis_state,
        workers=workers,
        version=settings.STRATA_VERSION,
        object_store=store,
        object_store_detail=store_detail,
    )
