"""``GET /api/v1/health``: no login, JSON, 200 only when database, Redis and a worker answer."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_health_without_workers_is_503_and_names_each_part(client, settings):
    # No worker listens on the test Redis database here: the worker fixture is module-scoped.
    response = client.get("/api/v1/health")
    assert response.status_code == 503
    body = response.json()
    assert set(body) == {"status", "database", "redis", "workers", "version"}
    assert body["database"] == "ok" and body["redis"] == "ok" and body["workers"] == 0
    assert body["status"] == "unavailable"


@pytest.mark.django_db
def test_health_reports_redis_down_without_a_traceback(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/api/v1/health")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error")
