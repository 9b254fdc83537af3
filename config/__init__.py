"""Strata's Django project: settings, URLs, the Celery app and the ASGI/WSGI entry points.

The version is ``settings.STRATA_VERSION`` (one place; the apps read settings, never this
package, which sits above them in the import contract)."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
