"""KIP-950 tiering on the synthetic scale cluster (broker_agent/simulator/synthetic_tiering.py): the real
controller's and agent's paths, codes and transitions, served by the one synthetic process."""

from __future__ import annotations

import json

import pytest

from broker_agent.contract.choices import DisablePolicy, ErrorCode, TieredState, TopicConfig
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.models import SNAPSHOT_TSV_COLUMNS, split_snapshot_tsv

from .conftest import _kill_all, run_cli

pytestmark = pytest.mark.integration

BROKERS = 6
TOPICS = 8  # synthetic.topic-0000 .. -0007; even ones tiered
PPT = 50


class _Syn:
    def __init__(self, data, urls):
        self.data = data
        self.urls = urls
        self.secret = (data / "secret").read_bytes().strip()
        self.ctl = ControllerClient(urls["controller"], self.secret, retries=0)
        self._agents: dict[int, AgentClient] = {}

    def agent(self, b: int) -> AgentClient:
        if b not in self._agents:
            self._agents[b] = AgentClient(self.urls["brokers"][str(b)], self.secret, retries=0)
        return self._agents[b]

    def state(self, topic: str) -> dict:
        """The controller's live tiering state: an ack at an epoch it never had is ignored and
        answers the topic (``TopicMetadata``) unchanged."""
        return self.ctl.ack_disable(topic, 1, 2**31)

    def close(self) -> None:
        self.ctl.close()
        for a in self._agents.values():
            a.close()


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    data = tmp_path_factory.mktemp("syn-tiering")
    s = None
    try:
        out = run_cli(
            data,
            "up",
            "--brokers",
            str(BROKERS),
            "--log-dirs",
            "2",
            "--synthetic-topics",
            str(TOPICS),
            "--partitions-per-topic",
            str(PPT),
            "--synthetic-tick-interval",
            "0",
        )
        s = _Syn(data, json.loads(out.stdout.strip().splitlines()[-1]))
        yield s
    finally:
        if s is not None:
            s.close()
        run_cli(data, "down", check=False)
        _kill_all(data)


def _refused(fn, *args, **kw) -> AgentError:
    with pytest.raises(AgentError) as info:
        fn(*args, **kw)
    return info.value


def test_disable_acks_complete_and_metadata_versions(syn):
    topic = "synthetic.topic-0000"
    md = syn.ctl.metadata()
    t0 = next(t for t in md.topics if t.name == topic)
    assert t0.tiered_state == TieredState.ENABLED and t0.tiered_epoch == 0
    hosts = sorted({r for p in t0.partitions for r in p.replicas})
    assert hosts == list(range(1, BROKERS + 1))

    t = syn.ctl.start_disable(topic, DisablePolicy.RETAIN, expected_tiered_epoch=0)
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("DISABLING", 1, "retain")
    assert t.configs[TopicConfig.REMOTE_STORAGE_ENABLE] == "false"
    assert t.configs[TopicConfig.REMOTE_LOG_DISABLE_POLICY] == "retain"
    assert t.tiering_acks == [] and len(t.partitions) == PPT and t.topic_id == t0.topic_id

    # one new metadata version; an incremental sync is told, and the delta lists the topic
    delta = syn.ctl.metadata(since=md.version, delta=True)
    assert delta.changed and not delta.full and delta.version > md.version
    assert [x.name for x in delta.topics] == [topic]

    # complete before every host acknowledged: INCOMPLETE with the pending brokers
    err = _refused(syn.ctl.complete_disable, topic, 1)
    assert err.status == 409 and err.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_INCOMPLETE
    assert err.body["pending_brokers"] == hosts

    for b in hosts:
        res = syn.agent(b).disable_remote_topic(topic, t.topic_id, 1, "retain", f"k-{b}")
        assert res.applied and res.tiered_epoch == 1 and res.tiered_state == "DISABLED"
        mine = sorted(p.partition for p in t.partitions if b in p.replicas)
        assert res.partitions == mine
        # the agent acknowledged to the controller itself (as the real agent does)
        assert b in syn.state(topic)["tiering_acks"]
        if b != hosts[-1]:
            err = _refused(syn.ctl.complete_disable, topic, 1)
            assert err.body["pending_brokers"] == hosts[hosts.index(b) + 1 :]
    acked = syn.ctl.metadata(since=delta.version, delta=True)
    assert acked.changed and acked.version >= delta.version + len(hosts)

    done = syn.ctl.complete_disable(topic, expected_tiered_epoch=1)
    assert (done.tiered_state, done.tiered_epoch, done.tiering_acks) == ("DISABLED", 1, hosts)
    # idempotent, and the broker commands too
    assert syn.ctl.complete_disable(topic, 1).tiered_state == "DISABLED"
    again = syn.agent(hosts[0]).disable_remote_topic(topic, t.topic_id, 1, "retain", "k-1")
    assert not again.applied and again.tiered_epoch == 1
    fresh_key = syn.agent(hosts[0]).disable_remote_topic(topic, t.topic_id, 1, "retain", "other")
    assert not fresh_key.applied


