"""The signed webhook agents push events to (KIP-112 LogDirFailure, its recovery, ...).

``POST /agent-events/<cluster>/`` (or ``/agent-events/`` with the cluster's id in the body),
signed with the cluster's agent secret exactly like agent requests (:mod:`broker_agent.contract.signing`:
timestamp, nonce, HMAC of method, path with query and body's hash). A verified event is stored
once (its ``event_id``) and triggers an immediate sync of the cluster after commit.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import ValidationError

from broker_agent.contract.models import WebhookEvent
from broker_agent.contract.signing import NonceCache, SignatureError, verify_signature
from console.choices import SyncTrigger
from console.models import AgentEvent, Cluster

__all__ = ["agent_events", "do_record_agent_event"]

log = logging.getLogger(__name__)

# Per process: a replay reaching another web worker is still stored once (event_id is unique).
_nonces = NonceCache()


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": code, "message": message}, status=status)


def _find_cluster(name: str | None, body: bytes) -> Cluster | None:
    if name:
        return Cluster.objects.filter(name=name).first()
    try:
        claimed = json.loads(body).get("cluster")
    except (ValueError, AttributeError):
        return None
    if not isinstance(claimed, str):
        return None
    return (
        Cluster.objects.filter(cluster_id=claimed).first()
        or Cluster.objects.filter(name=claimed).first()
    )


def do_record_agent_event(
    cluster: Cluster, event: WebhookEvent, *, acting_user=None
) -> AgentEvent | None:
    """Store ``event`` once and, after commit, sync the cluster now. None for a repeat."""
    from console.tasks import sync_cluster

    try:
        with transaction.atomic():
            row = AgentEvent.objects.create(
                cluster=cluster,
                event_id=event.event_id,
                event=event.event,
                broker_id=event.broker_id,
                log_dir=event.log_dir or "",
                error=event.error or "",
                offline_replicas=event.offline_replicas,
                occurred_at=dt.datetime.fromtimestamp(event.timestamp_ms / 1000, dt.UTC),
            )
            transaction.on_commit(
                lambda: sync_cluster.delay(cluster.pk, trigger=SyncTrigger.WEBHOOK)
            )
    except IntegrityError:
        return None
    return row


@csrf_exempt
@require_POST
def agent_events(request: HttpRequest, cluster: str | None = None) -> JsonResponse:
    body = request.body
    found = _find_cluster(cluster, body)
    if found is None:
        return _error("NOT_FOUND", "Unknown cluster.", 404)
    try:
        secret = found.read_secret()
    except Exception:
        log.exception("cluster %s: cannot read its agent secret", found.name)
        return _error("INTERNAL_ERROR", "The cluster's secret cannot be read.", 500)
    try:
        verify_signature(
            secret,
            request.method,
            request.get_full_path(),
            body,
            request.headers,
            nonce_cache=_nonces,
        )
    except SignatureError as exc:
        log.warning("refused agent event for %s: %s", found.name, exc.code)
        return _error("UNAUTHORIZED", f"{exc.code}: {exc.message}", 401)
    try:
        event = WebhookEvent.model_validate_json(body)
    except ValidationError as exc:
        return _error("INVALID_REQUEST", str(exc.errors()[0].get("msg", "invalid")), 400)
    row = do_record_agent_event(found, event)
    log.info(
        "cluster %s: %s from broker %s (%s)",
        found.name,
        event.event,
        event.broker_id,
        event.log_dir,
    )
    return JsonResponse({"accepted": row is not None, "duplicate": row is None}, status=202)
