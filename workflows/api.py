"""Workflows' part of the JSON API (``/api/v1/``): workflows, approvals, audit."""

from __future__ import annotations

from ninja import Router

router = Router(tags=["workflows"])
