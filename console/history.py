"""History of log dirs and tiered topics: written by the sync, rolled up hourly, read as series.

:func:`write_samples` runs in a sync's transaction at most every ``STRATA_HISTORY_SAMPLE_SECONDS``:
every answering broker's dirs each time, but a tiered topic only when its figures changed or its
keep-alive is due (a 1,000,000-partition fleet would write ~55 M mostly repeated topic rows a
day). A topic's sample therefore *holds* for at most :func:`hold`, after which a stopped sync
shows as a gap. :func:`roll_up` keeps each hour's *peak*, never an average (a trend must not
average an incident away), and is idempotent. :func:`dir_series` / :func:`topic_series` are one
query for any number of dirs or topics; a bucket without a sample is a gap.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from console.choices import LogDirState
from console.models.history import Resolution

__all__ = [
    "DIR_FIELDS",
    "HOURLY_KEPT",
    "RANGES",
    "RAW_KEPT",
    "TOPIC_FIELDS",
    "Window",
    "dir_series",
    "hold",
    "keep_alive",
    "roll_up",
    "sample_due",
    "topic_series",
    "window",
    "write_samples",
]

RAW_KEPT = timedelta(hours=24)
HOURLY_KEPT = timedelta(days=30)

#: States in order of severity: a bucket shows the worst state seen in it.
_STATES = (LogDirState.ONLINE, LogDirState.DEGRADED, LogDirState.OFFLINE)
_STATE_RANK = (
    f"CASE state WHEN '{LogDirState.OFFLINE}' THEN 2 "
    f"WHEN '{LogDirState.DEGRADED}' THEN 1 ELSE 0 END"
)

#: The measured columns of each series (every one is rolled up and bucketed by its peak).
DIR_FIELDS = ("used_bytes", "total_bytes", "probe_latency_ms")
TOPIC_FIELDS = (
    "remote_bytes",
    "local_bytes",
    "fenced_remote_bytes",
    "remote_copy_lag_bytes",
    "remote_delete_lag_bytes",
)


@dataclasses.dataclass(frozen=True)
class Window:
    """A chart's time axis: ``buckets`` buckets of ``step`` seconds ending at ``end``."""

    name: str
    span: timedelta
    step: int

    @property
    def step_text(self) -> str:
        """``2 min``, ``5 min``, ``hour``: what one bucket of this window spans."""
        if self.step >= 3600:
            return "hour"
        return f"{self.step // 60} min" if self.step % 60 == 0 else f"{self.step} s"

    def bounds(self, now: datetime) -> tuple[datetime, datetime]:
        end = now
        if self.step >= 3600:  # hourly buckets line up with the hourly rows
            end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        return end - self.span, end


#: The ranges the pages and the API offer; ``spark`` is the small chart in the disk grid.
RANGES = {
    "1h": Window("1h", timedelta(hours=1), 120),
    "24h": Window("24h", timedelta(hours=24), 300),
    "30d": Window("30d", timedelta(days=30), 3600),
}
SPARK = RANGES["1h"]


def window(name: str | None) -> Window:
    """The window called ``name`` (``1h``, ``24h``, ``30d``); the last hour when unknown or
    empty (an incident is looked at first over the last hour; 24 h and 30 d are a click away)."""
    return RANGES.get(name or "", RANGES["1h"])


def sample_due(last: datetime | None, now: datetime) -> bool:
    """A cluster's samples are due when none was written for ``STRATA_HISTORY_SAMPLE_SECONDS``
    (0 turns sampling off)."""
    seconds = settings.STRATA_HISTORY_SAMPLE_SECONDS
    if seconds <= 0:
        return False
    return last is None or (now - last).total_seconds() >= seconds * 0.95


def keep_alive() -> timedelta:
    """How long a tiered topic's unchanged figures go without a new sample:
    ``STRATA_HISTORY_KEEPALIVE_SECONDS``, at least the sample interval and at most 30 minutes
    (every hour rolled up must hold a sample of every followed topic)."""
    seconds = settings.STRATA_HISTORY_KEEPALIVE_SECONDS
    return timedelta(seconds=min(max(seconds, settings.STRATA_HISTORY_SAMPLE_SECONDS), 1800))


def hold() -> timedelta:
    """How long a topic's sample stands for its topic in the series: twice the keep-alive (the
    next keep-alive sample comes at the first due sync after it, which may be late)."""
    return 2 * keep_alive()


