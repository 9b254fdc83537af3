"""Workflow and audit pages (write side)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def workflow_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "console/section.html",
        {"heading": "Workflows", "empty_text": "Workflows are not built yet."},
    )


def audit(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "console/section.html",
        {"heading": "Audit", "empty_text": "The audit log is not built yet."},
    )
