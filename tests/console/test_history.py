"""History (issue #15): the sync samples log dirs and tiered topics, samples roll up into hourly
peaks with bounded retention, and the pages and API show them as charts and series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from console import charts, history
from console.choices import LogDirState
from console.models import LogDir, LogDirSample, Topic, TopicSample
from console.models.history import Resolution
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db

GiB = 1024**3
NOW = datetime(2026, 11, 25, 12, 30, tzinfo=UTC)


@pytest.fixture
def browser_client(client, viewer):
    client.force_login(viewer)
    return client


@pytest.fixture
def every_sync(settings):
    settings.STRATA_HISTORY_SAMPLE_SECONDS = 0.001
    return settings


def test_a_sync_samples_each_dir_and_each_tiered_topic_at_most_every_interval(
    cluster, builder, settings
):
    settings.STRATA_HISTORY_SAMPLE_SECONDS = 3600
    sync(cluster, builder)
    assert LogDirSample.objects.filter(log_dir__cluster=cluster).count() == 6  # 3 brokers x 2
    # orders is tiered; payments and audit.log never were: nothing of theirs to follow
    assert list(TopicSample.objects.values_list("topic__name", flat=True)) == ["orders"]
    cluster.refresh_from_db()
    assert cluster.history_sampled_at is not None
    sync(cluster, builder)  # within the interval: no second sample
    assert LogDirSample.objects.count() == 6 and TopicSample.objects.count() == 1


def test_a_tiered_topic_is_sampled_when_it_changes_or_its_keep_alive_is_due(
    cluster, builder, every_sync
):
    every_sync.STRATA_HISTORY_KEEPALIVE_SECONDS = 300
    sync(cluster, builder)
    first = TopicSample.objects.get()
    with connection.cursor() as cur:  # unchanged figures: nothing new to follow
        history.write_samples(cur, cluster.pk, first.at + timedelta(seconds=30))
        history.write_samples(cur, cluster.pk, first.at + timedelta(seconds=299))
    assert TopicSample.objects.count() == 1
    assert LogDirSample.objects.filter(at__gt=first.at).count() == 2 * 6  # dirs: every time
    Topic.objects.filter(pk=first.topic_id).update(remote_copy_lag_bytes=7)
    with connection.cursor() as cur:
        history.write_samples(cur, cluster.pk, first.at + timedelta(seconds=330))
        history.write_samples(cur, cluster.pk, first.at + timedelta(seconds=360))  # same again
        history.write_samples(cur, cluster.pk, first.at + timedelta(seconds=630))  # keep-alive
    lags = TopicSample.objects.order_by("at").values_list("remote_copy_lag_bytes", flat=True)
    assert list(lags) == [first.remote_copy_lag_bytes, 7, 7]
    at = TopicSample.objects.order_by("at").values_list("at", flat=True)
    assert [(t - first.at).seconds for t in at] == [0, 330, 630]


def test_a_topic_series_holds_the_last_figures_until_the_hold_then_breaks(cluster, builder):
    sync(cluster, builder)
    TopicSample.objects.all().delete()
    t = Topic.objects.get(cluster=cluster, name="orders")
    win = history.RANGES["1h"]  # 30 buckets of 2 minutes
    start, _ = win.bounds(NOW)

    def sample(at, remote):
        TopicSample.objects.create(
            topic=t,
            at=at,
            remote_bytes=remote,
            local_bytes=5,
            fenced_remote_bytes=0,
            remote_copy_lag_bytes=0,
            remote_delete_lag_bytes=0,
        )

    sample(start - timedelta(minutes=3), 100)  # before the window: held into it
    sample(start + timedelta(minutes=4, seconds=10), 900)  # bucket 2: a peak ...
    sample(start + timedelta(minutes=5), 200)  # ... then the figure that holds
    sample(start + timedelta(minutes=52), 300)  # after a long silence
    points = history.topic_series([t.pk], win, NOW)[t.pk]
    by_bucket = {p["bucket"]: (p["remote_bytes"], p.get("held", False)) for p in points}
    assert by_bucket[0] == by_bucket[1] == (100, True)
    assert by_bucket[2] == (900, False) and by_bucket[3] == (200, True)
    hold_buckets = int(history.hold().total_seconds()) // win.step  # 10 minutes: 5 buckets
    assert max(b for b in by_bucket if b < 26) == 2 + hold_buckets  # then a gap: nothing known
    assert by_bucket[26] == (300, False) and by_bucket[29] == (300, True)
    assert sorted(by_bucket) == [*range(0, 3 + hold_buckets), *range(26, 30)]
    # an empty window with no sample before it has no point at all
    assert history.topic_series([t.pk], win, NOW + timedelta(days=1))[t.pk] == []


def test_a_broker_whose_agent_did_not_answer_leaves_a_gap(cluster, builder, every_sync):
    sync(cluster, builder)
    sync(cluster, builder, down={3})
    per_broker = {
        b: LogDirSample.objects.filter(log_dir__broker__broker_id=b).count() for b in (1, 2, 3)
    }
    assert per_broker == {1: 4, 2: 4, 3: 2}


def test_a_failed_dir_is_sampled_offline_with_no_probe(cluster, builder, every_sync):
    sync(cluster, builder)
    builder.fail_log_dir(2, "logdir-0")
    sync(cluster, builder)
    rows = LogDirSample.objects.filter(log_dir__broker__broker_id=2, log_dir__name="logdir-0")
    before, after = rows.order_by("at")
    assert (before.state, before.probe_latency_ms) == (LogDirState.ONLINE, 1.5)
    assert (after.state, after.probe_latency_ms) == (LogDirState.OFFLINE, None)
    # even when the agent still reports its last probe from before the failure
    LogDir.objects.filter(pk=after.log_dir_id).update(probe_latency_ms=0.9)
    with connection.cursor() as cur:
        history.write_samples(cur, cluster.pk, after.at + timedelta(seconds=30))
    assert rows.order_by("at").last().probe_latency_ms is None
    assert after.used_bytes == 40 * GiB and after.total_bytes == 100 * GiB


def _dir(cluster, builder) -> LogDir:
    sync(cluster, builder)
    LogDirSample.objects.all().delete()
    return LogDir.objects.get(broker__broker_id=2, name="logdir-0")


def _sample(d: LogDir, at: datetime, used: int, latency: float | None, state: str, **kw):
    return LogDirSample.objects.create(
        log_dir=d,
        at=at,
        used_bytes=used,
        total_bytes=100,
        probe_latency_ms=latency,
        state=state,
        resolution=kw.get("resolution", Resolution.RAW),
    )


def test_series_keep_each_buckets_peak_and_worst_state(cluster, builder):
    d = _dir(cluster, builder)
    win = history.RANGES["1h"]  # 2-minute buckets
    start, _ = win.bounds(NOW)
    _sample(d, start + timedelta(seconds=10), 40, 1.0, LogDirState.ONLINE)
    _sample(d, start + timedelta(seconds=70), 45, 9.0, LogDirState.DEGRADED)
    _sample(d, start + timedelta(minutes=30), 50, None, LogDirState.OFFLINE)
    points = history.dir_series([d.pk], win, NOW)[d.pk]
    assert [p["bucket"] for p in points] == [0, 15]
    assert points[0]["used_bytes"] == 45 and points[0]["probe_latency_ms"] == 9.0
    assert points[0]["state"] == LogDirState.DEGRADED
    assert points[1]["state"] == LogDirState.OFFLINE and points[1]["probe_latency_ms"] is None


def test_a_chart_breaks_its_line_at_a_gap_and_bands_the_offline_buckets(cluster, builder):
    d = _dir(cluster, builder)
    win = history.RANGES["1h"]
    start, end = win.bounds(NOW)
    for minute, used, latency, state in (
        (1, 40, 1.0, LogDirState.ONLINE),
        (3, 41, 1.2, LogDirState.ONLINE),
        (5, 42, 1.1, LogDirState.ONLINE),  # then nothing for 20 minutes: the agent was away
        (27, 42, None, LogDirState.OFFLINE),
        (29, 10, 2.0, LogDirState.ONLINE),
    ):
        _sample(d, start + timedelta(minutes=minute), used, latency, state)
    points = history.dir_series([d.pk], win, NOW)[d.pk]
    usage = charts.chart(points, [charts.USAGE], win, start, end, unit="%", state_bands=True)
    assert usage.paths[0]["d"].count("M") == 2  # one line before the gap, one after
    assert usage.paths[0]["d"].count("L") == 3
    assert [b["css"] for b in usage.bands] == ["offline"]
    assert "used now 10.0%, peak 42.0%" in usage.summary and "OFFLINE" in usage.summary
    latency = charts.chart(points, [charts.LATENCY], win, start, end, unit="ms")
    assert "probe latency now 2.0 ms, peak 2.0 ms" in latency.summary
    # no latency in the OFFLINE bucket: the line resumes after it, not across it
    assert latency.paths[0]["d"].count("M") == 2 and latency.paths[0]["d"].count("L") == 2


def test_roll_up_keeps_hourly_peaks_and_deletes_what_is_past_retention(cluster, builder):
    d = _dir(cluster, builder)
    hour = NOW.replace(minute=0)
    _sample(d, hour - timedelta(minutes=50), 40, 1.0, LogDirState.ONLINE)
    _sample(d, hour - timedelta(minutes=20), 60, 3.0, LogDirState.OFFLINE)
    _sample(d, hour - timedelta(minutes=10), 50, 2.0, LogDirState.DEGRADED)
    _sample(d, hour + timedelta(minutes=5), 55, 1.0, LogDirState.ONLINE)  # this hour: not yet
    _sample(d, NOW - timedelta(hours=25), 1, 1.0, LogDirState.ONLINE)  # past 24 h
    _sample(d, NOW - timedelta(days=31), 1, 1.0, LogDirState.ONLINE, resolution=Resolution.HOUR)
    t = Topic.objects.get(cluster=cluster, name="orders")
    for minutes, remote in ((40, 100), (20, 300)):
        TopicSample.objects.create(
            topic=t,
            at=hour - timedelta(minutes=minutes),
            remote_bytes=remote,
            local_bytes=5,
            fenced_remote_bytes=0,
            remote_copy_lag_bytes=remote // 10,
            remote_delete_lag_bytes=0,
        )

    history.roll_up(NOW)
    history.roll_up(NOW)  # idempotent

    hourly = LogDirSample.objects.filter(resolution=Resolution.HOUR).order_by("at")
    assert [(h.at, h.used_bytes, h.probe_latency_ms, h.state) for h in hourly] == [
        (hour - timedelta(hours=25), 1, 1.0, LogDirState.ONLINE),
        (hour - timedelta(hours=1), 60, 3.0, LogDirState.OFFLINE),
    ]
    raw = LogDirSample.objects.filter(resolution=Resolution.RAW)
    assert raw.count() == 4 and not raw.filter(at__lt=NOW - history.RAW_KEPT).exists()
    topic_hour = TopicSample.objects.get(resolution=Resolution.HOUR)
    assert (topic_hour.remote_bytes, topic_hour.remote_copy_lag_bytes) == (300, 30)

    # The 30-day window reads the hourly rows and the raw samples of the hour in progress.
    month = history.dir_series([d.pk], history.RANGES["30d"], NOW)[d.pk]
    assert [p["used_bytes"] for p in month] == [1, 60, 55]


def test_brokers_page_draws_each_dirs_sparklines_and_the_selected_dirs_history(
    browser_client, cluster, builder, every_sync
):
    sync(cluster, builder)
    builder.fail_log_dir(2, "logdir-0")
    sync(cluster, builder)
    html = browser_client.get("/brokers/?dir=2:logdir-0").content.decode()
    assert html.count('data-chart="usage"') == 6 + 1  # a sparkline per dir, the larger chart
    assert html.count('data-chart="latency"') == 6 + 1
    assert 'id="dir-history"' in html and "OFFLINE in 1 of the buckets" in html
    assert 'aria-current="true">1h<' in html
    month = browser_client.get("/brokers/?dir=2:logdir-0&range=30d").content.decode()
    assert 'aria-current="true">30d<' in month and "Peaks per hour" in month


def test_topic_page_draws_bytes_and_lag_for_a_tiered_topic(
    browser_client, cluster, builder, every_sync
):
    sync(cluster, builder)
    sync(cluster, builder)
    html = browser_client.get("/topics/local/orders/").content.decode()
    assert 'id="topic-history"' in html and 'data-chart="bytes"' in html
    assert "remote: now 234.4 KB" in html  # 6 partitions x 400 records x 100 bytes
    assert "at least every 5 min" in html and "last figures for up to 10 min" in html
    never = browser_client.get("/topics/local/payments/").content.decode()
    assert "never been tiered" in never and 'data-chart="bytes"' not in never


def test_the_api_serves_the_same_series(client, viewer, cluster, builder, every_sync):
    sync(cluster, builder)
    builder.fail_log_dir(2, "logdir-0")
    sync(cluster, builder)
    client.force_login(viewer)
    body = client.get("/api/v1/clusters/local/brokers/2/log-dirs/logdir-0/history?range=1h").json()
    assert (body["range"], body["step_seconds"], body["broker"]) == ("1h", 120, 2)
    assert body["points"][-1]["state"] == LogDirState.OFFLINE
    assert body["points"][-1]["used_bytes"] == 40 * GiB
    topic = client.get("/api/v1/clusters/local/topics/orders/history").json()
    assert topic["range"] == "1h" and topic["points"][-1]["remote_bytes"] == 240_000
    bad = client.get("/api/v1/clusters/local/topics/orders/history?range=7d")
    assert bad.status_code == 400 and bad.json()["error"] == "INVALID_REQUEST"
    missing = client.get("/api/v1/clusters/local/brokers/9/log-dirs/logdir-0/history")
    assert missing.status_code == 404 and missing.json()["error"] == "NOT_FOUND"
