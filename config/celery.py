"""The Celery application: configured from Django settings (``CELERY_*``), tasks autodiscovered."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("strata")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
