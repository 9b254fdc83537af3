"""A real Celery worker process executes a task sent through Redis and writes to PostgreSQL,
and writes its heartbeat row, from which health counts it."""

from __future__ import annotations

import time

import pytest

from console.models import Heartbeat
from console.tasks import heartbeat

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_worker_process_runs_task_through_redis_and_writes_postgres(celery_worker_process):
    result = heartbeat.delay("integration-test")
    assert result.get(timeout=30) == 1  # executed by the worker process, answered through Redis
    row = Heartbeat.objects.get(name="integration-test")
    assert row.count == 1 and row.hostname
    heartbeat.delay("integration-test").get(timeout=30)
    row.refresh_from_db()
    assert row.count == 2


def test_health_is_200_with_a_worker(client, celery_worker_process):
    deadline = time.monotonic() + 20
    while True:
        response = client.get("/api/v1/health")
        if response.status_code == 200 or time.monotonic() > deadline:
            break
    assert response.status_code == 200
    assert response.json()["workers"] >= 1
    assert response.json()["status"] == "ok"
    # Counted from the worker's own heartbeat row (never a broadcast ping).
    assert Heartbeat.objects.filter(name__startswith="worker:test-").exists()