def write_samples(cur, cluster_pk: int, now: datetime) -> None:
    """One raw sample of each log dir of each answering broker, and of each tiered topic whose
    figures differ from its last sample or whose last sample is :func:`keep_alive` old. An
    OFFLINE dir has no probe latency (the agent still reports its last probe, from before the
    failure: a chart must not draw it as current).

    Runs on the sync's cursor, in its transaction (the samples are the state it commits). A
    topic's last sample is looked for among the samples of the last keep-alive only (one range
    of the ``(resolution, at)`` index, at most keep-alive / sample interval samples a topic): a
    topic without one there is due anyway. A per-topic ``ORDER BY at DESC LIMIT 1`` lookup let
    the planner walk that index backwards filtering on the topic, once per topic: 20-35 s for
    18,818 tiered topics whenever the statistics favoured it (#17)."""
    params = {
        "c": cluster_pk,
        "now": now,
        "raw": Resolution.RAW,
        "offline": LogDirState.OFFLINE,
        "stale": now - keep_alive(),
    }
    cur.execute(
        """
        INSERT INTO console_logdirsample
            (log_dir_id, resolution, at, used_bytes, total_bytes, probe_latency_ms, state)
        SELECT d.id, %(raw)s, %(now)s, GREATEST(d.total_bytes - d.usable_bytes, 0),
               d.total_bytes,
               CASE WHEN d.state = %(offline)s THEN NULL ELSE d.probe_latency_ms END, d.state
        FROM console_logdir d JOIN console_broker b ON b.id = d.broker_id
        WHERE d.cluster_id = %(c)s AND b.error = ''
        ON CONFLICT DO NOTHING
        """,
        params,
    )
    cur.execute(
        f"""
        INSERT INTO console_topicsample (topic_id, resolution, at, {", ".join(TOPIC_FIELDS)})
        SELECT t.id, %(raw)s, %(now)s, {", ".join(f"t.{f}" for f in TOPIC_FIELDS)}
        FROM console_topic t
        LEFT JOIN (
            SELECT DISTINCT ON (s.topic_id) s.topic_id, {", ".join(f"s.{f}" for f in TOPIC_FIELDS)}
            FROM console_topicsample s
            WHERE s.resolution = %(raw)s AND s.at > %(stale)s
            ORDER BY s.topic_id, s.at DESC
        ) last ON last.topic_id = t.id
        WHERE t.cluster_id = %(c)s AND (t.tiered_state <> 'NONE' OR t.remote_bytes > 0)
          AND (last.topic_id IS NULL
               OR ({", ".join(f"last.{f}" for f in TOPIC_FIELDS)})
                  IS DISTINCT FROM ({", ".join(f"t.{f}" for f in TOPIC_FIELDS)}))
        ON CONFLICT DO NOTHING
        """,  # noqa: S608 - column names are constants
        params,
    )
    cur.execute("UPDATE console_cluster SET history_sampled_at = %(now)s WHERE id = %(c)s", params)


def roll_up(now: datetime | None = None) -> dict[str, int]:
    """Roll raw samples into hourly peaks (from the last rolled hour on) and delete what is past
    its retention. Safe to run at any time and more than once."""
    now = now or timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    counts: dict[str, int] = {}
    specs = (
        ("console_logdirsample", "log_dir_id", DIR_FIELDS, True),
        ("console_topicsample", "topic_id", TOPIC_FIELDS, False),
    )
    with transaction.atomic(), connection.cursor() as cur:
        for table, fk, fields, has_state in specs:
            cols = list(fields) + (["state"] if has_state else [])
            peaks = [f"max({f})" for f in fields]
            if has_state:
                names = ", ".join(f"'{s}'" for s in _STATES)
                peaks.append(f"(ARRAY[{names}])[max({_STATE_RANK}) + 1]")
            cur.execute(
                f"""
                INSERT INTO {table} ({fk}, resolution, at, {", ".join(cols)})
                SELECT {fk}, %(hourly)s, date_trunc('hour', at), {", ".join(peaks)}
                FROM {table}
                WHERE resolution = %(raw)s AND at < %(hour)s
                  AND at >= COALESCE(
                      (SELECT max(at) FROM {table} WHERE resolution = %(hourly)s), '-infinity')
                GROUP BY {fk}, date_trunc('hour', at)
                ON CONFLICT ({fk}, resolution, at) DO UPDATE SET
                    {", ".join(f"{c} = EXCLUDED.{c}" for c in cols)}
                """,  # noqa: S608 - table and column names are constants
                {"hourly": Resolution.HOUR, "raw": Resolution.RAW, "hour": hour},
            )
            counts[f"{table}_hours"] = cur.rowcount
            cur.execute(
                f"""
                DELETE FROM {table}
                WHERE (resolution = %(raw)s AND at < %(raw_before)s)
                   OR (resolution = %(hourly)s AND at < %(hourly_before)s)
                """,  # noqa: S608
                {
                    "raw": Resolution.RAW,
                    "hourly": Resolution.HOUR,
                    "raw_before": now - RAW_KEPT,
                    "hourly_before": now - HOURLY_KEPT,
                },
            )
            counts[f"{table}_deleted"] = cur.rowcount
    return counts


