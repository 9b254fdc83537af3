"""Console fixtures: a registered cluster and a builder of controller / agent snapshots."""

from __future__ import annotations

import pytest

from console.choices import SyncTrigger
from console.models import Cluster
from console.sync import do_sync_cluster
from tests.console.factories import ClusterBuilder


@pytest.fixture
def cluster(db) -> Cluster:
    return Cluster.objects.create(
        name="local", controller_url="http://127.0.0.1:1", secret_ref="env:STRATA_TEST_SECRET"
    )


@pytest.fixture
def builder() -> ClusterBuilder:
    b = ClusterBuilder(brokers=3, log_dirs=2)
    b.add_topic("orders", partitions=6, rf=3, tiered=True, records=1000, remote_records=400)
    b.add_topic("payments", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    b.add_topic("audit.log", partitions=1, rf=1)
    return b


def sync(cluster: Cluster, builder: ClusterBuilder, *, down=frozenset(), full: bool = False):
    """One sync of ``cluster`` from the builder's current state, as beat would run it."""
    return do_sync_cluster(
        cluster, source=builder.source(set(down)), full=full, trigger=SyncTrigger.BEAT
    ).run


@pytest.fixture
def synced(cluster, builder):
    sync(cluster, builder)
    cluster.refresh_from_db()
    return cluster
