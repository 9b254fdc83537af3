"""Where ``expand_partitions`` may run on a ``kafka`` cluster (#36), without a cluster: it needs
the brokers' CreatePartitions (learnt by the sync's ApiVersions); ``shrink_partitions`` stays
refused there with the reason (Kafka cannot remove partitions); the request form says so. The
plan and the run against the simulated cluster's Kafka listener: test_expand_partitions_kafka."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from console.models import Cluster
from workflows.actions import preview_plan
from workflows.errors import WorkflowError
from workflows.kinds import get_kind
from workflows.kinds.topology import ExpandPlan
from workflows.kinds.topology_kafka import KafkaExpandPlan

pytestmark = pytest.mark.django_db

BODY = {"cluster": "prod", "topic": "orders", "partitions": 8}


def _kafka(**features) -> Cluster:
    return Cluster.objects.create(
        name="prod", backend="kafka", kafka_bootstrap="kafka-1:9092", backend_features=features
    )


def test_expansion_is_let_through_where_the_brokers_answer_create_partitions(db):
    _kafka(api_versions={"37": [0, 3]})
    assert preview_plan("expand_partitions", BODY).target == "topic:orders"
    with pytest.raises(WorkflowError, match=r"never shipped KIP-253.*cannot be removed"):
        preview_plan("shrink_partitions", BODY)


def test_without_create_partitions_the_expansion_is_refused_with_the_reason(db):
    _kafka(api_versions={"2": [0, 9]})
    with pytest.raises(WorkflowError, match="do not answer CreatePartitions"):
        preview_plan("expand_partitions", BODY)


def test_the_request_form_offers_expansion_not_shrink_on_a_kafka_cluster(client, operator):
    _kafka(api_versions={"37": [0, 3]})
    client.force_login(operator)
    form = client.get("/workflows/new/", {"kind": "expand_partitions", **BODY}).content.decode()
    assert "data-unsupported" not in form and 'data-testid="submit-request"' in form
    shrink = client.get("/workflows/new/", {"kind": "shrink_partitions", **BODY}).content.decode()
    assert "data-unsupported" in shrink and "never shipped KIP-253" in shrink


def test_a_stored_plan_is_read_as_its_backends_type():
    """KIP-253's plans (no ``backend``: every plan before #36) stay ExpandPlan."""
    kind = get_kind("expand_partitions")
    kafka_plan = {
        "summary": "s",
        "backend": "kafka",
        "topic": "orders",
        "partition_count": 2,
        "new_partition_count": 3,
        "replication_factor": 1,
        "new_partitions": [2],
        "placement": "p",
        "key_remapping": "k",
        "ordered_expansion": "unavailable: x",
        "steps": ["create_partitions", "verify_partitions"],
    }
    assert isinstance(kind.read_plan(kafka_plan), KafkaExpandPlan)
    kip253 = {
        "summary": "s",
        "topic": "orders",
        "topic_id": "t",
        "initial_partition_count": 2,
        "undeleted_partition_count": 2,
        "new_undeleted_partition_count": 3,
        "replication_factor": 1,
        "new_partitions": [{"partition": 2, "parent": 0}],
        "split_parents": [0],
        "steps": ["alter_partition_count", "await_new_partitions"],
    }
    assert isinstance(kind.read_plan(kip253), ExpandPlan)
    params = kind.read_params({"cluster": "prod", "topic": "orders", "partitions": 3})
    assert [s.name for s in kind.steps(params, kind.read_plan(kafka_plan))] == kafka_plan["steps"]
    assert [s.name for s in kind.steps(params, kind.read_plan(kip253))] == kip253["steps"]


class _AnswerLost:
    """A kafka cluster's seam (no cluster) whose first CreatePartitions grows the topic but
    whose answer is lost (the connection drops: Unreachable); asked again, it answers Kafka's
    INVALID_PARTITIONS, the topic being at the count already."""

    backend = "kafka"

    def __init__(self, count: int) -> None:
        self.count = count
        self.asked: list[int] = []

    def partitions(self, topic: str) -> dict:
        from workflows.kinds.cluster_writes import PartitionState

        return {
            p: PartitionState(p % 2 + 1, [p % 2 + 1, 2 - p % 2], [1, 2]) for p in range(self.count)
        }

    def live_brokers(self) -> list[int]:
        return [1, 2]

    def create_partitions(self, topic: str, count: int) -> None:
        from broker_agent.contract.client import AgentError
        from workflows.kinds.cluster_access import Unreachable

        self.asked.append(count)
        if count <= self.count:
            raise AgentError(
                400, "INVALID_PARTITIONS", f"Topic already has {self.count} partition(s)."
            )
        self.count = count
        raise Unreachable("Kafka did not answer: KafkaConnectionError")


def test_a_lost_answer_is_asked_again_and_the_topic_at_the_count_is_done(
    operator, approver, monkeypatch
):
    """CreatePartitions applied but its answer lost: the step waits, asks again, and Kafka's
    INVALID_PARTITIONS at the target count is done, the command audited once with that answer;
    then the new partitions are read back led."""
    import contextlib

    from audit.models import AuditEvent
    from tests.workflows.conftest import approve, planned
    from workflows import engine
    from workflows.kinds import topology_kafka
    from workflows.models import Workflow, WorkflowStep

    _kafka(api_versions={"37": [0, 3]})
    cluster = _AnswerLost(2)
    monkeypatch.setattr(topology_kafka, "writes_for", lambda name: contextlib.nullcontext(cluster))
    wf = planned(do_request_workflow_cli(operator, {**BODY, "partitions": 3}))
    assert wf.state == "pending_approval", (wf.error_code, wf.error_message)
    assert wf.plan["new_partitions"] == [2]
    approve(wf, approver)
    engine.run(wf.pk)
    wf.refresh_from_db()
    assert wf.state == "waiting" and cluster.count == 3
    assert not AuditEvent.objects.filter(action=topology_kafka.CREATE_PARTITIONS).exists()
    due = timezone.now() - dt.timedelta(seconds=1)  # its backoff over, as the beat would
    Workflow.objects.filter(pk=wf.pk).update(resume_at=due)
    WorkflowStep.objects.filter(workflow=wf).update(not_before=None)
    engine.run(wf.pk)
    wf.refresh_from_db()
    assert wf.state == "succeeded", (wf.error_code, wf.error_message, wf.waiting_reason)
    assert cluster.asked == [3, 3]
    [sent] = AuditEvent.objects.filter(workflow=wf, action=topology_kafka.CREATE_PARTITIONS)
    assert sent.before == {"backend": "kafka", "partition_count": 3}
    assert sent.after == {
        "partition_count": 3,
        "answer": "INVALID_PARTITIONS: Topic already has 3 partition(s).",
    }
    assert wf.steps.get(name="verify_partitions").output == {"partitions_led": {"2": 1}}


def do_request_workflow_cli(actor, params: dict):
    from audit.choices import AuditContext
    from workflows.actions import do_request_workflow

    return do_request_workflow(
        actor=actor, kind="expand_partitions", params=params, reason="r", context=AuditContext.CLI
    )
