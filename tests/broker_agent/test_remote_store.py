"""The brokers' remote store on S3 (``broker_agent.simulator.remote``, issue #13), against the suite's
object store: the RSM key layout, the metadata cache (written through, refreshed by ETag, read
afresh by a new leader), and an unreachable store (backoff, outage recorded and cleared)."""

from __future__ import annotations

import os
import uuid

import pytest

from broker_agent.contract.choices import RemoteSegmentState
from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location
from broker_agent.simulator.remote import METADATA_DIR, RemoteStorageError, RemoteStore
from tests import s3util


@pytest.fixture
def location() -> S3Location:
    base = S3Location.parse(os.environ["STRATA_REMOTE_STORE"])
    return base.child(f"remote-{uuid.uuid4().hex[:8]}")


def _copy(store: RemoteStore, start: int, end: int, data: bytes = b"batch-bytes") -> dict:
    return store.copy_segment(
        topic="orders",
        topic_id="tid0",
        partition=3,
        data=data,
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1,
        segment_leader_epochs=[{"epoch": 0, "start_offset": start}],
        tiered_epoch=0,
    )


def test_objects_and_records_follow_the_rsm_layout(location):
    store = RemoteStore(location, "c1")
    record = _copy(store, 100, 199, b"x" * 10)
    sid = record["segment_id"]
    data_key = location.key("orders-tid0", "3", f"{100:020d}-{sid}.log")
    meta_key = location.key(METADATA_DIR, "orders-tid0", "3", f"{sid}.json")
    assert sorted(s3util.keys(location.uri)) == sorted([data_key, meta_key])
    assert record["object_path"] == location.object_uri(data_key)
    assert record["state"] == RemoteSegmentState.COPY_SEGMENT_FINISHED
    assert record["size_bytes"] == 10
    assert store.read_object(record) == b"x" * 10


def test_a_second_broker_sees_the_leaders_changes_on_refresh_and_as_a_new_leader(location):
    leader, follower = RemoteStore(location, "c1"), RemoteStore(location, "c1")
    first = _copy(leader, 0, 99)
    assert [s["segment_id"] for s in follower.segments("orders", "tid0", 3)] == [
        first["segment_id"]
    ]
    second = _copy(leader, 100, 199)
    leader.transition(first["segment_id"], RemoteSegmentState.DELETE_SEGMENT_STARTED)
    # the follower's cache is as it was until it is refreshed (maintenance loop) ...
    assert len(follower.segments("orders", "tid0", 3)) == 1
    follower.refresh("orders", "tid0", 3, force=True)
    states = {s["segment_id"]: s["state"] for s in follower.segments("orders", "tid0", 3)}
    assert states == {
        first["segment_id"]: RemoteSegmentState.DELETE_SEGMENT_STARTED,
        second["segment_id"]: RemoteSegmentState.COPY_SEGMENT_FINISHED,
    }
    # ... or invalidated when it becomes the leader: read afresh before its next use
    third = _copy(leader, 200, 299)
    follower.invalidate("orders", "tid0", 3)
    assert [s["start_offset"] for s in follower.segments("orders", "tid0", 3)] == [0, 100, 200]
    # a mark by segment id reaches a store that never read the partition (full lookup)
    fresh = RemoteStore(location, "c1")
    done = fresh.delete_segment(third["segment_id"])
    assert done["state"] == RemoteSegmentState.DELETE_SEGMENT_FINISHED
    assert not s3util.exists(third["object_path"])
    with pytest.raises(KeyError):
        fresh.transition("0" * 32, RemoteSegmentState.DELETE_SEGMENT_STARTED)


def test_inventory_lists_every_partition_afresh(location):
    store = RemoteStore(location, "c1")
    _copy(store, 0, 99)
    other = RemoteStore(location, "c1")
    other.copy_segment(
        topic="orders-eu", topic_id="tid1", partition=0, data=b"y", start_offset=0,
        end_offset=9, max_timestamp_ms=1, segment_leader_epochs=[], tiered_epoch=0,
    )  # fmt: skip
    rows = list(store.iter_all())
    assert [(r["topic"], r["partition"]) for r in rows] == [("orders", 3), ("orders-eu", 0)]
    assert [r["topic"] for r in store.iter_all("orders")] == ["orders"]  # not orders-eu


def test_an_unreachable_store_is_recorded_backed_off_and_cleared(location):
    store = RemoteStore(location, "c1")
    _copy(store, 0, 99)
    known = store.segments("orders", "tid0", 3)
    down = ObjectStoreConfig.from_env().with_location(location)
    store._client = ObjectStoreConfig(location, "http://127.0.0.1:9", down.region).client(
        connect_timeout=1, max_attempts=1
    )  # a port nothing answers on
    with pytest.raises(RemoteStorageError):
        _copy(store, 100, 199)
    since = store.unreachable_since
    assert since is not None and store.last_error
    # backing off: the next call fails at once, without trying; the cache still answers
    with pytest.raises(RemoteStorageError, match="backing off"):
        store.refresh("orders", "tid0", 3, force=True)
    assert store.segments("orders", "tid0", 3) == known
    assert store.status()["unreachable_since_ms"] == since
    # back: the first success clears the outage
    store._client = down.client()
    store._retry_at = 0.0
    _copy(store, 100, 199)
    assert store.unreachable_since is None and store.last_error is None
    assert [s["start_offset"] for s in store.segments("orders", "tid0", 3)] == [0, 100]


def test_a_copy_that_failed_midway_is_deleted_by_its_leader_in_either_expiration_mode(
    sim_factory,
):
    """A COPY_SEGMENT_STARTED record older than DANGLING_COPY_MS is a failed upload: the
    leader deletes its object and finishes the record, with expiration external too (as the
    Spark jobs run it), where nothing else would."""
    import json
    import time

    from broker_agent.simulator.broker.tiering import DANGLING_COPY_MS

    from .conftest import wait_until

    sim = sim_factory(1, 1, "--expiration", "external")
    sim.controller.create_topic("dangling", 1, 1, {"remote.storage.enable": "true"})
    topic = sim.controller.topic("dangling")
    manifest = json.loads((sim.data / "cluster.json").read_text())
    store = S3Location.parse(manifest["remote_store"])
    sid = uuid.uuid4().hex
    pdir = f"dangling-{topic.topic_id}"
    data_uri = store.object_uri(store.key(pdir, "0", f"{0:020d}-{sid}.log"))
    s3util.put(data_uri, b"half an upload")
    record = {
        "cluster": manifest["cluster_id"], "topic": "dangling", "topic_id": topic.topic_id, "partition": 0,
        "segment_id": sid, "start_offset": 0, "end_offset": 9, "max_timestamp_ms": 0,
        "size_bytes": 0, "segment_leader_epochs": [], "tiered_epoch": 0,
        "state": RemoteSegmentState.COPY_SEGMENT_STARTED, "object_path": data_uri,
        "event_timestamp_ms": int(time.time() * 1000) - DANGLING_COPY_MS - 60_000,
    }  # fmt: skip
    s3util.put(
        store.object_uri(store.key(METADATA_DIR, pdir, "0", f"{sid}.json")),
        json.dumps(record).encode(),
    )

    def state() -> str | None:
        rows = {r.segment_id: r for r in sim.agent(1).inventory("dangling")}
        return rows[sid].state if sid in rows else None

    wait_until(
        lambda: state() == RemoteSegmentState.DELETE_SEGMENT_FINISHED,
        60,
        what="the dangling copy deleted by its leader",
    )
    assert not s3util.exists(data_uri)
