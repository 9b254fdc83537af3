"""``disable_tiering`` end to end through the API, with a real worker and the simulated
cluster's real processes (KIP-950 disablement: retain and delete), and its refusals: bad fields
at once (400), the KIP's refusals by the worker's planning (state ``refused``)."""

from __future__ import annotations

import json
import secrets

import pytest

from audit.models import AuditEvent
from audit.trail import verify_chain
from broker_agent.contract.choices import RemoteSegmentState, TieredState
from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location
from broker_agent.simulator.remote import METADATA_DIR
from console.models import Partition
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from tests import s3util
from workflows.choices import StepState, WorkflowState
from workflows.kinds import size_text
from workflows.kinds.tiering import TieringAction
from workflows.models import Workflow, WorkflowStep

from .conftest import wait_for
from .tiering_sim import (
    CLUSTER,
    acks_per_broker,
    register,
    request_outcome,
    request_planned,
    sim_cluster,
    state_of,
    sync,
    tiered_topic,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    # external expiration: the Spark purge job, not the agents, deletes fenced segments
    with sim_cluster(tmp_path_factory.mktemp("sim") / "data", "--expiration", "external") as s:
        yield s


@pytest.fixture(scope="module")
def worker(workflow_worker):
    return workflow_worker()


@pytest.fixture
def lab(sim, settings, tmp_path):
    settings.SPARK_WORK_DIR = tmp_path / "spark"
    register(sim)
    return sim


def _body(**fields):
    return {"kind": "disable_tiering", "cluster": CLUSTER, **fields}


def _request(api, user, **fields):
    """Request, then wait for the worker's plan: the workflow as ``GET`` shows it."""
    return request_planned(api, user, _body(**fields))


def test_bad_requests_are_refused_with_their_kip_codes_and_change_nothing(
    lab, api, operator, worker
):
    sim = lab
    tiered_topic(sim, "refusals", partitions=1, records=50)
    sim.cli("create-topic", "plain", "--partitions", "1", "--replication-factor", "1")
    tiered_topic(sim, "busy", partitions=1, records=50)
    sim.controller.start_disable("busy", policy="retain")  # left DISABLING by someone else
    sync()
    epochs = {t: sim.controller.topic(t).tiered_epoch for t in ("refusals", "busy")}

    # bad fields are refused at once; what the cluster's state refuses, by the worker's planning
    cases = [
        ({"topic": "refusals", "policy": "shred"}, 400, "INVALID_REQUEST"),
        ({"topic": "no-such-topic"}, "refused", "INVALID_REQUEST"),
        ({"topic": "plain"}, "refused", "INVALID_REQUEST"),  # not tiered
        ({"topic": "refusals", "broker": 1}, 400, "INVALID_REQUEST"),  # field it does not take
        # in progress with retain: a request with another policy cannot take it over
        (
            {"topic": "busy", "policy": "delete"},
            "refused",
            "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS",
        ),
        ({"topic": "refusals", "cluster": "nowhere"}, 400, "INVALID_REQUEST"),
    ]
    for fields, status, code in cases:
        outcome = request_outcome(api, operator, _body(**fields))
        assert outcome == (status, code), (fields, outcome)
    # nothing was created but the three refused workflows, which hold no step
    assert sorted(Workflow.objects.values_list("target", "state")) == [
        ("topic:busy", WorkflowState.REFUSED),
        ("topic:no-such-topic", WorkflowState.REFUSED),
        ("topic:plain", WorkflowState.REFUSED),
    ]
    assert not WorkflowStep.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="tiering.").exists()
    assert {t: sim.controller.topic(t).tiered_epoch for t in epochs} == epochs
    assert sim.controller.topic("refusals").tiered_state == TieredState.ENABLED


