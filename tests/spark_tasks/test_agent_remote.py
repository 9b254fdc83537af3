"""The agent adapter's rules, against an in-process fake of the agent API (httpx MockTransport)."""

from __future__ import annotations

import json

import httpx
import pyarrow.parquet as pq
import pytest

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.models import ClusterMetadata
from spark_tasks import agent_remote
from spark_tasks.agent_remote import AgentRemoteMetadata, Limits
from spark_tasks.remote import PartitionLogStart, SegmentRef
from spark_tasks.schema import INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA

CONTROLLER = "http://controller"
ORDER = list(RemoteSegmentState.ALL)


def _segment(i: int) -> dict:
    return {
        "cluster": "sim-id",
        "topic": "t",
        "topic_id": "tid",
        "partition": i % 2,
        "segment_id": f"s{i}",
        "start_offset": i * 10,
        "end_offset": i * 10 + 9,
        "max_timestamp_ms": 1,
        "size_bytes": 100,
        "segment_leader_epochs": [{"epoch": 0, "start_offset": 0}],
        "tiered_epoch": 0,
        "state": RemoteSegmentState.COPY_SEGMENT_FINISHED,
        "object_path": f"s3://strata-remote/data/t-tid/{i % 2}/s{i}.log",
        "event_timestamp_ms": 1,
    }


def _partition_state(p: int, epoch: int, lso: int) -> dict:
    return {
        "cluster": "sim-id",
        "topic": "t",
        "topic_id": "tid",
        "partition": p,
        "retention_ms": -1,
        "retention_bytes": -1,
        "log_start_offset": lso,
        "local_log_start_offset": lso,
        "log_end_offset": 1000,
        "local_untiered_bytes": 0,
        "leader_epochs": [{"epoch": epoch, "start_offset": 0}],
        "tiered_state": "ENABLED",
        "tiered_epoch": 0,
        "disable_policy": None,
        "purge_below_tiered_epoch": 0,
    }


