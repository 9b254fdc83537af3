"""Server-rendered SVG charts of history series (:mod:`console.history`): no script, no library.

:func:`chart` turns bucketed points into what ``console/partials/chart.html`` draws: one SVG
path per line (a missing bucket breaks the line: a gap is "nothing known", never interpolated),
bands where a log dir was DEGRADED or OFFLINE, the axis' ends, and a text summary for screen
readers and tests (latest and peak of each line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime

from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from console.choices import LogDirState
from console.history import (
    RANGES,
    SPARK,
    Window,
    dir_series,
    hold,
    keep_alive,
    topic_series,
    window,
)

__all__ = ["Chart", "Line", "chart", "dir_charts", "dir_sparks", "topic_charts"]


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a chart: ``value(point)`` (None: no value in that bucket), its name and the
    CSS class that colours it."""

    name: str
    value: Callable[[dict], float | None]
    css: str = "l1"


@dataclasses.dataclass
class Chart:
    width: int
    height: int
    paths: list[dict]
    bands: list[dict]
    start: datetime
    end: datetime
    low: float
    top: float
    axis: str
    unit: str
    summary: str
    empty: bool


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":  # as the pages write sizes elsewhere, with a plain space
        return filesizeformat(value).replace("\xa0", " ")
    if unit == "%":
        return f"{value:.1f}%" if value >= 1 or value == 0 else f"{value:.2g}%"
    return f"{value:.1f} {unit}"


def chart(
    points: Sequence[dict],
    lines: Sequence[Line],
    win: Window,
    start: datetime,
    end: datetime,
    *,
    unit: str = "",
    width: int = 600,
    height: int = 120,
    top: float | None = None,
    from_zero: bool = True,
    state_bands: bool = False,
) -> Chart:
    """Lay out ``points`` (each with ``bucket``, from :func:`console.history.dir_series` or
    :func:`~console.history.topic_series`) on ``win``'s axis from ``start`` to ``end``.

    The y axis runs from 0 to ``top`` (default: the largest value); with ``from_zero=False``
    (sparklines) from the smallest value to the largest, so that a small change still shows as
    a slope (the figure next to it gives the level). ``state_bands`` shades the buckets whose
    worst state was DEGRADED or OFFLINE."""
    buckets = max(1, round((end - start).total_seconds() / win.step))
    values = [[line.value(p) for p in points] for line in lines]
    seen = [v for vs in values for v in vs if v is not None]
    peak = max(seen, default=0.0)
    low = 0.0 if from_zero else min(seen, default=0.0)
    if top is None:
        top = peak if peak > low else low + 1.0
    x_of = width / buckets

    def xy(bucket: int, value: float) -> str:
        x = (bucket + 0.5) * x_of
        y = height - 2 - (height - 4) * min(max((value - low) / (top - low), 0.0), 1.0)
        return f"{x:.1f},{y:.1f}"

    paths = []
    for line, vs in zip(lines, values, strict=True):
        parts: list[str] = []
        previous = None
        for point, value in zip(points, vs, strict=True):
            if value is None:
                previous = None
                continue
            joined = previous is not None and point["bucket"] - previous == 1
            parts.append(("L" if joined else "M") + xy(point["bucket"], value))
            previous = point["bucket"]
        latest = next((v for v in reversed(vs) if v is not None), None)
        highest = max((v for v in vs if v is not None), default=None)
        paths.append(
            {
                "name": line.name,
                "css": line.css,
                "d": " ".join(parts),
                "latest": _fmt(latest, unit),
                "peak": _fmt(highest, unit),
            }
        )
    bands = []
    if state_bands:
        for point in points:
            state = point.get("state")
            if state in (LogDirState.DEGRADED, LogDirState.OFFLINE):
                bands.append(
                    {
                        "x": f"{point['bucket'] * x_of:.1f}",
                        "w": f"{max(x_of, 1.0):.1f}",
                        "css": state.lower(),
                        "title": f"{state} at {point['at']:%Y-%m-%d %H:%M} UTC",
                    }
                )
    summary = "; ".join(f"{p['name']} now {p['latest']}, peak {p['peak']}" for p in paths)
    if bands:
        worst = "OFFLINE" if any(b["css"] == "offline" for b in bands) else "DEGRADED"
        summary += f"; {worst} in {len(bands)} of the buckets"
    return Chart(
        width=width,
        height=height,
        paths=paths,
        bands=bands,
        start=start,
        end=end,
        low=low,
        top=top,
        axis=f"{_fmt(low, unit)} to {_fmt(top, unit)}",
        unit=unit,
        summary=summary if seen or bands else "no samples yet in this window",
        empty=not points,
    )