def test_retain_disables_on_every_broker_once_and_keeps_remote_data_readable(
    lab, api, operator, approver, worker
):
    sim = lab
    tiered_topic(sim, "orders", partitions=3)
    leader = sim.partition("orders", 0).leader
    wait_until(
        lambda: sim.replica(leader, "orders", 0).local_log_start_offset > 0,
        30,
        what="local retention to trim what was tiered",
    )
    sync()
    created = _request(api, operator, topic="orders", reason="cost")
    plan, info = created["plan"], created["plan_information"]
    assert created["state"] == WorkflowState.PENDING_APPROVAL and created["approvals_required"] == 1
    assert plan["brokers"] == [1, 2, 3] and plan["policy"] == "retain"
    assert (plan["tiered_epoch"], plan["new_tiered_epoch"]) == (0, 1)
    # the figures that move with traffic are information, exact as of the last sync
    inventory = Partition.objects.filter(topic__cluster__name=CLUSTER, topic__name="orders")
    assert info["remote_segments"] == sum(p.remote_segments for p in inventory) > 0
    assert info["remote_bytes"] == sum(p.remote_bytes for p in inventory) > 0
    assert created["plan_information_at"] is not None
    growth = plan["disk_growth"]  # which dirs fit is an action
    assert growth["all_fit"] and all(d["fits"] for d in growth["log_dirs"])
    assert {(d["broker"]) for d in growth["log_dirs"]} == {1, 2, 3}
    assert sum(d["replicas"] for d in growth["log_dirs"]) == 9  # 3 partitions x RF 3
    projected = info["disk_growth"]  # how many bytes is information
    assert "KIP-950" in projected["method"] and projected["all_fit"]
    assert [(d["broker"], d["log_dir"]) for d in projected["log_dirs"]] == [
        (d["broker"], d["log_dir"]) for d in growth["log_dirs"]
    ]
    assert all(0 < d["projected_growth_bytes"] <= d["usable_bytes"] for d in projected["log_dirs"])

    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: state_of(created["id"]) in WorkflowState.TERMINAL, 90, "the workflow to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    assert [(s["name"], s["broker"]) for s in body["steps"]] == [
        ("start_disablement", None),
        ("disable_remote_topic", 1),
        ("disable_remote_topic", 2),
        ("disable_remote_topic", 3),
        ("complete_disablement", None),
    ]
    assert all(s["state"] == StepState.SUCCEEDED for s in body["steps"])

    topic = sim.controller.topic("orders")
    assert (topic.tiered_state, topic.tiered_epoch, topic.disable_policy) == (
        TieredState.DISABLED,
        1,
        "retain",
    )
    assert sorted(topic.tiering_acks) == [1, 2, 3]
    assert acks_per_broker(created["id"], TieringAction.DISABLE_REMOTE_TOPIC) == {1: 1, 2: 1, 3: 1}
    # retain: remote segments stay readable from the log start offset
    fetched = sim.agent(leader).fetch("orders", 0, 0, max_records=10)
    assert fetched.records and fetched.records[0].offset == 0 and fetched.remote_records > 0
    # the console was synced by the last step: a new disable is refused as not tiered any more
    again = _request(api, operator, topic="orders")
    assert again["state"] == WorkflowState.REFUSED, again
    assert again["error"]["code"] == "INVALID_REQUEST" and "DISABLED" in again["error"]["message"]
    assert verify_chain().ok


