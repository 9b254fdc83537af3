"""Issue #13's outage test (KAFKA-19952's failure mode): the object store goes down under a produce
load. Nothing acknowledged is lost, local segments are kept while copying waits, the console
shows the outage per broker and on the topic page, and once the store is back copying catches up.

The test runs its own SeaweedFS (the suite's shared one must stay up for the others), kills it
with SIGKILL (an outage, not a shutdown) and starts it again on the same port and data.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_agent.contract.objectstore import ObjectStoreConfig
from broker_agent.contract.producer import Producer
from config.seaweedfs import EmbeddedS3, ensure_bucket, free_port, start_seaweedfs
from console.models import Broker, Cluster
from console.sync import do_sync_cluster
from tests.console.simcluster import SimCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

TOPIC = "outage"


class Store:
    """The test's own S3 server: stop (SIGKILL) and start again on the same port and data."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port(with_grpc=True)
        self.server: EmbeddedS3 | None = None

    def start(self) -> None:
        self.server = start_seaweedfs(self.home, s3_port=self.port)

    def kill(self) -> None:
        assert self.server is not None
        self.server.stop(timeout=0)
        self.server = None


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> Iterator[Store]:
    s = Store(tmp_path / "s3")
    s.start()
    assert s.server is not None
    for name, value in s.server.env().items():
        monkeypatch.setenv(name, value)  # the sim's processes inherit it at spawn
    monkeypatch.setenv("STRATA_REMOTE_STORE", "s3://strata-remote/outage")
    ensure_bucket(ObjectStoreConfig.from_env())
    try:
        yield s
    finally:
        if s.server is not None:
            s.server.stop(timeout=0)


class Load:
    """Keyed records produced in batches until stopped; every acknowledged one is remembered."""

    def __init__(self, sim: SimCluster) -> None:
        self.producer = Producer(sim.controller, sim.secret)
        self.acked: dict[int, str] = {}  # offset -> value (one partition)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            batch = [{"key": f"k{n + i}", "value": f"v{n + i}"} for i in range(20)]
            try:
                for (_, offset), rec in zip(self.producer.send(TOPIC, batch), batch, strict=True):
                    self.acked[offset] = rec["value"]
            except Exception as exc:  # remembered, asserted on at the end
                self.errors.append(repr(exc))
            n += 20
            self.stop.wait(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        self.producer.close()


def _leader_replica(sim: SimCluster):
    leader = sim.controller.topic(TOPIC).partitions[0].leader
    with sim.agent(leader) as agent:
        snap = agent.snapshot()
    replica = next(r for r in snap.replicas if r.topic == TOPIC)
    return snap, replica


def _read_all(sim: SimCluster) -> dict[int, str]:
    """Every record of the partition from offset 0, remote segments included."""
    leader = sim.controller.topic(TOPIC).partitions[0].leader
    out: dict[int, str] = {}
    offset = 0
    with sim.agent(leader) as agent:
        while True:
            page = agent.fetch(TOPIC, 0, offset)
            for rec in page.records:
                out[rec.offset] = rec.value
            if page.next_offset >= page.high_watermark or page.next_offset == offset:
                return out
            offset = page.next_offset


def test_an_object_store_outage_under_load_loses_nothing_shows_and_catches_up(
    store: Store, tmp_path: Path, client, viewer
):
    sim = SimCluster(tmp_path / "sim", brokers=2, log_dirs=1)
    load = None
    try:
        sim.controller.create_topic(
            TOPIC,
            1,
            2,
            {
                "remote.storage.enable": "true",
                "segment.bytes": "4096",
                "local.retention.bytes": "8192",
            },
        )
        cluster = Cluster.objects.create(
            name="outage", controller_url=sim.urls["controller"], secret_ref=str(sim.secret_file)
        )
        load = Load(sim)
        wait_until(
            lambda: _leader_replica(sim)[1].remote_log_end_offset > 0, 60, what="copying works"
        )

        store.kill()
        _, before = _leader_replica(sim)
        wait_until(
            lambda: _leader_replica(sim)[0].remote_store_unreachable_since_ms is not None,
            60,
            what="the leader reports the store unreachable",
        )
        wait_until(
            lambda: _leader_replica(sim)[1].remote_copy_lag_segments >= 3,
            60,
            what="copy lag growing while the store is down",
        )
        snap, during = _leader_replica(sim)
        # nothing copied, nothing uncopied deleted locally: the local log starts at or below
        # the first offset the remote tier lacks
        assert during.remote_log_end_offset == before.remote_log_end_offset
        assert during.local_log_start_offset <= during.remote_log_end_offset + 1
        assert snap.remote_store_error

        do_sync_cluster(cluster)
        client.force_login(viewer)
        page = client.get(f"/topics/outage/{TOPIC}/").content.decode()
        assert 'id="store-outage"' in page and "Remote store unreachable since" in page
        brokers_page = client.get("/brokers/?cluster=outage").content.decode()
        assert "data-store-outage" in brokers_page
        assert Broker.objects.filter(
            cluster=cluster, remote_store_unreachable_since__isnull=False
        ).exists()

        store.start()
        wait_until(
            lambda: _leader_replica(sim)[0].remote_store_unreachable_since_ms is None,
            60,
            what="the store reachable again",
        )
        load.finish()
        wait_until(
            lambda: _leader_replica(sim)[1].remote_copy_lag_segments == 0,
            90,
            what="copying caught up",
        )
        _, after = _leader_replica(sim)
        assert after.remote_log_end_offset > during.remote_log_end_offset
        assert load.errors == []
        records = _read_all(sim)
        assert load.acked and all(records.get(o) == v for o, v in load.acked.items())

        do_sync_cluster(cluster)
        page = client.get(f"/topics/outage/{TOPIC}/").content.decode()
        assert 'id="store-outage"' not in page
    finally:
        if load is not None:
            load.finish()
        sim.down()
