"""Repeated identical denials, counted instead of written one by one.

A refusal changes nothing, so a client repeating it (a retrying script, a fuzzer, a password
guesser) must not grow the tamper-evident log without bound nor take its append lock per call.
:func:`record_denial` writes the first of a kind in a window (``STRATA_AUDIT_DENIAL_WINDOW_SECONDS``)
and counts the rest in Redis; :func:`flush_repeated_denials` writes one event per kind with
``extra.repeats`` once the window closes. Failed sign-ins key on address and reason only, so
rotating user names is bounded too. Nothing is dropped: without Redis every denial is written.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model

from audit.trail import record_standalone

__all__ = ["DENIAL_KEY_PREFIX", "flush_repeated_denials", "record_denial"]

log = logging.getLogger(__name__)

DENIAL_KEY_PREFIX = "strata:audit:denial:"
_PENDING = DENIAL_KEY_PREFIX + "pending"


def _window() -> int:
    return max(1, int(getattr(settings, "STRATA_AUDIT_DENIAL_WINDOW_SECONDS", 60)))


def _client() -> redis.Redis:
    return _client_for(settings.REDIS_URL)


@functools.lru_cache(maxsize=4)
def _client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def _kind_key(
    action: str, actor: Any, actor_name: str, client: str, target: str, error: str
) -> str:
    who = f"user:{actor.pk}" if getattr(actor, "pk", None) else f"name:{actor_name}"
    raw = json.dumps([action, who, client, target, error], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def record_denial(
    action: str,
    *,
    client: str = "",
    error: str = "",
    identity: str = "",
    repeats_of: str = "",
    **record_kwargs: Any,
) -> bool:
    """Audit a denial (``record_kwargs`` as for :func:`audit.trail.record`), or count it when
    an identical one was written less than a window ago. True when an event was written now.

    ``client`` (the remote address) and ``error`` (the refusal's code) take part in what
    "identical" means; ``error`` is not added to ``extra`` (the caller puts it there).
    ``identity``, when given, stands for actor and target in that comparison, and
    ``repeats_of`` then tells the summary's reader what the repeats have in common."""
    actor = record_kwargs.get("actor")
    target = f"{record_kwargs.get('target_type', '')}:{record_kwargs.get('target_id', '')}"
    if identity:
        kind = _kind_key(action, None, identity, client, "", error)
    else:
        kind = _kind_key(action, actor, record_kwargs.get("actor_name", ""), client, target, error)
    window = _window()
    try:
        r = _client()
        opened = r.set(DENIAL_KEY_PREFIX + "open:" + kind, "1", nx=True, ex=window)
        if not opened:
            with r.pipeline(transaction=True) as pipe:
                pipe.incr(DENIAL_KEY_PREFIX + "count:" + kind)
                pipe.sadd(_PENDING, kind)
                pipe.execute()
            return False
    except redis.RedisError as exc:
        log.warning("denial counting unavailable (%s); writing the denial as an event", exc)
        record_standalone(action, **record_kwargs)
        return True
    event = record_standalone(action, **record_kwargs)
    meta = {
        "action": action,
        "actor_id": getattr(actor, "pk", None),
        "actor_name": event.actor_name,
        "context": event.context,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "workflow_id": event.workflow_id,
        "outcome": event.outcome,
        "extra": event.extra,
        "first_seq": event.seq,
        "repeats_of": repeats_of,
    }
    try:
        r.set(DENIAL_KEY_PREFIX + "meta:" + kind, json.dumps(meta, default=str), ex=window * 30)
    except redis.RedisError as exc:  # the count still flushes, with what the key can tell
        log.warning("denial metadata not kept (%s)", exc)
    return True


def flush_repeated_denials() -> int:
    """Write one event per kind whose window has closed and that counted repeats. Returns the
    number of events written. Safe to run concurrently: a count is taken (GETDEL) once."""
    window = _window()
    r = _client()
    written = 0
    for raw in r.smembers(_PENDING):
        kind = raw.decode() if isinstance(raw, bytes) else raw  # redis-py types either
        if r.exists(DENIAL_KEY_PREFIX + "open:" + kind):
            continue  # its window is still open; repeats keep counting
        with r.pipeline(transaction=True) as pipe:
            pipe.get(DENIAL_KEY_PREFIX + "count:" + kind)
            pipe.delete(DENIAL_KEY_PREFIX + "count:" + kind)
            pipe.srem(_PENDING, kind)
            pipe.get(DENIAL_KEY_PREFIX + "meta:" + kind)
            count, _, _, meta_raw = pipe.execute()
        repeats = int(count or 0)
        if not repeats:
            continue
        meta = json.loads(meta_raw) if meta_raw else {}
        actor = None
        if meta.get("actor_id"):
            actor = get_user_model().objects.filter(pk=meta["actor_id"]).first()
        record_standalone(
            meta.get("action", "audit.denials_repeated"),
            actor=actor,
            actor_name=meta.get("actor_name", "") or "(unknown)",
            context=meta.get("context") or "beat",
            target_type=meta.get("target_type", ""),
            target_id=meta.get("target_id", ""),
            workflow=meta.get("workflow_id"),
            outcome=meta.get("outcome", "denied"),
            extra={
                **(meta.get("extra") or {}),
                "repeats": repeats,
                "window_seconds": window,
                "first_seq": meta.get("first_seq"),
                **({"repeats_of": meta["repeats_of"]} if meta.get("repeats_of") else {}),
            },
        )
        written += 1
    return written
