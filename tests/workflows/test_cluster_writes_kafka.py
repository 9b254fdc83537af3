"""How the ``kafka`` seam (:class:`KafkaWrites`) sorts kafka-python's errors: what makes a step
wait (:class:`Unreachable`) and what is Kafka's refusal (:class:`AgentError`, not retriable).
Found by ``make chaos`` (#36): a broker's config change while that broker is down failed the
log-dir recovery instead of waiting for the broker."""

from __future__ import annotations

import pytest
from kafka import errors as Errors

from broker_agent.contract.client import AgentError
from workflows.kinds.cluster_access import Unreachable
from workflows.kinds.cluster_writes import KafkaWrites
from workflows.kinds.commands import is_unreachable


def _raise(exc: Exception):
    def call():
        raise exc

    return call


@pytest.mark.parametrize(
    "exc",
    [
        Errors.UnknownBrokerIdError(3),  # the broker is down: not in Metadata
        Errors.KafkaConnectionError("refused"),
        Errors.KafkaTimeoutError("no answer"),
        Errors.NodeNotReadyError(3),  # retriable
    ],
)
def test_a_broker_that_cannot_be_reached_makes_the_step_wait(exc):
    with pytest.raises(Unreachable) as raised:
        KafkaWrites._ask(_raise(exc))
    assert is_unreachable(raised.value)


def test_kafkas_refusal_is_not_a_wait():
    with pytest.raises(AgentError) as raised:
        KafkaWrites._ask(_raise(Errors.PolicyViolationError("no")))
    assert not is_unreachable(raised.value)
