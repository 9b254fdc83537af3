"""KIP-963 tiered metrics and fenced bytes pending purge on the console (#14 gaps 8 and 11):
the topic page's remote-tier panel and "why is local not shrinking?", the API, /metrics."""

from __future__ import annotations

import pytest

from console.models import Partition, Topic
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def test_copy_lag_is_summed_over_the_leaders_and_explains_local_growth(
    viewer_client, cluster, builder
):
    builder.set_tier_metrics("orders", 0, remote_copy_lag_bytes=300_000, remote_copy_lag_segments=3)
    builder.set_tier_metrics(
        "orders", 1, remote_copy_lag_bytes=100_000, remote_copy_lag_segments=1,
        remote_log_size_bytes=40_000,
    )  # fmt: skip
    sync(cluster, builder)
    t = Topic.objects.get(cluster=cluster, name="orders")
    assert (t.remote_copy_lag_bytes, t.remote_copy_lag_segments) == (400_000, 4)
    assert Partition.objects.get(topic=t, partition=1).remote_log_size_bytes == 40_000

    html = viewer_client.get("/topics/local/orders/").content.decode()
    assert "Copy lag" in html and "390.6\xa0KB in 4 segments" in html
    assert "Why is local not shrinking?" in html and "Copying is behind: 4 closed" in html
    body = viewer_client.get("/api/v1/clusters/local/topics/orders").json()
    assert body["tiering"]["remote_copy_lag_segments"] == 4
    p1 = next(p for p in body["partitions"] if p["partition"] == 1)
    assert p1["remote_copy_lag_bytes"] == 100_000 and p1["remote_log_size_bytes"] == 40_000
    # KIP-1005's names for offsets the partition rows already carried
    assert p1["earliest_local_offset"] == p1["local_log_start_offset"]
    assert p1["latest_tiered_offset"] == p1["remote_log_end_offset"]
    metrics = viewer_client.get("/metrics").content.decode()
    assert 'strata_topic_remote_copy_lag_bytes{cluster="local",topic="orders"} 400000.0' in metrics
    assert 'topic="payments"' not in metrics  # not tiered: no series


def test_fenced_bytes_pending_purge_after_a_delete_disablement(viewer_client, cluster, builder):
    builder.disable_tiering("orders", policy="delete", done=True)
    builder.set_tier_metrics(
        "orders", 2, fenced_remote_bytes=8192, fenced_remote_segments=2,
        remote_delete_lag_bytes=8192, remote_delete_lag_segments=2,
    )  # fmt: skip
    sync(cluster, builder)
    html = viewer_client.get("/topics/local/orders/").content.decode()
    assert "Fenced, pending purge" in html and "8.0\xa0KB in 2 segments" in html
    metrics = viewer_client.get("/metrics").content.decode()
    assert 'strata_topic_fenced_remote_bytes{cluster="local",topic="orders"} 8192.0' in metrics

    builder.set_tier_metrics("orders", 2, fenced_remote_bytes=0, fenced_remote_segments=0)
    sync(cluster, builder)  # the purge deleted them
    assert Topic.objects.get(cluster=cluster, name="orders").fenced_remote_segments == 0


def test_a_topic_that_was_never_tiered_has_no_remote_tier_panel(viewer_client, synced):
    html = viewer_client.get("/topics/local/payments/").content.decode()
    assert "Copy lag" not in html and "Why is local not shrinking?" not in html


def test_metrics_cap_the_per_topic_series_and_always_give_cluster_totals(
    client, viewer, synced, builder, settings
):
    """#17: a fleet has tens of thousands of tiered topics; /metrics lists per-topic series for
    at most STRATA_METRICS_TOPIC_LIMIT of them per cluster (the most remote bytes first), counts
    the rest in strata_topic_series_omitted, always gives the cluster totals, and
    ?topics=all lists every tiered topic."""
    builder.add_topic("payments", partitions=2, rf=3, tiered=True)
    builder.set_tier_metrics("payments", 0, remote_log_size_bytes=7_000)
    sync(synced, builder)
    client.force_login(viewer)
    tiered = Topic.objects.filter(cluster=synced).exclude(tiered_state="NONE")
    assert tiered.count() >= 2
    biggest = tiered.order_by("-remote_log_size_bytes", "name").first()
    total = sum(t.remote_log_size_bytes for t in tiered)
    settings.STRATA_METRICS_TOPIC_LIMIT = 1
    body = client.get("/metrics").content.decode()
    shown = [line for line in body.splitlines() if line.startswith("strata_topic_remote_log_size")]
    assert shown == [
        f'strata_topic_remote_log_size_bytes{{cluster="local",topic="{biggest.name}"}} '
        f"{float(biggest.remote_log_size_bytes)}"
    ]
    assert f'strata_cluster_remote_log_size_bytes{{cluster="local"}} {float(total)}' in body
    assert f'strata_topic_series_omitted{{cluster="local"}} {float(tiered.count() - 1)}' in body
    body = client.get("/metrics?topics=all").content.decode()
    every = [line for line in body.splitlines() if line.startswith("strata_topic_remote_log_size")]
    assert len(every) == tiered.count()
    assert 'strata_topic_series_omitted{cluster="local"} 0.0' in body


def test_metrics_read_the_topics_per_tiered_state_the_sync_kept(client, viewer, synced, builder):
    """#17: /metrics takes its topic counts and KIP-963 totals per tiered state from the
    cluster's row (``topic_states``, kept by every sync), not from the topics at each scrape:
    they follow a sync, and a topic written without one does not move them."""
    client.force_login(viewer)
    tiered = Topic.objects.filter(cluster=synced).exclude(tiered_state="NONE")
    body = client.get("/metrics").content.decode()
    assert (
        f'strata_topics{{cluster="local",tiered_state="ENABLED"}} {float(tiered.count())}' in body
    )
    builder.disable_tiering("orders", policy="retain")
    sync(synced, builder)
    body = client.get("/metrics").content.decode()
    assert 'strata_topics{cluster="local",tiered_state="DISABLING"} 1.0' in body
    assert (
        f'strata_topics{{cluster="local",tiered_state="ENABLED"}} {float(tiered.count() - 1)}'
        in body
    )
    Topic.objects.filter(cluster=synced, name="orders").update(tiered_state="NONE")
    assert 'tiered_state="DISABLING"} 1.0' in client.get("/metrics").content.decode()


def test_the_kip963_families_are_the_fields_the_sync_sums_per_state():
    from console.metrics import TIER_METRICS_HELP
    from console.models.clusters import TOPIC_STATE_SUMS

    assert tuple(TIER_METRICS_HELP) == TOPIC_STATE_SUMS
