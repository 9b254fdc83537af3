"""Console's part of the JSON API (``/api/v1/``): health for now; the read API joins it."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from console import health

router = Router(tags=["health"])


@router.get("/health", auth=None, summary="Liveness of database, Redis and Celery workers")
def get_health(request: HttpRequest) -> JsonResponse:
    """200 when the database and Redis answer and at least one worker answered a ping, else 503."""
    result = health.check()
    return JsonResponse(result.as_dict(), status=200 if result.ok else 503)


@router.get("/me", summary="Who the token or session belongs to, and their roles")
def get_me(request: HttpRequest) -> dict:
    from console.roles import user_roles

    return {"username": request.user.get_username(), "roles": sorted(user_roles(request.user))}
