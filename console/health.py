"""Liveness of the parts Strata needs: PostgreSQL, Redis, the Celery workers and the object store.

Workers are counted from their heartbeat rows, never by broadcasting (``control.ping`` held a web
thread up to 0.5 s per call, and the overview polls every 5 s per browser): two queries and a
Redis PING. The object store is shown as the workers last probed it, not counted in ``status``:
without it the console and the brokers' local logs still work. Warnings come from apps above
this one through :func:`register_warning_source` (this app cannot import them). The JSON is
public, so clusters' errors appear by code and warnings name counts, never topics.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.models import Cluster, Heartbeat, ObjectStoreProbe

__all__ = [
    "WORKER_HEARTBEAT_PREFIX",
    "Health",
    "check",
    "register_warning_source",
    "worker_max_age",
]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Health:
    database: str
    redis: str
    workers: int
    version: str
    object_store: str = "unknown"
    #: the store's own words (may name the endpoint): for signed-in pages, not the public JSON
    object_store_detail: str = ""
    #: what needs an operator without making Strata unavailable (see the module doc)
    warnings: tuple[str, ...] = ()
    #: each cluster's backend and how its last sync went (see :func:`_clusters`)
    clusters: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

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
            "warnings": list(self.warnings),
            "clusters": self.clusters,
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


_WARNING_SOURCES: list[Callable[[], list[str]]] = []


def register_warning_source(source: Callable[[], list[str]]) -> None:
    """Add ``source`` (no arguments, returns public warning strings) to every health check;
    registering it again changes nothing."""
    if source not in _WARNING_SOURCES:
        _WARNING_SOURCES.append(source)


def _warnings() -> tuple[str, ...]:
    found: list[str] = []
    for source in _WARNING_SOURCES:
        try:
            found += source()
        except Exception:  # a warning source must never break health
            log.warning("health warning source %r failed", source, exc_info=True)
    return tuple(found)


def _clusters() -> dict[str, dict[str, str]]:
    """Per cluster its backend and ``sync``: ``ok``, ``not synced yet``, or the error of its
    source named by backend and its code only, e.g. ``Kafka bootstrap error:
    KafkaConnectionError (since ...)`` (the full message, which may name hosts, is on the
    cluster's page). One query; shown, not counted in ``status``."""
    out = {}
    try:
        rows = list(
            Cluster.objects.only(
                "name", "backend", "synced_at", "controller_error", "controller_error_at"
            )
        )
    except Exception:  # the database is down: reported by ``database``
        return {}
    for c in rows:
        if c.controller_error:
            code = c.controller_error.split(":", 1)[0].strip() or "error"
            since = (
                f" (since {c.controller_error_at:%Y-%m-%d %H:%M:%S} UTC)"
                if (c.controller_error_at)
                else ""
            )
            sync = f"{c.sync_error_label} error: {code}{since}"
        else:
            sync = "ok" if c.synced_at else "not synced yet"
        out[c.name] = {"backend": c.backend, "sync": sync}
    return out


def check(*, clusters: bool = False) -> Health:
    """``clusters``: list each cluster's sync (``/api/v1/health``; the status panel, which shows
    Strata itself, leaves them to the overview's cluster cards)."""
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
        warnings=_warnings() if database == "ok" else (),
        clusters=_clusters() if clusters and database == "ok" else {},
    )