def _resolutions(win: Window) -> list[str]:
    """Windows of hourly buckets read the hourly rows and the raw samples not rolled up yet;
    shorter buckets read raw samples."""
    return [Resolution.RAW, Resolution.HOUR] if win.step >= 3600 else [Resolution.RAW]


def dir_series(log_dir_ids: list[int], win: Window, now: datetime | None = None):
    """``{log_dir_id: [{"at", "bucket", "used_bytes", "total_bytes", "probe_latency_ms",
    "state"}, ...]}`` over ``win``: the peaks and the worst state per bucket, for any number of
    dirs in one query (dirs are sampled at every sample: a bucket without one is a gap)."""
    now = now or timezone.now()
    if not log_dir_ids:
        return {}
    start, end = win.bounds(now)
    peaks = ", ".join([f"max({f})" for f in DIR_FIELDS] + [f"max({_STATE_RANK})"])
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT log_dir_id, floor(extract(epoch FROM at - %(start)s) / %(step)s)::int,
                   {peaks}
            FROM console_logdirsample
            WHERE log_dir_id = ANY(%(ids)s) AND resolution = ANY(%(res)s)
              AND at >= %(start)s AND at < %(end)s
            GROUP BY 1, 2 ORDER BY 1, 2
            """,  # noqa: S608 - column names are constants
            {
                "ids": log_dir_ids,
                "res": _resolutions(win),
                "start": start,
                "end": end,
                "step": win.step,
            },
        )
        rows = cur.fetchall()
    out: dict[int, list[dict]] = {i: [] for i in log_dir_ids}
    for row in rows:
        point = {"bucket": row[1], "at": start + timedelta(seconds=row[1] * win.step)}
        point.update(zip(DIR_FIELDS, row[2 : 2 + len(DIR_FIELDS)], strict=True))
        point["state"] = _STATES[row[-1]]
        out[row[0]].append(point)
    return out


def topic_series(topic_ids: list[int], win: Window, now: datetime | None = None):
    """``{topic_id: [{"at", "bucket", <TOPIC_FIELDS>}, ...]}`` over ``win``.

    Topics are sampled on change (see the module), so a bucket without a sample takes the last
    figures before it (the sample still *holds*) when they are at most :func:`hold` old; such a
    point has ``"held": True``. A bucket with samples shows their peak. One query: the buckets'
    peaks and last figures, and each topic's last sample before the window."""
    now = now or timezone.now()
    if not topic_ids:
        return {}
    start, end = win.bounds(now)
    span = hold()
    fields = ", ".join(TOPIC_FIELDS)
    peaks = ", ".join(f"max({f})" for f in TOPIC_FIELDS)
    lasts = ", ".join(f"(array_agg({f} ORDER BY at DESC))[1]" for f in TOPIC_FIELDS)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            (SELECT topic_id, floor(extract(epoch FROM at - %(start)s) / %(step)s)::int,
                    {peaks}, max(at), {lasts}
             FROM console_topicsample
             WHERE topic_id = ANY(%(ids)s) AND resolution = ANY(%(res)s)
               AND at >= %(start)s AND at < %(end)s
             GROUP BY 1, 2)
            UNION ALL
            (SELECT DISTINCT ON (topic_id) topic_id, -1, {fields}, at, {fields}
             FROM console_topicsample
             WHERE topic_id = ANY(%(ids)s) AND resolution = ANY(%(res)s)
               AND at < %(start)s AND at >= %(since)s
             ORDER BY topic_id, at DESC)
            ORDER BY 1, 2
            """,  # noqa: S608 - column names are constants
            {
                "ids": topic_ids,
                "res": _resolutions(win),
                "start": start,
                "end": end,
                "step": win.step,
                "since": start - span,
            },
        )
        rows = cur.fetchall()
    n = len(TOPIC_FIELDS)
    by_topic: dict[int, dict[int, tuple]] = {i: {} for i in topic_ids}
    for row in rows:
        by_topic[row[0]][row[1]] = row[2:]
    out: dict[int, list[dict]] = {}
    buckets = int((end - start).total_seconds()) // win.step
    for topic_id, found in by_topic.items():
        points, last = [], found.get(-1)  # last: (peaks..., at, lasts...) of the sample before
        for bucket in range(buckets):
            at = start + timedelta(seconds=bucket * win.step)
            if bucket in found:
                last = found[bucket]
                peaks = dict(zip(TOPIC_FIELDS, last[:n], strict=True))
                points.append({"bucket": bucket, "at": at, **peaks})
            elif last is not None and at - last[n] < span:
                held = dict(zip(TOPIC_FIELDS, last[n + 1 :], strict=True))
                points.append({"bucket": bucket, "at": at, **held, "held": True})
        out[topic_id] = points
    return out
