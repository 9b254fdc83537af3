"""The DisableRemoteTopic / EnableRemoteTopic fan-out of :mod:`workflows.kinds.tiering` (see its
"Fan-out" decision): the first pending broker's step sends the command to every pending broker,
at most :data:`FANOUT_CONCURRENCY` in flight, each under its own step's idempotency key, and
audits each acknowledgement once as it arrives (those that arrived meanwhile in one
transaction); a later step whose key is acknowledged completes
without sending. An unreachable broker waits (backoff capped at
:data:`UNREACHABLE_RETRY_CAP_SECONDS`)."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from django.db import connection

from audit import targets
from broker_agent.contract.choices import ErrorCode as AgentCode
from broker_agent.contract.client import AgentClient, AgentError
from broker_agent.contract.models import CommandResult
from workflows.kinds import StepResult
from workflows.kinds.cluster_access import agent, agent_at, cluster_secret, known_broker_urls
from workflows.kinds.commands import (
    applied_before,
    applied_keys,
    is_unreachable,
    record_command,
    record_successes,
    unreachable_wait,
)
from workflows.kinds.tiering_types import DisableParams, DisablePlan, TieringPlan, TopicParams
from workflows.models import WorkflowStep

if TYPE_CHECKING:
    from workflows.steps import StepContext

    #: A step of either tiering kind's fan-out.
    TieringContext = StepContext[TopicParams, TieringPlan]

__all__ = ["FANOUT_CONCURRENCY", "UNREACHABLE_RETRY_CAP_SECONDS", "audit_ack", "broker_command"]

FANOUT_CONCURRENCY = 8
UNREACHABLE_RETRY_CAP_SECONDS = 15.0

log = logging.getLogger(__name__)

#: ``send(broker, key)``: one broker's answer, or None when that broker's own step will retry.
Send = Callable[[int, str], CommandResult | None]
#: What a fan-out does with the other brokers' acknowledgements as they arrive.
OnAcks = Callable[[list[tuple[WorkflowStep, CommandResult]]], None]


def _broker_of(step: WorkflowStep) -> int:
    """The broker of a fan-out step: every Disable/EnableRemoteTopic step is a per-broker one
    (the column is nullable for the cluster-wide steps of other kinds)."""
    if step.broker is None:
        raise ValueError(f"step {step.name} #{step.pk} names no broker")
    return step.broker


def _pending_fan_out(ctx: TieringContext, action: str) -> list[WorkflowStep]:
    """The other pending steps of this fan-out whose broker has not acknowledged yet."""
    pending = WorkflowStep.objects.filter(
        workflow_id=ctx.workflow.pk,
        name=ctx.step.name,
        position__gt=ctx.step.position,
        state="pending",
    ).order_by("position")
    acked = applied_keys(ctx, action, [s.idempotency_key for s in pending])
    return [s for s in pending if s.idempotency_key not in acked]


def _fan_out(ctx: TieringContext, action: str, command: str, on_acks: OnAcks) -> CommandResult:
    """Send this step's command and, concurrently (at most :data:`FANOUT_CONCURRENCY` in
    flight), every other pending broker's command under its own step's idempotency key; the
    other acknowledgements go to ``on_acks([(step, answer), ...])`` as they arrive — those that
    arrived while the last ones were being recorded together. Returns this step's answer (or
    raises its error)."""
    others = _pending_fan_out(ctx, action)
    mine_broker = _broker_of(ctx.step)
    send = _sender(ctx, command, [mine_broker, *(_broker_of(step) for step in others)])
    with concurrent.futures.ThreadPoolExecutor(max_workers=FANOUT_CONCURRENCY) as pool:
        mine = pool.submit(send, mine_broker, ctx.idempotency_key)
        theirs = {
            pool.submit(send, _broker_of(step), step.idempotency_key): step for step in others
        }
        waiting = set(theirs)
        while waiting:
            done, waiting = concurrent.futures.wait(
                waiting, return_when=concurrent.futures.FIRST_COMPLETED
            )
            answers = [
                (theirs[f], f.result()) for f in sorted(done, key=lambda f: theirs[f].position)
            ]
            acks = [(step, answer) for step, answer in answers if answer is not None]
            if acks:
                on_acks(acks)
        answer = mine.result()
        assert answer is not None  # this step's broker's errors are raised, never deferred
        return answer


def _sender(ctx: TieringContext, command: str, brokers: list[int]) -> Send:
    """``send(broker, key)``: the command to one broker. The secret and the agents' URLs are
    read here, once for the fan-out, so that the pool's threads need no database connection
    (at 300 brokers, opening one per send cost more than the sends, #17); a broker the
    inventory does not know yet is looked up the long way."""
    cluster, topic, topic_id = ctx.params.cluster, ctx.params.topic, ctx.plan.topic_id
    # a disablement sends the new epoch (and its policy); an enablement keeps the epoch
    plan, params = ctx.plan, ctx.params
    epoch = plan.new_tiered_epoch if isinstance(plan, DisablePlan) else plan.tiered_epoch
    policy = params.policy if isinstance(params, DisableParams) else None
    _, secret = cluster_secret(cluster)
    urls = known_broker_urls(cluster, brokers)

    def client(broker: int) -> AbstractContextManager[AgentClient]:
        url = urls.get(broker)
        return agent_at(url, secret) if url else agent(cluster, broker)

    def send(broker: int, key: str) -> CommandResult | None:
        try:
            with client(broker) as a:
                if command == "disable":
                    return a.disable_remote_topic(topic, topic_id, epoch, policy, key)
                return a.enable_remote_topic(topic, topic_id, epoch, key)
        except Exception as exc:
            if broker == ctx.step.broker:
                raise
            log.info("fan-out to broker %s deferred to its own step: %s", broker, exc)
            return None
        finally:
            if broker not in urls:
                connection.close()  # the long way ran in a pool thread: close its connection

    return send


def _ack_event(ctx: TieringContext, broker: int, answer: Any, key: str) -> dict[str, Any]:
    return {
        **targets.broker(ctx.params.cluster, broker),
        "before": {"tiered_epoch": ctx.plan.tiered_epoch, "tiered_state": ctx.plan.tiered_state},
        "after": answer,
        "extra": {"topic": ctx.params.topic, "cluster": ctx.params.cluster},
        "key": key,
    }


def audit_ack(ctx: TieringContext, action: str, broker: int, answer: Any, key: str) -> None:
    record_command(ctx, action, **_ack_event(ctx, broker, answer, key))


def broker_command(ctx: TieringContext, command: str, action: str) -> StepResult:
    """One broker's Disable/EnableRemoteTopic step: done at once when an earlier step's fan-out
    already got its acknowledgement; otherwise the fan-out from here (this step's broker and
    every other pending one), with this broker's errors mapped to the step's outcome."""
    broker = _broker_of(ctx.step)
    acked = applied_before(ctx, action)
    if acked is not None:  # acknowledged in an earlier step's fan-out: nothing to send again
        ctx.progress(1, 1, "acks")
        return StepResult.done(acked)

    def on_acks(acks: list[tuple[WorkflowStep, Any]]) -> None:  # sent on their behalf: audited now
        record_successes(
            ctx,
            action,
            [_ack_event(ctx, _broker_of(s), a.model_dump(), s.idempotency_key) for s, a in acks],
        )

    try:
        result = _fan_out(ctx, action, command, on_acks)
    except Exception as exc:
        if isinstance(exc, AgentError) and exc.error == AgentCode.STALE_TIERED_EPOCH:
            return StepResult.fail(
                AgentCode.STALE_TIERED_EPOCH,
                f"broker {broker} fenced the command: {exc.message} (a newer tiering change "
                "overtook this workflow)",
            )
        if is_unreachable(exc):
            return unreachable_wait(ctx, exc, UNREACHABLE_RETRY_CAP_SECONDS)
        if isinstance(exc, AgentError):
            return StepResult.fail(exc.error, f"broker {broker}: {exc.message}")
        raise
    answer = result.model_dump()
    audit_ack(ctx, action, broker, answer, ctx.idempotency_key)
    ctx.progress(1, 1, "acks")
    return StepResult.done(answer)
