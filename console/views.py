"""Console pages (read side)."""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from console import health
from console.models import Heartbeat

BEAT_FRESH = dt.timedelta(minutes=2)


def _system_status_context() -> dict:
    beat = Heartbeat.objects.filter(name="beat").first()
    return {
        "health": health.check(ping_timeout=0.3),
        "checked_at": timezone.now(),
        "beat": beat,
        "beat_fresh": beat is not None and timezone.now() - beat.beat_at < BEAT_FRESH,
    }


def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "console/overview.html", _system_status_context())


def system_status(request: HttpRequest) -> HttpResponse:
    return render(request, "console/partials/system_status.html", _system_status_context())


def _section(request: HttpRequest, heading: str, empty_text: str) -> HttpResponse:
    return render(request, "console/section.html", {"heading": heading, "empty_text": empty_text})


def topics(request: HttpRequest) -> HttpResponse:
    return _section(
        request, "Topics", "No cluster is registered yet: cluster sync is not built yet."
    )


def brokers(request: HttpRequest) -> HttpResponse:
    return _section(
        request, "Brokers & disks", "No cluster is registered yet: cluster sync is not built yet."
    )


def topology(request: HttpRequest) -> HttpResponse:
    return _section(
        request,
        "Partition topology",
        "No cluster is registered yet: cluster sync is not built yet.",
    )
