"""Celery's delivery guarantees hold for every task Strata registers."""

from __future__ import annotations

from django.conf import settings

from config.celery import app


def _strata_tasks():
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_every_task_has_time_limits_below_the_redis_visibility_timeout():
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    tasks = _strata_tasks()
    assert tasks, "no Strata task registered"
    for name, task in tasks.items():
        hard = task.time_limit or settings.CELERY_TASK_TIME_LIMIT
        soft = task.soft_time_limit or settings.CELERY_TASK_SOFT_TIME_LIMIT
        assert hard and soft, f"{name} has no time limit"
        assert soft < hard, f"{name}: soft limit {soft} is not below the hard limit {hard}"
        assert hard < visibility, f"{name}: hard limit {hard} >= visibility timeout {visibility}"


def test_tasks_acknowledge_late_and_are_requeued_when_a_worker_dies():
    assert settings.CELERY_TASK_ACKS_LATE and settings.CELERY_TASK_REJECT_ON_WORKER_LOST
    for name, task in _strata_tasks().items():
        assert task.acks_late is not False, name
        assert task.reject_on_worker_lost is not False, name
