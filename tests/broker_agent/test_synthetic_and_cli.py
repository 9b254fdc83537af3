"""Synthetic scale snapshots (compressed, incremental), the stable CLI, and external expiration."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from broker_agent.contract.choices import RemoteSegmentState, TaskState
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.signing import audience_of, sign_headers
from tests import s3util

from .conftest import run_cli, wait_until

pytestmark = pytest.mark.integration


def test_synthetic_snapshot_is_gzip_and_incremental(tmp_path):
    if True:
        data = tmp_path / "syn"
        try:
            out = run_cli(
                data,
                "up",
                "--brokers",
                "6",
                "--log-dirs",
                "2",
                "--synthetic-topics",
                "4",
                "--partitions-per-topic",
                "250",
            )
            urls = json.loads(out.stdout.strip().splitlines()[-1])
            secret = (data / "secret").read_bytes().strip()
            base = urls["controller"]

            def get(path):
                h = sign_headers(secret, "GET", path, audience=audience_of(base))
                h["Accept-Encoding"] = "gzip"
                return httpx.get(base + path, headers=h, timeout=30)

            r = get("/v1/snapshot")
            assert r.headers["content-encoding"] == "gzip"
            full = r.json()
            assert full["full"] and len(full["partitions"]) == 1000 == full["partition_count"]
            tick = httpx.post(
                base + "/v1/tick",
                headers=sign_headers(secret, "POST", "/v1/tick", audience=audience_of(base)),
            )
            version = tick.json()["version"]
            inc = get(f"/v1/snapshot?since={full['version']}").json()
            assert not inc["full"] and inc["version"] == version
            assert 0 < len(inc["partitions"]) < 1000
            assert all(p["version"] > full["version"] for p in inc["partitions"])
            # each synthetic broker answers through the ordinary AgentClient
            with AgentClient(urls["brokers"]["3"], secret) as agent:
                snap = agent.snapshot()
                assert snap.broker_id == 3 and snap.replicas
                assert all(3 in r.isr for r in snap.replicas)
            assert len(gzip.compress(r.content)) < len(r.content)
        finally:
            run_cli(data, "down", check=False)


def _partitions(md) -> dict[tuple[str, int], object]:
    return {(t.name, p.partition): p for t in md.topics for p in t.partitions}


def test_synthetic_controller_metadata_is_versioned_incremental_and_churnable(tmp_path):
    data = tmp_path / "syn"
    try:
        out = run_cli(
            data,
            "up",
            "--brokers",
            "5",
            "--log-dirs",
            "2",
            "--synthetic-topics",
            "4",
            "--partitions-per-topic",
            "250",
            "--synthetic-tick-interval",
            "0",
        )
        urls = json.loads(out.stdout.strip().splitlines()[-1])
        secret = (data / "secret").read_bytes().strip()
        with ControllerClient(urls["controller"], secret) as ctl:
            # gzip on the wire, the real controller's models
            path = "/v1/metadata"
            h = sign_headers(secret, "GET", path, audience=ctl.audience)
            h["Accept-Encoding"] = "gzip"
            raw = httpx.get(urls["controller"] + path, headers=h, timeout=30)
            assert raw.headers["content-encoding"] == "gzip"
            md = ctl.metadata()
            assert md.changed and md.full
            assert [b.broker_id for b in md.brokers] == [1, 2, 3, 4, 5]
            assert md.brokers[0].url == urls["brokers"]["1"]
            assert len(md.topics) == 4 and all(len(t.partitions) == 250 for t in md.topics)
            tiered = {t.name: t.tiered_state for t in md.topics}
            assert sorted(set(tiered.values())) == ["ENABLED", "NONE"]
            for t in md.topics:
                assert t.initial_partition_count == t.undeleted_partition_count == 250
                for p in t.partitions:
                    assert len(p.replicas) == 3 and p.leader in p.isr and p.created == p.replicas
            assert ctl.topic(md.topics[1].name).topic_id == md.topics[1].topic_id
            # nothing moved: changed=False
            same = ctl.metadata(since=md.version, delta=True)
            assert not same.changed and same.topics == []

            churned = json.loads(run_cli(data, "churn", "--fraction", "0.02").stdout)
            assert churned["changed_partitions"] == 20
            before = _partitions(md)
            delta = ctl.metadata(since=md.version, delta=True)
            assert delta.changed and not delta.full and delta.since == md.version
            assert delta.version == churned["metadata_version"] > md.version
            changed = _partitions(delta)
            assert len(changed) == 20
            for key, p in changed.items():
                old = before[key]
                assert p.partition_epoch == old.partition_epoch + 1
                assert (p.leader, p.leader_epoch, p.isr) != (old.leader, old.leader_epoch, old.isr)
                assert p.leader in p.isr
            # the full answer agrees with "previous full + delta"
            full = ctl.metadata(since=md.version)
            assert full.full and len(_partitions(full)) == 1000
            assert {k: v for k, v in _partitions(full).items() if k in changed} == changed
            # a since from before this process started is answered in full
            assert ctl.metadata(since=1, delta=True).full

            # snapshots moved with the churn: new leaders and offsets show up incrementally
            key, p = next(iter(changed.items()))
            with AgentClient(urls["brokers"][str(p.leader)], secret) as agent:
                inc = agent.snapshot(since=md.version)
                mine = {(r.topic, r.partition): r for r in inc.replicas}
                assert mine[key].is_leader and mine[key].leader_epoch == p.leader_epoch
                assert not inc.full and all(r.version > md.version for r in inc.replicas)

        st = json.loads(run_cli(data, "status", "--json").stdout)
        assert st["mode"] == "synthetic" and "error" not in st
        assert len(st["brokers"]) == 5 and all(b["alive"] for b in st["brokers"])
        assert [d["name"] for d in st["brokers"][0]["log_dirs"]] == ["logdir-0", "logdir-1"]
        assert len(st["topics"]) == 4 and st["topics"][0]["partitions"] == 250
    finally:
        run_cli(data, "down", check=False)


def test_sim_up_is_idempotent_and_status_reports_dirs(sim_factory):
    sim = sim_factory(2, 2)
    again = sim.cli("up", "--brokers", "2", "--log-dirs", "2")
    assert json.loads(again.stdout.strip().splitlines()[-1]) == sim.urls
    sim.cli("create-topic", "st", "--partitions", "2", "--replication-factor", "2", "--tiered")
    st = json.loads(sim.cli("status", "--json").stdout)
    assert [b["broker_id"] for b in st["brokers"]] == [1, 2]
    assert all(
        len(b["log_dirs"]) == 2 and {"name", "path", "state"} <= set(b["log_dirs"][0])
        for b in st["brokers"]
    )
    assert st["topics"][0]["tiered_state"] == "ENABLED"
    churn = sim.cli("churn", "--fraction", "0.01", check=False)
    assert churn.returncode == 2 and "synthetic" in churn.stdout
    sim.cli("kill-broker", "2")
    wait_until(
        lambda: not json.loads(sim.cli("status", "--json").stdout)["brokers"][1]["alive"], 15
    )
    sim.cli("start-broker", "2")
    wait_until(lambda: json.loads(sim.cli("status", "--json").stdout)["brokers"][1]["alive"], 15)


def test_external_expiration_exposes_inventory_and_marking(sim_factory):
    sim = sim_factory(1, 1, "--expiration", "external")
    sim.controller.create_topic(
        "ext",
        1,
        1,
        {"remote.storage.enable": "true", "segment.bytes": "2048", "retention.bytes": "4096"},
    )
    sim.cli("produce", "--topic", "ext", "--records", "500", "--batch-size", "20")
    agent = sim.agent(1)
    agent.roll("ext", 0)
    # every rolled segment tiered: the copier is done, so the snapshot and the inventory below
    # are read from the same state (comparing them while it still copies is a race)
    wait_until(
        lambda: (
            (x := sim.replica(1, "ext")).remote_segments > 3
            and x.remote_log_end_offset == x.log_end_offset - 1
        ),
        30,
        what="every rolled segment tiered",
    )
    r = sim.replica(1, "ext")
    assert r.expiration_state == TaskState.EXTERNAL
    rows = sorted(agent.inventory("ext", page_size=2), key=lambda s: s.start_offset)
    assert len(rows) == r.remote_segments  # the agent did not expire anything itself
    state = agent.partition_states("ext")[0]
    assert state.retention_bytes == 4096 and state.log_end_offset == r.log_end_offset
    # what the Spark retention job does: publish the log start offset, then delete objects
    victim = rows[0]
    agent.publish_log_start_offset("ext", 0, victim.end_offset + 1)
    agent.mark_segment(victim.segment_id, RemoteSegmentState.DELETE_SEGMENT_STARTED)
    s3util.delete(victim.object_path)
    done = agent.mark_segment(victim.segment_id, RemoteSegmentState.DELETE_SEGMENT_FINISHED)
    assert done.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED
    assert sim.replica(1, "ext").log_start_offset == victim.end_offset + 1
    # illegal transitions are refused
    with pytest.raises(AgentError) as exc:
        agent.mark_segment(victim.segment_id, RemoteSegmentState.DELETE_SEGMENT_STARTED)
    assert exc.value.error == "INVALID_STATE_TRANSITION"


def _scan(versions, since):
    return [i for i in range(len(versions)) if versions[i] > since]


def _named(c, i: int) -> tuple[str, int]:
    t, p = c.locate(i)
    return c.topics[t], p


@pytest.mark.parametrize("layout", ["uniform", "fleet, then an expansion"])
def test_synthetic_since_answers_match_a_full_scan_of_versions(layout):
    """The per-version change log answers ``since`` with exactly the partitions a scan of every
    partition would find, for metadata and for each broker's snapshot, and falls back to the
    scan once the log no longer reaches back to ``since``: in the uniform layout, and in the
    fleet layout (topics of different sizes) after a KIP-253 expansion appended partitions."""
    from broker_agent.simulator.synthetic import SyntheticCluster, fleet_topic_sizes

    if layout == "uniform":
        c = SyntheticCluster("c", brokers=5, log_dirs=2, topics=4, partitions_per_topic=10)
    else:
        c = SyntheticCluster("c", 5, 2, 0, 0, topic_sizes=fleet_topic_sizes(300))
    start = c.version
    c.churn(0.1, seed=1)
    mid = c.version
    if layout != "uniform":
        c.alter_partition_count(c.topics[1], c.sizes[1] + 7)
    c.tick(0.05)
    c.churn(0.2, seed=2)
    for since in (start, mid, c.version - 1, c.version):
        assert c._changed_since(since) == _scan(c.pversion, since)
        assert c._changed_since(since, metadata=True) == _scan(c.mversion, since)
        for b in range(1, 6):
            body = json.loads(c.broker_snapshot(b, since))
            got = [(r["topic"], r["partition"]) for r in body["replicas"]]
            want = [_named(c, i) for i in _scan(c.pversion, since) if b in c.replicas(i)]
            assert got == want and body["full"] is False
        md = json.loads(c.metadata_body(since, delta=True))
        got = sorted((t["name"], p["partition"]) for t in md["topics"] for p in t["partitions"])
        want = [_named(c, i) for i in _scan(c.mversion, since)]
        assert got == sorted(want)
    c._snap_log.limit = 1  # only the newest version is kept: older ``since`` scans
    c.tick(0.05)
    assert c._snap_log.since(start) is None
    assert c._changed_since(start) == _scan(c.pversion, start)


def test_fleet_layout_mixes_topic_sizes_and_an_expansion_keeps_partition_order():
    """#17: the fleet layout's topics run from 1 to 10,000 partitions and sum to what was
    asked; an expansion (KIP-253) lists the topic's partitions 0..target-1 in order, with the
    old partitions' leader epochs bumped, initial_partition_count kept, and the new ones on
    brokers round robin; a shrink is refused (it needs partitions that drain)."""
    from broker_agent.contract.errors import ApiError
    from broker_agent.simulator.synthetic import SyntheticCluster, fleet_topic_sizes

    sizes = fleet_topic_sizes(1_000_000)
    assert sum(sizes) == 1_000_000 and max(sizes) == 10_000 and min(sizes) == 1
    assert len({s for s in sizes}) >= 8  # a mix, not one size
    c = SyntheticCluster("c", 7, 4, 0, 0, topic_sizes=fleet_topic_sizes(2_000))
    name, before = c.topics[0], json.loads(c.topic_body(c.topics[0]))
    n = before["undeleted_partition_count"]
    after = json.loads(c.alter_partition_count(name, 2 * n))
    assert [p["partition"] for p in after["partitions"]] == list(range(2 * n))
    assert (after["initial_partition_count"], after["undeleted_partition_count"]) == (n, 2 * n)
    assert [p["leader_epoch"] for p in after["partitions"][:n]] == [
        p["leader_epoch"] + 1 for p in before["partitions"]
    ]
    new_leaders = {p["leader"] for p in after["partitions"][n:]}
    assert new_leaders == set(range(1, 8))  # spread over every broker
    hosted = sum(len(json.loads(c.broker_snapshot(b, None))["replicas"]) for b in range(1, 8))
    assert hosted == 3 * c.n == 3 * (2_000 + n)
    assert json.loads(c.alter_partition_count(name, 2 * n)) == after  # idempotent
    with pytest.raises(ApiError) as refused:
        c.alter_partition_count(name, n)
    assert refused.value.status == 400


def test_a_synthetic_expansion_records_the_epoch_of_the_ancestor_its_keys_come_from():
    """KIP-253 step 4.2 in the synthetic scale mode: a partition added by an expansion records,
    in leaderEpochAfterCreation, the pre-bump leader epoch of the first of its ancestors that
    existed before (2 -> 8: 6 splits 2, itself new, so 6 waits on 0) - in the JSON and the
    format=tsv answers alike, the partition consumers and the console name as its barrier."""
    from broker_agent.contract.metadata_rows import split_metadata_tsv
    from broker_agent.contract.ordering import creation_barrier
    from broker_agent.simulator.synthetic import SyntheticCluster

    c = SyntheticCluster("c", 3, 2, 0, 0, topic_sizes=[2, 2])
    name, other = c.topics
    after = json.loads(c.alter_partition_count(name, 8))  # 2 -> 8 at once
    maps = {p["partition"]: p["leader_epoch_after_creation"] for p in after["partitions"]}
    assert maps == {
        0: {},
        1: {},
        2: {"0": 0},
        3: {"1": 0},
        4: {"0": 0},
        5: {"1": 0},
        6: {"0": 0},
        7: {"1": 0},
    }
    c.alter_partition_count(other, 3)  # 2 exists now; 0 and 1 at leader epoch 1
    after = json.loads(c.alter_partition_count(other, 8))
    maps = {p["partition"]: p["leader_epoch_after_creation"] for p in after["partitions"]}
    assert maps[2] == {"0": 0} and maps[4] == {"0": 1} and maps[7] == {"1": 1}
    assert maps[6] == {"2": 0}  # split from 2, which existed before this expansion
    assert [creation_barrier(p, 2, maps[p]) for p in range(2, 8)] == [0, 1, 0, 1, 2, 1]
    _md, _topics, rows = split_metadata_tsv(c.metadata_body(None, False, tsv=True))
    tsv = {
        (r.split("\t")[0], int(r.split("\t")[1])): r.split("\t")[9]
        for r in bytes(rows).decode().splitlines()
    }
    assert tsv[(name, 6)] == '{"0":0}' and tsv[(other, 6)] == '{"2":0}'
    assert tsv[(name, 1)] == "{}"


def test_sim_consume_reads_from_the_log_start_once_it_is_above_zero(sim_factory):
    """#14 (CLI): ``sim consume`` without a group reads from each partition's log start offset;
    it used to crash with OFFSET_OUT_OF_RANGE once retention had moved that above 0."""
    sim = sim_factory(1, 1)
    sim.cli("create-topic", "trimmed", "--partitions", "1", "--replication-factor", "1")
    sim.cli("produce", "--topic", "trimmed", "--records", "50")
    assert sim.agent(1).publish_log_start_offset("trimmed", 0, 20)["log_start_offset"] == 20
    out = sim.cli("consume", "--topic", "trimmed")
    offsets = [json.loads(line)["offset"] for line in out.stdout.splitlines()]
    assert offsets == list(range(20, 50))


def test_the_coordinator_answers_group_changes_as_rows_over_http(sim_factory):
    """#17: ``GET /v1/groups?format=tsv[&since=V]`` on the real controller: every group in
    full, then only the group that committed since."""
    from broker_agent.contract.models import split_group_tsv

    sim = sim_factory(3, 1)
    sim.controller.create_topic("kv", 2, 1)
    for group in ("audit", "billing"):
        member = sim.controller.join_group(group, ["kv"])
        sim.controller.commit_offsets(group, member.member_id, member.generation, {"kv": {0: 3}})
    sim.controller.create_topic("other", 1, 1)
    sim.controller.join_group("search", ["other"])
    assert [g.group_id for g in sim.controller.groups("kv")] == ["audit", "billing"]
    assert [g.group_id for g in sim.controller.groups("other")] == ["search"]
    head, rows = split_group_tsv(sim.controller.group_changes_tsv())
    assert head["full"] is True
    assert [g[0] for g in head["groups"]] == ["audit", "billing", "search"]
    assert bytes(rows).decode().splitlines()[0].split("\t")[:4] == ["audit", "kv", "0", "3"]
    billing = sim.controller.group("billing")
    member_id = billing.members[0].member_id
    sim.controller.commit_offsets("billing", member_id, billing.generation, {"kv": {1: 7}})
    delta, rows = split_group_tsv(sim.controller.group_changes_tsv(head["version"]))
    assert delta["full"] is False and [g[0] for g in delta["groups"]] == ["billing"]
    assert [r.split("\t")[2:4] for r in bytes(rows).decode().splitlines()] == [
        ["0", "3"],
        ["1", "7"],
    ]
