"""Audited, at-most-once agent and controller commands for workflow steps.

Every command a step sends to a broker agent or the controller is recorded as an audit event
(action, target, before / after, outcome) keyed by the step's idempotency key. The event is the
record that the effect happened: a step that runs again (a worker killed after the effect,
before the engine committed the step) finds it and does not repeat the command.

The one window this cannot close is a kill *between* the command and its audit commit: the
command is then sent again, which is why each command used here is itself idempotent on the
cluster side (cordon and probe of a dir, LogDirReset, removal of an already removed dir, an
unchanged partition count). The exception is ``recover_log_dir``'s produce / consume check: run
again in that window it writes a second, harmless batch of verification records.

A command the agent refuses (an ``AgentError``) is audited with outcome ``failure`` and does
not count as applied.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
from django.db import transaction

from audit import trail
from audit.choices import AuditContext, AuditOutcome
from audit.models import AuditEvent
from broker_agent.client import AgentError
from workflows.errors import ErrorCode
from workflows.kinds import PlanUnavailable, Refusal, StepResult
from workflows.models import Workflow

if TYPE_CHECKING:
    from workflows.engine import StepContext

__all__ = [
    "Unreachable",
    "applied_before",
    "is_unreachable",
    "preflight_reads",
    "record_command",
    "run_command",
    "waits_when_unreachable",
]


def applied_before(ctx: StepContext, action: str, key: str | None = None) -> dict[str, Any] | None:
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


def record_command(
    ctx: StepContext,
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
        Workflow.objects.select_for_update().filter(pk=ctx.workflow.pk).first()
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
            extra={
                **(extra or {}),
                "idempotency_key": key,
                "step": ctx.step.name,
                "attempt": ctx.step.attempts,
            },
        )
    return True


def run_command(
    ctx: StepContext,
    action: str,
    call: Callable[[], dict[str, Any]],
    *,
    target_type: str,
    target_id: str | int,
    before: Callable[[], Any] | Any = None,
) -> tuple[dict[str, Any], bool]:
    """Send ``call()`` unless this step already applied ``action``; audit it.

    Returns ``(after, applied_now)``. A refusal from the agent (:class:`AgentError`) is audited
    with outcome ``failure`` and re-raised for the step to turn into a failure or a retry.
    """
    prior = applied_before(ctx, action)
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
        )
        raise
    record_command(
        ctx, action, target_type=target_type, target_id=target_id, before=state_before, after=after
    )
    return after, True


class Unreachable(Exception):
    """The controller or an agent did not answer (transport error, 5xx, broker not available)."""


def is_unreachable(exc: BaseException) -> bool:
    """A transport error or an agent answer that says "try again later" (5xx, retriable)."""
    return isinstance(exc, httpx.TransportError | Unreachable) or (
        isinstance(exc, AgentError) and exc.status >= 500
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
    except (httpx.HTTPError, AgentError, LookupError, OSError) as exc:
        if isinstance(exc, AgentError) and not (is_unreachable(exc) or exc.retriable):
            raise Refusal(exc.error, exc.message, exc.status if exc.status < 500 else 400) from exc
        raise PlanUnavailable(
            f"the cluster {cluster!r} did not answer the plan's reads: "
            f"{type(exc).__name__}: {str(exc)[:300]}"
        ) from exc


def waits_when_unreachable(
    fn: Callable[[StepContext], StepResult | None], retry_in: float = 5.0
) -> Callable[[StepContext], StepResult | None]:
    """A step that *waits* (visible on the workflow page, retried every ``retry_in`` s) while
    the controller or its broker's agent does not answer, or answers a retriable Kafka error
    (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS ...), instead of burning its retries: the
    engine counts every run of a step as an attempt, so a step that waited a while would
    otherwise fail at its first transient error."""

    @functools.wraps(fn)
    def step(ctx: StepContext) -> StepResult | None:
        try:
            return fn(ctx)
        except (httpx.HTTPError, AgentError, Unreachable) as exc:
            # retriable: 5xx, and Kafka's "refresh metadata and retry" codes (a leader moved)
            if not (is_unreachable(exc) or (isinstance(exc, AgentError) and exc.retriable)):
                raise
            ctx.log(f"unreachable, waiting: {exc}", level="warning")
            return StepResult.wait(f"Waiting for the cluster to answer: {exc}", retry_in=retry_in)

    return step