class FakeCluster:
    """Controller + two agents: broker 1 leads partition 0, broker 2 leads partition 1; both
    report partition 1 (a leader change in flight: broker 1's row is stale)."""

    def __init__(self, segments: int) -> None:
        self.rows = [_segment(i) for i in range(segments)]
        self.states = {r["segment_id"]: r["state"] for r in self.rows}
        self.published: list[tuple[int, str, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        assert "x-strata-signature" in request.headers
        if host == "controller" and path == "/v1/metadata":
            return httpx.Response(200, json=self.metadata())
        broker = int(host.removeprefix("agent"))
        if path == "/v1/remote/inventory":
            lines = "".join(json.dumps(r) + "\n" for r in self.rows)
            return httpx.Response(200, content=lines.encode())
        if path == "/v1/remote/partition-states":
            rows = [_partition_state(broker - 1, 5, 0)]
            if broker == 1:
                rows.append(_partition_state(1, 3, 0))  # stale
            else:
                rows[0]["log_start_offset"] = 7
            return httpx.Response(200, json=rows)
        if path.endswith("/log-start-offset"):
            self.published.append((broker, path, json.loads(request.content)["log_start_offset"]))
            return httpx.Response(200, json={})
        if path.startswith("/v1/remote/segments/"):
            sid = path.split("/")[4]
            target = json.loads(request.content)["state"]
            if sid not in self.states:
                return httpx.Response(404, json={"error": "NOT_FOUND", "message": sid})
            current = self.states[sid]
            row = next(r for r in self.rows if r["segment_id"] == sid)
            if current == target:  # the agent repeats a state as a no-op
                return httpx.Response(200, json={**row, "state": target})
            if ORDER.index(target) <= ORDER.index(current):
                return httpx.Response(409, json={"error": "INVALID_STATE_TRANSITION"})
            if target == RemoteSegmentState.DELETE_SEGMENT_FINISHED and current != (
                RemoteSegmentState.DELETE_SEGMENT_STARTED
            ):
                return httpx.Response(409, json={"error": "INVALID_STATE_TRANSITION"})
            self.states[sid] = target
            return httpx.Response(200, json={**row, "state": target})
        return httpx.Response(404, json={"error": "NOT_FOUND", "message": path})

    def metadata(self) -> dict:
        return {
            "cluster_id": "sim-id",
            "version": 1,
            "brokers": [{"broker_id": b, "url": f"http://agent{b}", "alive": True} for b in (1, 2)],
            "topics": [
                {
                    "name": "t",
                    "topic_id": "tid",
                    "configs": {},
                    "tiered_state": "ENABLED",
                    "tiered_epoch": 0,
                    "initial_partition_count": 2,
                    "undeleted_partition_count": 2,
                    "partitions": [
                        {"partition": p, "replicas": [1, 2], "leader": p + 1, "isr": [1, 2]}
                        for p in (0, 1)
                    ],
                }
            ],
        }


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster(segments=25)


@pytest.fixture
def adapter(fake) -> AgentRemoteMetadata:
    return AgentRemoteMetadata("prod", CONTROLLER, b"secret", transport=httpx.MockTransport(fake))


def test_export_streams_the_inventory_in_row_groups_with_the_contract_schema(
    adapter, tmp_path, monkeypatch
):
    monkeypatch.setattr(Limits, "ROW_GROUP_ROWS", 10)
    inventory, partitions = adapter.export_inputs(tmp_path)
    meta = pq.ParquetFile(inventory / "part-00000.parquet")
    assert meta.schema_arrow.equals(INVENTORY_SCHEMA)
    assert meta.metadata.num_rows == 25 and meta.metadata.num_row_groups == 3
    table = pq.read_table(inventory)
    assert set(table.column("cluster").to_pylist()) == {"prod"}  # Strata's name, not the id
    parts = pq.read_table(partitions)
    assert parts.schema.equals(PARTITION_STATE_SCHEMA)
    # Partition 1 reported by both: the controller's leader (broker 2) wins.
    assert parts.to_pylist()[1]["log_start_offset"] == 7


def test_the_store_root_is_never_guessed_from_the_inventory(adapter, tmp_path):
    """Issue #11: rows name ``s3://strata-remote/data/...``, but only configuration says where
    the store is; without it the adapter refuses to name a root (and a run that would delete
    fails)."""
    adapter.export_inputs(tmp_path)
    with pytest.raises(RuntimeError, match="SPARK_REMOTE_ROOTS"):
        adapter.remote_root()


def test_a_configured_store_root_is_the_root(fake, settings, db):
    settings.SPARK_CLUSTER_ENDPOINTS = {
        "prod": {"controller_url": CONTROLLER, "secret_ref": "env:STRATA_TEST_SECRET"}
    }
    settings.SPARK_REMOTE_ROOTS = {"prod": "s3://kafka-remote/prod-1"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STRATA_TEST_SECRET", "secret")
        backend = agent_remote.for_cluster("prod")
    assert backend.remote_root() == "s3://kafka-remote/prod-1"


def _sim_metadata(data, cluster_id: str = "sim-id") -> ClusterMetadata:
    return ClusterMetadata.model_validate(
        {
            "cluster_id": cluster_id,
            "version": 1,
            "brokers": [
                {
                    "broker_id": b,
                    "url": f"http://agent{b}",
                    "alive": True,
                    "log_dirs": [
                        {"name": d, "path": str(data / f"broker-{b}" / d), "state": "online"}
                        for d in ("d0", "d1")
                    ],
                }
                for b in (1, 2)
            ],
            "topics": [],
        }
    )


def test_the_simulated_clusters_store_is_found_from_its_agents_and_manifest(tmp_path):
    data = tmp_path / "sim"
    data.mkdir()
    manifest = {"cluster_id": "sim-id", "data": str(data), "remote_store": "s3://b-1/t/sim-id"}
    (data / "cluster.json").write_text(json.dumps(manifest))
    assert agent_remote.simulated_store_root(_sim_metadata(data)) == "s3://b-1/t/sim-id"
    # Another cluster's manifest, or log dirs not laid out by the simulator: no root.
    assert agent_remote.simulated_store_root(_sim_metadata(data, "other-id")) == ""
    assert agent_remote.simulated_store_root(_sim_metadata(tmp_path / "elsewhere")) == ""


def test_log_start_offsets_go_to_the_leader_and_only_upwards(adapter, fake, tmp_path):
    adapter.export_inputs(tmp_path)  # partition 0 at 0, partition 1 at 7
    adapter.publish_log_start_offsets(
        [PartitionLogStart("t", 0, 40), PartitionLogStart("t", 1, 7), PartitionLogStart("t", 1, 5)]
    )
    assert fake.published == [(1, "/v1/partitions/t/0/log-start-offset", 40)]


def test_marking_twice_is_a_no_op_and_past_states_are_left_alone(adapter, fake):
    refs = [SegmentRef("t", i % 2, f"s{i}") for i in range(6)]
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_STARTED, refs)
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_STARTED, refs)
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_FINISHED, refs[:3])
    # A rerun after a crash marks the whole plan again: the finished ones are past it.
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_STARTED, refs)
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_FINISHED, refs)
    assert {fake.states[r.segment_id] for r in refs} == {RemoteSegmentState.DELETE_SEGMENT_FINISHED}
    adapter.mark_segments(RemoteSegmentState.DELETE_SEGMENT_FINISHED, [SegmentRef("t", 0, "gone")])


def test_finishing_a_delete_that_never_started_is_refused(adapter):
    with pytest.raises(RuntimeError, match="refused DELETE_SEGMENT_FINISHED"):
        adapter.mark_segments(
            RemoteSegmentState.DELETE_SEGMENT_FINISHED, [SegmentRef("t", 0, "s0")]
        )


def test_unknown_cluster_refuses_on_use_not_on_lookup(db):
    backend = agent_remote.for_cluster("nowhere")
    with pytest.raises(RuntimeError, match="unknown cluster 'nowhere'"):
        backend.export_inputs(None)
