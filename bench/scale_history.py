"""History at fleet size (#17): what one history sample and one hourly roll-up cost when the
cluster has ~19,000 tiered topics and 1,200 log dirs. Run inside ``bench_console``'s sync child,
after its syncs, on the cluster they filled (the bench database, never the dev one).

- a sample when every tiered topic is new (no sample before: the first one, or every topic
  changed - what live traffic on every topic costs), and one when nothing changed (the dirs
  only: topics are sampled on change). The synthetic fleet reports no bytes, so its churn moves
  no topic's figures: the first figure is the bound, not a churn;
- the roll-up of one hour in which every tiered topic changed at every 30-second sample (the
  worst case: ``120 x topics`` raw rows, written with ``generate_series``), with the retention
  delete of that hour in the same run (the hour is placed 25 hours back), then the ``VACUUM``
  that reclaims the deleted rows (timed apart: left to autovacuum it would run during the
  page measurements that follow).
"""

from __future__ import annotations

import time
from datetime import timedelta


def measure_history(cluster) -> dict:
    """``{"topics", "dirs", "all_new_s", "all_new_rows", "unchanged_s", "unchanged_topic_rows",
    "worst_hour_rows", "rollup_s", "rollup_deleted", "vacuum_s"}``."""
    from django.db import connection, transaction
    from django.utils import timezone

    from console import history
    from console.models import LogDir, Topic, TopicSample

    def sample(at) -> tuple[float, int]:
        before = TopicSample.objects.count()
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cur:
            history.write_samples(cur, cluster.pk, at)
        return time.perf_counter() - started, TopicSample.objects.count() - before

    tiered = Topic.objects.filter(cluster=cluster).exclude(tiered_state="NONE", remote_bytes=0)
    out = {"topics": tiered.count(), "dirs": LogDir.objects.filter(cluster=cluster).count()}
    with connection.cursor() as cur:
        cur.execute("TRUNCATE console_topicsample, console_logdirsample")
    now = timezone.now()
    out["all_new_s"], out["all_new_rows"] = sample(now)
    out["unchanged_s"], out["unchanged_topic_rows"] = sample(now + timedelta(seconds=30))

    hour = (now - timedelta(hours=25)).replace(minute=0, second=0, microsecond=0)
    fields = ", ".join(history.TOPIC_FIELDS)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE console_topicsample")
        cur.execute(
            f"""
            INSERT INTO console_topicsample (topic_id, resolution, at, {fields})
            SELECT t.id, 'raw', %(hour)s + make_interval(secs => 30 * i), {fields}
            FROM console_topic t CROSS JOIN generate_series(0, 119) i
            WHERE t.cluster_id = %(c)s AND (t.tiered_state <> 'NONE' OR t.remote_bytes > 0)
            """,  # noqa: S608 - column names are constants
            {"hour": hour, "c": cluster.pk},
        )
        out["worst_hour_rows"] = cur.rowcount
        cur.execute("ANALYZE console_topicsample")
    started = time.perf_counter()
    counts = history.roll_up(now)
    out["rollup_s"] = time.perf_counter() - started
    out["rollup_deleted"] = counts.get("console_topicsample_deleted", 0)
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE) console_topicsample")
    out["vacuum_s"] = time.perf_counter() - started
    return out


def history_rows(h: dict) -> list[dict]:
    """The report rows of :func:`measure_history`'s result."""
    return [
        {
            "metric": "history sample, every tiered topic new",
            "value": f"{h['all_new_s'] * 1000:.0f} ms ({h['all_new_rows']:,} topic rows)",
            "target": "",
            "method": f"one `write_samples` in its own transaction: {h['topics']:,} tiered "
            f"topics and {h['dirs']:,} log dirs (a sync writes one at most every 30 s); the "
            "bound under traffic on every topic (the synthetic fleet reports no bytes, so its "
            "churn moves no topic's figures)",
        },
        {
            "metric": "history sample, nothing changed",
            "value": f"{h['unchanged_s'] * 1000:.0f} ms ({h['unchanged_topic_rows']:,} topic rows)",
            "target": "",
            "method": "30 s later: the dirs are sampled, a topic only when its figures changed or "
            "its keep-alive (300 s) is due",
        },
        {
            "metric": "history roll-up of a worst-case hour",
            "value": f"{h['rollup_s']:.1f} s (+ {h['vacuum_s']:.1f} s VACUUM)",
            "target": "",
            "method": f"{h['worst_hour_rows']:,} raw topic rows (every tiered topic changed at "
            "every 30 s sample for an hour) rolled into hourly peaks and, 25 hours old, "
            f"deleted ({h['rollup_deleted']:,}) in the same `roll_up`; then the VACUUM that "
            "reclaims them",
        },
    ]
