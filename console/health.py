"""Liveness of the parts Strata needs: PostgreSQL, Redis and the Celery workers."""

from __future__ import annotations

import dataclasses

import redis
from django.conf import settings
from django.db import connection

import config
from config.celery import app as celery_app

__all__ = ["Health", "check"]


@dataclasses.dataclass(frozen=True)
class Health:
    database: str
    redis: str
    workers: int
    version: str

    @property
    def ok(self) -> bool:
        return self.database == "ok" and self.redis == "ok" and self.workers >= 1

    def as_dict(self) -> dict:
        return {
            "status": "ok" if self.ok else "unavailable",
            "database": self.database,
            "redis": self.redis,
            "workers": self.workers,
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


def _workers(timeout: float) -> int:
    try:
        return len(celery_app.control.ping(timeout=timeout) or [])
    except Exception:
        return 0


def check(ping_timeout: float = 0.5) -> Health:
    redis_state = _redis()
    workers = _workers(ping_timeout) if redis_state == "ok" else 0
    return Health(
        database=_database(), redis=redis_state, workers=workers, version=config.__version__
    )
