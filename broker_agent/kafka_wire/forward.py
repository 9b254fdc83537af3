"""Calls a broker forwards to the controller (as a KRaft broker forwards its admin calls to
the active controller): one signed HTTP call to the simulated controller, its error names
turned into Kafka's error codes."""

from __future__ import annotations

import httpx
import kafka.errors as Errors

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentError

__all__ = ["forward", "kafka_errno"]

#: the controller's error names -> Kafka error codes
_CODES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: Errors.UnknownTopicOrPartitionError.errno,
    ErrorCode.INVALID_PARTITIONS: Errors.InvalidPartitionsError.errno,
    ErrorCode.PARTITIONS_MARKED_FOR_DELETION: Errors.InvalidPartitionsError.errno,
    ErrorCode.INVALID_REPLICATION_FACTOR: Errors.InvalidReplicationFactorError.errno,
    ErrorCode.INVALID_REQUEST: Errors.InvalidRequestError.errno,
    ErrorCode.ELECTION_NOT_NEEDED: Errors.ElectionNotNeededError.errno,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: Errors.PreferredLeaderNotAvailableError.errno,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: Errors.EligibleLeadersNotAvailableError.errno,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: Errors.InvalidReplicationAssignmentError.errno,
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: Errors.NoReassignmentInProgressError.errno,
}


def kafka_errno(error: str | None) -> int:
    """Kafka's error code for a controller error name (``None``: no error)."""
    if error is None:
        return 0
    return _CODES.get(error, Errors.UnknownError.errno)


def forward(broker, method: str, path: str, body: dict) -> tuple[int, str | None, dict]:
    """One call to the controller: ``(kafka error code, message, answer)``."""
    try:
        return 0, None, broker.controller.request(method, path, body=body, retries=1, timeout=30)
    except AgentError as exc:
        return kafka_errno(exc.error), exc.message or None, {}
    except httpx.HTTPError as exc:
        return Errors.RequestTimedOutError.errno, f"the controller did not answer: {exc}", {}