def test_a_disablement_left_disabling_with_no_driver_is_taken_over_and_driven_on(
    lab, api, client, operator, approver, worker
):
    """KIP-950 fidelity (#14 gap 2): a topic left DISABLING with no live workflow (started by
    AlterConfigs through the controller API; one broker acknowledged) shows "no driver" on its
    page, with the action; the disable request with its policy takes it over at its epoch: no
    second increment, DisableRemoteTopic to the brokers, DISABLED."""
    sim = lab
    tiered_topic(sim, "stuck", partitions=2, records=100)
    t = sim.controller.alter_configs("stuck", {"remote.storage.enable": "false"})
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("DISABLING", 1, "retain")
    sim.agent(1).disable_remote_topic("stuck", t.topic_id, 1, "retain")
    sync()
    client.force_login(operator)
    page = client.get(f"/topics/{CLUSTER}/stuck/").content.decode()
    assert 'id="tiering-driver" hx-get="/workflows/driver/?cluster=' in page
    driver = client.get(f"/workflows/driver/?cluster={CLUSTER}&topic=stuck").content.decode()
    assert 'data-testid="no-driver"' in driver and "acknowledged so far: 1" in driver
    assert "kind=disable_tiering" in driver and "policy=retain" in driver

    created = _request(api, operator, topic="stuck")  # policy retain, as the topic's
    plan = created["plan"]
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert plan["adopt"] is True and (plan["tiered_epoch"], plan["new_tiered_epoch"]) == (0, 1)
    assert created["plan_information"]["acknowledged_by"] == [1]
    driven = client.get(f"/workflows/driver/?cluster={CLUSTER}&topic=stuck").content.decode()
    assert f"workflow #{created['id']}" in driven and "no-driver" not in driven
    approve_page = client.get(f"/workflows/{created['id']}/").content.decode()
    assert "Take over the disablement in progress" in approve_page

    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: state_of(created["id"]) in WorkflowState.TERMINAL, 90, "the workflow to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    topic = sim.controller.topic("stuck")
    assert (topic.tiered_state, topic.tiered_epoch) == (TieredState.DISABLED, 1)  # no 2nd epoch
    assert sorted(topic.tiering_acks) == [1, 2, 3]
    events = AuditEvent.objects.filter(workflow_id=created["id"], action__startswith="tiering.")
    actions = list(events.values_list("action", flat=True))
    assert actions.count(TieringAction.ADOPT_DISABLEMENT) == 1
    assert TieringAction.START_DISABLEMENT not in actions
    assert actions.count(TieringAction.COMPLETE_DISABLEMENT) == 1
    assert verify_chain().ok


def test_delete_needs_two_approvers_and_runs_the_spark_purge_to_the_end(
    lab, api, client, operator, approver, second_approver, worker
):
    sim = lab
    tiered_topic(sim, "clicks", partitions=1, records=300)
    before = remote_segments_of(sim, "clicks")
    assert before
    sync()
    created = _request(api, operator, topic="clicks", policy="delete")
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    assert created["approvals_required"] == 2 and "purge" in created["plan"]["effect"]
    # the approver decides from the approve page alone: the plan review names the brokers, the
    # epoch change and, in red, the segments and bytes that become unreadable at once
    info = created["plan_information"]
    destructive = [r for r in created["plan_summary"] if r["destructive"]]
    assert len(destructive) == 1 and "unreadable" in destructive[0]["what"]
    assert destructive[0]["size"].startswith(f"{info['remote_segments']} remote segments, ")
    client.force_login(approver)
    html = client.get(f"/workflows/{created['id']}/approve/").content.decode()
    review = html[html.index('data-testid="plan-review"') : html.index("</table>")]
    assert "brokers 1 (1 replica), 2 (1 replica), 3 (1 replica)" in review
    assert "ENABLED, tiered epoch 0" in review and "DISABLING, tiered epoch 1" in review
    row = review[review.index('data-testid="plan-destructive"') :]
    assert f"{info['remote_segments']} remote segments, " in row.split("</tr>")[0]
    assert size_text(info["remote_bytes"]) in row.split("</tr>")[0]
    api(approver).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    assert state_of(created["id"]) == WorkflowState.PENDING_APPROVAL
    api(second_approver).post(
        f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]}
    )
    wait_for(lambda: state_of(created["id"]) in WorkflowState.TERMINAL, 240, "the purge to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    purge = body["steps"][-1]
    assert purge["name"] == "purge_remote_segments"
    run = SparkJobRun.objects.get(
        pk=Workflow.objects.get(pk=created["id"]).steps.last().output["spark_run"]
    )
    assert (run.job, run.dry_run, run.state) == (SparkJob.PURGE, False, SparkRunState.SUCCEEDED)
    assert sim.controller.topic("clicks").tiered_state == TieredState.DISABLED
    # every segment tiered below the new epoch is deleted (metadata finished, object gone)
    leader = sim.partition("clicks", 0).leader
    rows = [s for s in sim.agent(leader).inventory("clicks") if s.tiered_epoch < 1]
    assert rows and all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in rows)
    assert not any(_exists(s.object_path) for s in rows)
    assert verify_chain().ok


