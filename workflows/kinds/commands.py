"""Audited, at-most-once agent and controller commands for workflow steps.

Each command is recorded as an audit event keyed by the step's idempotency key; a step run again
(a worker killed after the effect) finds it and does not repeat the command. A kill between the
command and its audit commit re-sends it, so every command used here is idempotent on the
cluster side; the only exception, ``recover_log_dir``'s verification produce, writes a second,
harmless batch. A refused command (``AgentError``) is audited as ``failure``, not applied.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
from django.db import transaction

from audit import trail
from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent
from broker_agent.contract.client import AgentError
from workflows.errors import ErrorCode
from workflows.kinds import AnyContext, PlanUnavailable, Refusal, StepResult
from workflows.kinds.cluster_access import Unreachable
from workflows.models import Workflow

__all__ = [
    "Unreachable",
    "applied_before",
    "applied_keys",
    "is_unreachable",
    "preflight_reads",
    "record_command",
    "record_successes",
    "run_command",
    "sync_console",
    "unreachable_wait",
    "waits_when_unreachable",
]


def applied_before(ctx: AnyContext, action: str, key: str | None = None) -> dict[str, Any] | None:
    """The ``after`` of the successful ``action`` under ``key`` (default: this step's
    idempotency key), if it was already applied."""
    row = (
        AuditEvent.objects.filter(
            action=action,
            workflow=ctx.workflow,
            outcome=AuditOutcome.SUCCESS,
            extra__idempotency_key=key or ctx.idempotency_key,
        )
        .values("after")
        .first()
    )
    return None if row is None else (row["after"] or {})


def applied_keys(ctx: AnyContext, action: str, keys: list[str]) -> set[str]:
    """Which of ``keys`` already have a successful ``action`` recorded in this workflow."""
    return set(
        AuditEvent.objects.filter(
            action=action,
            workflow=ctx.workflow,
            outcome=AuditOutcome.SUCCESS,
            extra__idempotency_key__in=keys,
        ).values_list("extra__idempotency_key", flat=True)
    )


def record_command(
    ctx: AnyContext,
    action: str,
    *,
    target_type: str,
    target_id: str | int,
    before: Any = None,
    after: Any = None,
    outcome: str = AuditOutcome.SUCCESS,
    extra: dict[str, Any] | None = None,
    key: str | None = None,
) -> bool:
    """Audit one command a step sent — the one helper every workflow command goes through.

    Keyed by ``key`` (default: the step's idempotency key; a command sent on behalf of another
    step, e.g. a fan-out or a re-send, passes that command's own key): a success is recorded
    once per key, whatever the number of attempts; failures are recorded each time. Returns
    True when it wrote an event."""
    key = key or ctx.idempotency_key
    with transaction.atomic():
        # The workflow row lock serialises two runs of the same step (a zombie and its successor).
        # Only the lock: the row's plan is read once per run, not once per command (at 300
        # brokers the plan and its information are 200 KB of JSON, #17).
        Workflow.objects.select_for_update().filter(pk=ctx.workflow.pk).values_list(
            "pk", flat=True
        ).first()
        if outcome == AuditOutcome.SUCCESS and applied_before(ctx, action, key) is not None:
            return False
        trail.record(
            action,
            actor=None,
            context=AuditContext.WORKER,
            target_type=target_type,
            target_id=target_id,
            workflow=ctx.workflow,
            before=before,
            after=after,
            outcome=outcome,
            extra=_command_extra(ctx, extra, key),
        )
    return True


def _command_extra(ctx: AnyContext, extra: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """A command event's ``extra``: the caller's, with the command's key, step and attempt."""
    return {
        **(extra or {}),
        "idempotency_key": key,
        "step": ctx.step.name,
        "attempt": ctx.step.attempts,
    }


def record_successes(ctx: AnyContext, action: str, commands: list[dict[str, Any]]) -> int:
    """Audit several successful commands sent on behalf of other steps (a fan-out's
    acknowledgements as they arrive) in one transaction: each, like :func:`record_command`,
    once per its ``key``. Each command is a dict of ``target_type``, ``target_id``,
    ``before``, ``after``, ``extra`` and ``key``. Returns how many events it wrote.

    One transaction, one lock and one look-up for the batch instead of one each per command: at
    300 brokers the acknowledgements of a fan-out were 300 transactions (#17)."""
    if not commands:
        return 0
    with transaction.atomic():
        Workflow.objects.select_for_update().filter(pk=ctx.workflow.pk).values_list(
            "pk", flat=True
        ).first()
        done = applied_keys(ctx, action, [c["key"] for c in commands])
        events = []
        for c in commands:
            if c["key"] in done:
                continue
            done.add(c["key"])
            events.append(
                {
                    "action": action,
                    "actor": None,
                    "context": AuditContext.WORKER,
                    "target_type": c["target_type"],
                    "target_id": c["target_id"],
                    "workflow": ctx.workflow,
                    "before": c.get("before"),
                    "after": c.get("after"),
                    "outcome": AuditOutcome.SUCCESS,
                    "extra": _command_extra(ctx, c.get("extra"), c["key"]),
                }
            )
        written = len(trail.record_many(events))
    return written


def run_command(
    ctx: AnyContext,
    action: str,
    call: Callable[[], dict[str, Any]],
    *,
    target_type: str,
    target_id: str | int,
    before: Callable[[], Any] | Any = None,
    key: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Send ``call()`` unless this step already applied ``action`` (under ``key``, default the
    step's idempotency key: a step that sends a command again on a later run, e.g. an election
    retried until the preferred replica is back, gives each run its own); audit it.

    Returns ``(after, applied_now)``. A refusal from the agent (:class:`AgentError`) is audited
    with outcome ``failure`` and re-raised for the step to turn into a failure or a retry.
    """
    prior = applied_before(ctx, action, key)
    if prior is not None:
        return prior, False
    state_before = before() if callable(before) else before
    try:
        after = call()
    except AgentError as exc:
        record_command(
            ctx,
            action,
            target_type=target_type,
            target_id=target_id,
            before=state_before,
            after={"error": exc.error, "message": exc.message, "status": exc.status},
            outcome=AuditOutcome.FAILURE,
            key=key,
        )
        raise
    record_command(
        ctx,
        action,
        target_type=target_type,
        target_id=target_id,
        before=state_before,
        after=after,
        key=key,
    )
    return after, True


def is_unreachable(exc: BaseException) -> bool:
    """The one rule for "wait and try again" (never a failure, never a refusal): a transport
    error, an OS error, :class:`Unreachable` (also a broker the controller does not list), or an
    agent's answer that says try later — 5xx, or a retriable Kafka code (NOT_LEADER_OR_FOLLOWER,
    NOT_ENOUGH_REPLICAS ...)."""
    if isinstance(exc, httpx.TransportError | OSError | Unreachable):
        return True
    return isinstance(exc, AgentError) and (exc.status >= 500 or exc.retriable)


def unreachable_wait(
    ctx: AnyContext, exc: BaseException, cap: float = 15.0, who: str | None = None
) -> StepResult:
    """The step waits (shown on the workflow page) and runs again after an exponential
    backoff capped at ``cap`` seconds, without limit: an unreachable broker is the normal case
    of the incidents Strata is used in, and the engine counts every run as an attempt."""
    from workflows.queue import backoff_seconds

    delay = min(backoff_seconds(ctx.step.attempts), cap)
    if who is None:
        who = f"Broker {ctx.step.broker}" if ctx.step.broker is not None else "Cluster"
    ctx.log(f"{who} did not answer: {exc}; retrying in {delay:.1f}s", "warning")
    return StepResult.wait(
        f"{who} unreachable ({type(exc).__name__}: {str(exc)[:200]}); retrying until it answers.",
        retry_in=delay,
    )


@contextlib.contextmanager
def preflight_reads(cluster: str) -> Iterator[None]:
    """Turn what can go wrong while a plan reads the cluster into an outcome the engine knows:
    an unknown cluster is a refusal (``INVALID_REQUEST``), an agent's answer that refuses is a
    refusal with its code, and an unreachable controller or agent (transport error, 5xx) is
    :class:`PlanUnavailable` — the workflow waits and plans again; it is not refused."""
    from console.models import Cluster

    try:
        yield
    except Cluster.DoesNotExist:
        raise Refusal(ErrorCode.INVALID_REQUEST, f"Unknown cluster {cluster!r}.") from None
    except (httpx.HTTPError, AgentError, LookupError, OSError, Unreachable) as exc:
        if isinstance(exc, AgentError) and not is_unreachable(exc):
            raise Refusal(exc.error, exc.message, exc.status if exc.status < 500 else 400) from exc
        raise PlanUnavailable(
            f"the cluster {cluster!r} did not answer the plan's reads: "
            f"{type(exc).__name__}: {str(exc)[:300]}"
        ) from exc


C = TypeVar("C", bound=AnyContext)


def waits_when_unreachable(
    fn: Callable[[C], StepResult | None], retry_in: float = 5.0
) -> Callable[[C], StepResult | None]:
    """A step that *waits* (:func:`unreachable_wait`, backoff capped at ``retry_in`` s) while
    :func:`is_unreachable` says so, instead of burning its retries on a transient error."""

    @functools.wraps(fn)
    def step(ctx: C) -> StepResult | None:
        try:
            return fn(ctx)
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            return unreachable_wait(ctx, exc, cap=retry_in)

    return step


def sync_console(ctx: AnyContext) -> None:
    """Best effort: refresh the console's inventory so pages and the next pre-flight see a
    workflow's change (beat syncs later when this fails)."""
    from console.choices import SyncTrigger
    from console.models import Cluster
    from console.sync import do_sync_cluster

    try:
        do_sync_cluster(Cluster.objects.get(name=ctx.params.cluster), trigger=SyncTrigger.COMMAND)
    except Exception as exc:  # the workflow's change is done; beat will sync later
        ctx.log(f"console sync after the change failed: {exc}", "warning")
