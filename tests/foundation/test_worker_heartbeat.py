"""Each Celery worker writes its own heartbeat row, from a thread, and removes it when it stops."""

from __future__ import annotations

import time

import pytest

from console.models import Heartbeat
from console.tasks import WorkerHeartbeat, worker_heartbeat_name

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_the_worker_heartbeat_thread_writes_its_row_repeatedly_and_removes_it_on_stop():
    name = worker_heartbeat_name("celery@unit-test")
    thread = WorkerHeartbeat("celery@unit-test", interval=0.05)
    thread.start()
    try:
        wait_for(lambda: Heartbeat.objects.filter(name=name, count__gte=3).exists(), "3 beats")
    finally:
        thread.stop()
    assert not thread.is_alive()
    assert not Heartbeat.objects.filter(name=name).exists()


def test_worker_heartbeat_rows_are_named_after_the_worker_node():
    assert worker_heartbeat_name("celery@host-1") == "worker:celery@host-1"