def test_a_record_outside_the_store_quarantines_its_partition_and_the_purge_cleans_the_rest(
    lab, api, operator, approver, second_approver, worker
):
    """Issue #39: someone wrote a metadata record under ``__remote_log_metadata/`` for partition 0
    naming an object outside the store. The delete-policy disablement still succeeds: its purge
    quarantines partition 0 (nothing of it marked or deleted, the outside object untouched) and
    purges partition 1; the step names the quarantined partition."""
    sim = lab
    tiered_topic(sim, "ledger", partitions=2, records=300)
    victim = _plant_outside_record(sim, "ledger", 0)
    sync()
    created = _request(api, operator, topic="ledger", policy="delete")
    assert created["state"] == WorkflowState.PENDING_APPROVAL, created
    for who in (approver, second_approver):
        api(who).post(f"/workflows/{created['id']}/approve", {"plan_hash": created["plan_hash"]})
    wait_for(lambda: state_of(created["id"]) in WorkflowState.TERMINAL, 400, "the purge to end")
    body = api(operator).get(f"/workflows/{created['id']}").json()
    assert body["state"] == WorkflowState.SUCCEEDED, body
    purge = Workflow.objects.get(pk=created["id"]).steps.get(name="purge_remote_segments")
    assert purge.state == StepState.SUCCEEDED
    assert purge.output["quarantined_partitions"] == ["ledger-0"]
    logged = " ".join(purge.logs.values_list("message", flat=True))
    assert "quarantined 1 partition: ledger-0" in logged
    run = SparkJobRun.objects.get(pk=purge.output["spark_run"])
    assert run.output_summary["quarantined"]["outside_objects"] == 1
    assert AuditEvent.objects.filter(
        action="spark.partitions_quarantined", target_id=str(run.pk)
    ).exists()

    fenced = {p: _fenced(sim, "ledger", p) for p in (0, 1)}
    assert fenced[0] and fenced[1]
    # partition 1 purged: metadata finished, objects gone
    assert all(s.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED for s in fenced[1])
    assert not any(_exists(s.object_path) for s in fenced[1])
    # partition 0 quarantined: nothing marked, nothing deleted, inside the store or out
    assert not any(s.state.startswith("DELETE_SEGMENT") for s in fenced[0])
    assert all(_exists(s.object_path) for s in fenced[0] if s.object_path != victim)
    assert _exists(victim)
    assert verify_chain().ok


def _fenced(sim, topic: str, partition: int) -> list:
    leader = sim.partition(topic, partition).leader
    return [
        s
        for s in sim.agent(leader).inventory(topic)
        if s.partition == partition and s.tiered_epoch < 1
    ]


def _plant_outside_record(sim, topic: str, partition: int) -> str:
    """Copy one of the partition's metadata records under a new segment id, its
    ``object_path`` naming an object (which exists) in a sibling prefix of the cluster's store.
    Returns that object's URI."""
    store = S3Location.parse(json.loads((sim.data / "cluster.json").read_text())["remote_store"])
    client = ObjectStoreConfig.from_env().client()
    prefix = store.key(METADATA_DIR) + "/"
    keys = [
        o["Key"]
        for o in client.list_objects_v2(Bucket=store.bucket, Prefix=prefix).get("Contents", [])
        if o["Key"].split("/")[-3].startswith(f"{topic}-")
        and o["Key"].split("/")[-2] == str(partition)
    ]
    assert keys, f"no metadata record of {topic}-{partition} under {prefix}"
    record = json.loads(client.get_object(Bucket=store.bucket, Key=keys[0])["Body"].read())
    victim = f"{store.uri}-elsewhere/{topic}/victim.log"
    s3util.put(victim, b"not the store's")
    record.update(segment_id=f"planted{secrets.token_hex(8)}", object_path=victim)
    planted = keys[0].rsplit("/", 1)[0] + f"/{record['segment_id']}.json"
    client.put_object(Bucket=store.bucket, Key=planted, Body=json.dumps(record).encode())
    return victim


def remote_segments_of(sim, topic: str) -> list:
    leader = sim.partition(topic, 0).leader
    return list(sim.agent(leader).inventory(topic))


def _exists(object_path: str) -> bool:
    return s3util.exists(object_path)