# -- the charts the pages show -----------------------------------------------------------------


def _usage_pct(p: dict) -> float | None:
    total = p.get("total_bytes")
    return 100.0 * p["used_bytes"] / total if total else None


USAGE = Line("used", _usage_pct, "l1")
LATENCY = Line("probe latency", lambda p: p.get("probe_latency_ms"), "l2")


def dir_sparks(dirs: Sequence, now: datetime | None = None) -> dict[int, dict[str, Chart]]:
    """The disk grid's small charts, the last hour of each dir: usage and probe latency, each
    scaled to its own range, with DEGRADED / OFFLINE bands (one query for all ``dirs``)."""
    now = now or timezone.now()
    start, end = SPARK.bounds(now)
    series = dir_series([d.pk for d in dirs], SPARK, now)
    return {
        pk: {
            "usage": chart(
                pts,
                [USAGE],
                SPARK,
                start,
                end,
                unit="%",
                width=120,
                height=18,
                from_zero=False,
                state_bands=True,
            ),
            "latency": chart(
                pts, [LATENCY], SPARK, start, end, unit="ms", width=120, height=18, from_zero=False
            ),
        }
        for pk, pts in series.items()
    }


def _charts(series, pk: int, range_name: str | None, now: datetime | None, **specs) -> dict:
    """``specs`` (name -> (lines, chart options)) drawn from ``series`` of ``pk`` over the range
    called ``range_name``, with the window and the ranges to offer."""
    now = now or timezone.now()
    win = window(range_name)
    start, end = win.bounds(now)
    pts = series([pk], win, now)[pk]
    out: dict = {"window": win, "ranges": list(RANGES)}
    for name, (lines, options) in specs.items():
        out[name] = chart(pts, lines, win, start, end, **options)
    return out


def dir_charts(log_dir, range_name: str | None, now: datetime | None = None) -> dict:
    """The selected dir's larger charts over the chosen range (``1h``, ``24h``, ``30d``)."""
    return _charts(
        dir_series,
        log_dir.pk,
        range_name,
        now,
        usage=([USAGE], {"unit": "%", "state_bands": True}),
        latency=([LATENCY], {"unit": "ms", "state_bands": True}),
    )


TOPIC_BYTES = (
    Line("remote", lambda p: p.get("remote_bytes"), "remote"),
    Line("local", lambda p: p.get("local_bytes"), "local"),
    Line("fenced, pending purge", lambda p: p.get("fenced_remote_bytes"), "fenced"),
)
TOPIC_LAG = (
    Line("copy lag", lambda p: p.get("remote_copy_lag_bytes"), "l1"),
    Line("delete lag", lambda p: p.get("remote_delete_lag_bytes"), "l2"),
)


def topic_charts(
    topic, range_name: str | None, now: datetime | None = None, *, remote: bool = True
) -> dict:
    """A tiered topic's charts over the chosen range: its remote / local / fenced bytes and its
    copy / delete lag in bytes (KIP-963's RemoteCopyLagBytes, RemoteDeleteLagBytes), and for
    the legend how often an unchanged topic is sampled and how long its last figures hold.
    ``remote=False`` draws no remote series (a kafka cluster: its remote size is JMX only, the
    sampled 0 is not a figure)."""
    out = _charts(
        topic_series,
        topic.pk,
        range_name,
        now,
        bytes=(TOPIC_BYTES if remote else TOPIC_BYTES[1:], {"unit": "bytes"}),
        lag=(TOPIC_LAG, {"unit": "bytes"}),
    )
    out["keep_alive_minutes"] = round(keep_alive().total_seconds() / 60, 1)
    out["hold_minutes"] = round(hold().total_seconds() / 60, 1)
    return out