def test_controller_refusals_use_the_kip_codes(syn):
    topic, never_tiered = "synthetic.topic-0002", "synthetic.topic-0001"
    err = _refused(syn.ctl.start_disable, topic, "shred")
    assert (err.status, err.error) == (400, ErrorCode.INVALID_REQUEST)
    err = _refused(syn.ctl.start_disable, topic, None, 7)
    assert (err.status, err.error) == (409, ErrorCode.STALE_TIERED_EPOCH)
    assert err.body["tiered_epoch"] == 0
    err = _refused(syn.ctl.start_disable, never_tiered)
    assert (err.status, err.error) == (409, ErrorCode.INVALID_STATE_TRANSITION)
    err = _refused(syn.ctl.start_disable, "no.such.topic")
    assert (err.status, err.error) == (404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    err = _refused(syn.ctl.complete_disable, topic)
    assert (err.status, err.error) == (409, ErrorCode.INVALID_STATE_TRANSITION)

    t = syn.ctl.start_disable(topic)  # default policy
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("DISABLING", 1, "retain")
    err = _refused(syn.ctl.start_disable, topic, "retain", 1)
    assert (err.status, err.error) == (409, ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS)
    err = _refused(syn.ctl.enable, topic)
    assert err.error == ErrorCode.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS
    err = _refused(syn.ctl.complete_disable, topic, 0)
    assert err.error == ErrorCode.STALE_TIERED_EPOCH and err.body["tiered_epoch"] == 1
    err = _refused(
        syn.ctl.request,
        "POST",
        f"/v1/topics/{topic}/tiering/enable",
        body={"policy": "retain"},
    )
    assert (err.status, err.error) == (400, ErrorCode.INVALID_REQUEST)
    err = _refused(
        syn.ctl.request, "POST", f"/v1/topics/{topic}/tiering/disable", body={"policy": 3}
    )
    assert (err.status, err.error) == (422, ErrorCode.INVALID_REQUEST)
    # an ack for an older epoch is ignored, as the real controller does
    assert syn.ctl.ack_disable(topic, 1, 0)["tiering_acks"] == []
    assert syn.ctl.ack_disable(topic, 1, 1)["tiering_acks"] == [1]


def test_agents_fence_stale_epochs_and_apply_keys_once(syn):
    topic = "synthetic.topic-0004"
    t = syn.ctl.start_disable(topic, DisablePolicy.DELETE, 0)
    a = syn.agent(2)
    # epoch 0 is what the broker adopted at creation: a disable there is stale
    err = _refused(a.disable_remote_topic, topic, t.topic_id, 0, "delete", "s0")
    assert (err.status, err.error, err.body["tiered_epoch"]) == (409, "STALE_TIERED_EPOCH", 0)
    # two-sided: an epoch the controller has not reached is never applied
    err = _refused(a.disable_remote_topic, topic, t.topic_id, 2, "delete", "s2")
    assert (err.status, err.error, err.body["tiered_epoch"]) == (409, "UNKNOWN_TIERED_EPOCH", 1)
    err = _refused(a.enable_remote_topic, topic, t.topic_id, 1, "e1")
    assert err.error == ErrorCode.INVALID_STATE_TRANSITION  # the controller is disabling
    # the controller's disablement applies delete: a broker refuses another policy
    err = _refused(a.disable_remote_topic, topic, t.topic_id, 1, "retain", "k-retain")
    assert (err.status, err.error, err.body["policy"]) == (400, ErrorCode.INVALID_REQUEST, "delete")
    first = a.disable_remote_topic(topic, t.topic_id, 1, "delete", "key-a")
    assert first.applied
    assert a.disable_remote_topic(topic, t.topic_id, 1, "delete", "key-a") == first.model_copy(
        update={"applied": False}
    )
    err = _refused(a.enable_remote_topic, topic, t.topic_id, 0, "e0")
    assert (err.error, err.body["tiered_epoch"]) == (ErrorCode.STALE_TIERED_EPOCH, 1)
    err = _refused(a.disable_remote_topic, topic, "wrong-id", 1, "delete", "x")
    assert (err.status, err.error) == (404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    err = _refused(a.disable_remote_topic, topic, t.topic_id, 1, "shred", "y")
    assert (err.status, err.error) == (400, ErrorCode.INVALID_REQUEST)
    with AgentClient(
        syn.urls["controller"] + f"/brokers/{BROKERS + 1}", syn.secret, retries=0
    ) as ghost:
        err = _refused(ghost.disable_remote_topic, topic, t.topic_id, 1, None, "z")
        assert (err.status, err.error) == (404, ErrorCode.NOT_FOUND)
    assert syn.state(topic)["tiering_acks"] == [2]


def test_enable_after_disabled_keeps_the_epoch(syn):
    topic = "synthetic.topic-0000"  # DISABLED at epoch 1 by the first test, or do it here
    st = syn.state(topic)
    if st["tiered_state"] != "DISABLED":
        out = run_cli(syn.data, "disable-tiering", topic)
        assert json.loads(out.stdout.strip().splitlines()[-1])["tiered_state"] == "DISABLED"
        st = syn.state(topic)
    epoch = st["tiered_epoch"]
    err = _refused(syn.ctl.enable, topic, epoch + 5)
    assert err.error == ErrorCode.STALE_TIERED_EPOCH
    t = syn.ctl.enable(topic, expected_tiered_epoch=epoch)
    assert (t.tiered_state, t.tiered_epoch, t.disable_policy) == ("ENABLED", epoch, None)
    assert t.configs[TopicConfig.REMOTE_STORAGE_ENABLE] == "true"
    res = syn.agent(3).enable_remote_topic(topic, t.topic_id, epoch, "en-3")
    assert res.applied and res.tiered_state == "ENABLED"
    assert not syn.agent(3).enable_remote_topic(topic, t.topic_id, epoch, "en-3").applied
    assert not syn.agent(3).enable_remote_topic(topic, t.topic_id, epoch, "en-3b").applied
    # the next disablement brings a new epoch; the broker refuses a disable at the re-enabled one
    err = _refused(syn.agent(3).disable_remote_topic, topic, t.topic_id, epoch, None, "d-old")
    assert err.error == ErrorCode.STALE_TIERED_EPOCH
    again = syn.ctl.start_disable(topic, None, epoch)
    assert (again.tiered_state, again.tiered_epoch) == ("DISABLING", epoch + 1)


def test_cli_disable_tiering_runs_against_the_synthetic_cluster(syn):
    """``sim disable-tiering`` (start, DisableRemoteTopic to every host, complete) works here."""
    out = run_cli(syn.data, "disable-tiering", "synthetic.topic-0006", "--policy", "delete")
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "topic": "synthetic.topic-0006",
        "tiered_state": "DISABLED",
        "tiered_epoch": 1,
    }
    st = syn.state("synthetic.topic-0006")
    assert st["tiering_acks"] == list(range(1, BROKERS + 1)) and st["disable_policy"] == "delete"


def test_metadata_and_topic_render_the_live_tiering_state(syn):
    topic = "synthetic.topic-0006"
    if syn.state(topic)["tiered_state"] == "ENABLED":
        run_cli(syn.data, "disable-tiering", topic)
    live = syn.state(topic)
    assert syn.ctl.topic(topic).tiered_state == live["tiered_state"]
    md = syn.ctl.metadata()
    assert next(t for t in md.topics if t.name == topic).tiered_epoch == live["tiered_epoch"]


def test_snapshots_report_the_same_tiering_state_as_metadata(syn):
    """#14 gap 10: once brokers applied a disablement, their snapshots (JSON and ``format=tsv``)
    and the cluster snapshot say what metadata says: DISABLED at the new epoch, the copier
    stopped on leaders, remote expiration stopped with delete and running with retain."""
    topic = "synthetic.topic-0002"  # an earlier test may have left it DISABLING with retain
    run_cli(syn.data, "disable-tiering", topic, "--policy", "delete")
    meta = next(t for t in syn.ctl.metadata().topics if t.name == topic)
    assert (meta.tiered_state, meta.tiered_epoch) == ("DISABLED", 1)
    expiration = "STOPPED" if meta.disable_policy == "delete" else "RUNNING"
    leaders = {p.partition: p.leader for p in meta.partitions}
    for b in range(1, BROKERS + 1):
        mine = [r for r in syn.agent(b).snapshot().replicas if r.topic == topic]
        assert mine and {(r.tiered_state, r.tiered_epoch) for r in mine} == {("DISABLED", 1)}
        for r in mine:
            if leaders[r.partition] == b:
                assert (r.copier_state, r.expiration_state) == ("STOPPED", expiration)
            else:
                assert r.copier_state == r.expiration_state == "NOT_LEADER"
        _header, rows = split_snapshot_tsv(syn.agent(b).snapshot_tsv())
        ours = [
            dict(zip(SNAPSHOT_TSV_COLUMNS, line.split("\t"), strict=True))
            for line in bytes(rows).decode().splitlines()
            if line.split("\t")[1] == topic
        ]
        assert len(ours) == len(mine) and {o["tiered_epoch"] for o in ours} == {"1"}
    cluster = syn.ctl.request("GET", "/v1/snapshot")
    entries = [p for p in cluster["partitions"] if p["topic"] == topic]
    assert entries and {(p["tiered_state"], p["tiered_epoch"]) for p in entries} == {
        ("DISABLED", 1)
    }


def test_partition_count_expands_a_synthetic_topic_and_brokers_answer_alone(syn):
    """#17: the synthetic controller takes the real one's KIP-253 expansion route (the
    expand_partitions workflow runs against it at fleet scale), and ``GET /v1/brokers`` answers
    the brokers without the topics (a topic's pre-flight no longer reads the whole cluster)."""
    topic = "synthetic.topic-0007"
    before = syn.ctl.metadata().version
    t = syn.ctl.alter_partition_count(topic, PPT + 10)
    assert (t.initial_partition_count, t.undeleted_partition_count) == (PPT, PPT + 10)
    assert [p.partition for p in t.partitions] == list(range(PPT + 10))
    new = [p for p in t.partitions if p.partition >= PPT]
    assert all(p.leader >= 1 and p.isr == p.replicas for p in new)
    delta = syn.ctl.metadata(since=before, delta=True)
    changed = {(x.name, p.partition) for x in delta.topics for p in x.partitions}
    assert {(topic, p) for p in range(PPT + 10)} <= changed  # old ones: new leader epochs
    err = _refused(syn.ctl.alter_partition_count, topic, PPT)
    assert err.status == 400 and err.error == ErrorCode.INVALID_PARTITIONS
    brokers = syn.ctl.brokers()
    assert [b.broker_id for b in brokers] == list(range(1, BROKERS + 1))
    assert all(len(b.log_dirs) == 2 and b.alive for b in brokers)
