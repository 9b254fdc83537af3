"""``GET /api/v1/health``: no login, JSON, 200 only when the database and Redis answer and a
worker's heartbeat row is fresh. It reads the row: it never broadcasts to the workers."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.utils import timezone

from config.celery import app as celery_app
from console.health import WORKER_HEARTBEAT_PREFIX
from console.models import Heartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_worker_rows():
    """Start from no worker heartbeat (a worker of another module may have left one)."""
    Heartbeat.objects.filter(name__startswith=WORKER_HEARTBEAT_PREFIX).delete()


@pytest.fixture
def no_broadcast():
    """Any broadcast to the workers fails the test."""
    with (
        mock.patch.object(celery_app.control, "ping", side_effect=AssertionError("ping")) as ping,
        mock.patch.object(celery_app.control, "broadcast", side_effect=AssertionError("bcast")),
    ):
        yield ping


def worker_row(age: dt.timedelta, node: str = "celery@host-1") -> Heartbeat:
    return Heartbeat.objects.create(
        name=f"{WORKER_HEARTBEAT_PREFIX}{node}", beat_at=timezone.now() - age, hostname="host-1"
    )


def test_health_without_workers_is_503_and_names_each_part(client, no_broadcast):
    response = client.get("/api/v1/health")
    assert response.status_code == 503
    body = response.json()
    assert set(body) == {
        "status",
        "database",
        "redis",
        "workers",
        "object_store",
        "warnings",
        "clusters",
        "version",
    }
    assert body["database"] == "ok" and body["redis"] == "ok" and body["workers"] == 0
    assert body["status"] == "unavailable"
    no_broadcast.assert_not_called()


def test_health_is_ok_from_a_fresh_worker_heartbeat_row_without_a_broadcast(client, no_broadcast):
    worker_row(dt.timedelta(seconds=5))
    worker_row(dt.timedelta(seconds=1), node="celery@host-2")
    response = client.get("/api/v1/health")
    assert response.status_code == 200
    assert response.json()["workers"] == 2 and response.json()["status"] == "ok"
    no_broadcast.assert_not_called()


def test_health_is_503_when_the_worker_heartbeat_is_older_than_the_threshold(
    client, settings, no_broadcast
):
    settings.STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS = 60
    worker_row(dt.timedelta(seconds=61))
    response = client.get("/api/v1/health")
    assert response.status_code == 503 and response.json()["workers"] == 0
    settings.STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS = 120
    assert client.get("/api/v1/health").status_code == 200


def test_the_beat_heartbeat_is_not_a_worker(client, no_broadcast):
    Heartbeat.objects.create(name="beat", beat_at=timezone.now(), hostname="host-1")
    assert client.get("/api/v1/health").status_code == 503


def test_the_overview_status_panel_reads_the_row_without_a_broadcast(client, viewer, no_broadcast):
    worker_row(dt.timedelta(seconds=5))
    client.force_login(viewer)
    response = client.get("/status/")
    assert response.status_code == 200
    assert "<dt>Celery workers</dt>" in response.content.decode()
    assert response.context["health"].workers == 1
    no_broadcast.assert_not_called()


def test_health_reports_redis_down_without_a_traceback(client, settings):
    worker_row(dt.timedelta(seconds=5))
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/api/v1/health")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error")
