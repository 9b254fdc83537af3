"""Template helpers of the console pages: data age, the KIP-950 offsets bar, bytes and usage
bars, and what a cluster cannot run (for the workflows app's request form)."""

from __future__ import annotations

import datetime as dt
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()

BAR_WIDTH = 240
LANE = 9


@register.simple_tag
def data_age(when: datetime | None, label: str = "data from") -> SafeString:
    """``data from 12:00:03 UTC (4 s ago)``, machine-readable in ``<time>``."""
    if when is None:
        return SafeString('<small class="age" data-age="never">never synced</small>')
    seconds = max(int((timezone.now() - when).total_seconds()), 0)
    if seconds < 120:
        ago = f"{seconds} s ago"
    elif seconds < 7200:
        ago = f"{seconds // 60} min ago"
    else:
        ago = f"{seconds // 3600} h ago"
    return format_html(
        '<small class="age" data-age="{}">{} <time datetime="{}">{} UTC</time> ({})</small>',
        seconds,
        label,
        when.isoformat(),
        when.astimezone(dt.UTC).strftime("%H:%M:%S"),
        ago,
    )


def _x(offset: int, lo: int, hi: int, width: int) -> float:
    if hi <= lo:
        return 0.0
    return round((offset - lo) * width / (hi - lo), 1)


@register.simple_tag
def offsets_bar(
    log_start_offset: int,
    local_log_start_offset: int,
    log_end_offset: int,
    remote_log_start_offset: int,
    remote_log_end_offset: int,
    width: int = BAR_WIDTH,
) -> SafeString:
    """KIP-950's picture of a log: remote Rx..Ry above, local Lx..log end below.

    The scale runs from the log start offset (or Rx, whichever is lower) to the log end
    offset; an empty lane means no data there (Ry < 0: nothing tiered).
    """
    has_remote = remote_log_end_offset >= 0 and remote_log_start_offset >= 0
    lo = min(log_start_offset, remote_log_start_offset if has_remote else log_start_offset)
    hi = max(log_end_offset, remote_log_end_offset + 1 if has_remote else 0, lo + 1)
    height = 2 * LANE + 4
    parts = [
        f'<rect x="0" y="0" width="{width}" height="{height}" class="bar-bg"></rect>',
    ]
    if has_remote:
        x1 = _x(remote_log_start_offset, lo, hi, width)
        x2 = _x(remote_log_end_offset + 1, lo, hi, width)
        parts.append(
            f'<rect x="{x1}" y="1" width="{max(x2 - x1, 1)}" height="{LANE}" class="bar-remote">'
            f"<title>remote {remote_log_start_offset}..{remote_log_end_offset}</title></rect>"
        )
    if log_end_offset > local_log_start_offset:
        x1 = _x(local_log_start_offset, lo, hi, width)
        x2 = _x(log_end_offset, lo, hi, width)
        parts.append(
            f'<rect x="{x1}" y="{LANE + 3}" width="{max(x2 - x1, 1)}" height="{LANE}" '
            f'class="bar-local"><title>local {local_log_start_offset}..{log_end_offset}'
            "</title></rect>"
        )
    remote = (
        f"remote {remote_log_start_offset}..{remote_log_end_offset}" if has_remote else "no remote"
    )
    label = f"{remote}, local {local_log_start_offset}..{log_end_offset}"
    svg = (
        f'<svg class="offsets" role="img" aria-label="{label}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" data-remote-start='
        f'"{remote_log_start_offset}" data-remote-end="{remote_log_end_offset}" '
        f'data-local-start="{local_log_start_offset}" data-log-end="{log_end_offset}">'
        + "".join(parts)
        + "</svg>"
    )
    return SafeString(svg)  # only integers are interpolated


@register.simple_tag
def bytes_bar(remote_bytes: int, local_bytes: int, width: int = BAR_WIDTH * 2) -> SafeString:
    """A topic's bytes: remote above, local below, on one scale (the larger of the two).

    Two lanes, not one stacked bar: a segment copied to the remote tier and not yet deleted
    locally counts in both, so remote + local is no total of anything."""
    hi = max(remote_bytes, local_bytes, 1)
    height = 2 * LANE + 4
    parts = [f'<rect x="0" y="0" width="{width}" height="{height}" class="bar-bg"></rect>']
    for y, n, cls, name in (
        (1, remote_bytes, "bar-remote", "remote"),
        (LANE + 3, local_bytes, "bar-local", "local"),
    ):
        if n > 0:
            w = max(round(n * width / hi, 1), 1)
            parts.append(
                f'<rect x="0" y="{y}" width="{w}" height="{LANE}" class="{cls}">'
                f"<title>{name} {n} bytes</title></rect>"
            )
    return SafeString(  # only integers are interpolated
        f'<svg class="bytes" role="img" aria-label="remote {remote_bytes} bytes, local '
        f'{local_bytes} bytes" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'data-remote-bytes="{remote_bytes}" data-local-bytes="{local_bytes}">'
        + "".join(parts)
        + "</svg>"
    )


@register.simple_tag
def usage_bar(used: int, total: int) -> SafeString:
    pct = 100.0 * used / total if total else 0.0
    return format_html(
        '<div class="progress" role="progressbar" aria-valuenow="{}" aria-valuemin="0" '
        'aria-valuemax="100" aria-label="disk used"><span style="width: {}%"></span></div>',
        round(pct),
        round(pct, 1),
    )


@register.filter
def lower(value: str) -> str:
    return str(value).lower()


@register.simple_tag(takes_context=True)
def query(context, **changes) -> str:
    """The current query string with ``changes`` applied (``None`` removes a key)."""
    q = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None or value == "":
            q.pop(key, None)
        else:
            q[key] = value
    return "?" + q.urlencode()


@register.simple_tag(takes_context=True)
def sort_link(context, field: str, current: str) -> str:
    """Query string that sorts by ``field``, toggling direction when it is already sorted."""
    new = f"-{field}" if current == field else field
    return query(context, sort=new, page=None)


@register.inclusion_tag("console/partials/chart.html")
def chart(c, label: str, name: str = "") -> dict:
    """A history chart (:class:`console.charts.Chart`) as inline SVG with its caption (a
    sparkline: :func:`spark`)."""
    return {"c": c, "label": label, "name": name}


def _svg(c, label: str) -> SafeString:
    """The chart's inline SVG: its bands (OFFLINE / DEGRADED spans) and lines, named for screen
    readers by ``label`` and the chart's summary (the latest and peak values)."""
    bands = format_html_join(
        "",
        '<rect class="band {}" x="{}" y="0" width="{}" height="{}"><title>{}</title></rect>',
        ((b["css"], b["x"], b["w"], c.height, b["title"]) for b in c.bands),
    )
    paths = format_html_join(
        "",
        '<path class="line {}" d="{}" vector-effect="non-scaling-stroke"></path>',
        ((p["css"], p["d"]) for p in c.paths if p["d"]),
    )
    return format_html(
        '<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" preserveAspectRatio="none" '
        'role="img" aria-label="{label}: {summary}">\n<title>{label}: {summary}</title>\n'
        "{bands}\n{paths}\n</svg>",
        w=c.width,
        h=c.height,
        label=label,
        summary=c.summary,
        bands=bands,
        paths=paths,
    )


@register.simple_tag
def chart_svg(c, label: str) -> SafeString:
    """The SVG of a history chart (``chart.html``), drawn as a sparkline's is."""
    return _svg(c, label)


@register.simple_tag
def spark(c, label: str, name: str, short: str) -> SafeString:
    """A history chart (:class:`console.charts.Chart`) as a one-row sparkline: ``short`` (its
    short name), then the line; ``label`` names it for screen readers with the chart's summary.

    Drawn here rather than by ``chart.html``: the disk grid shows two per log dir, 200 on a page
    of 25 brokers, and a template rendered for each was a quarter of the page's time (#17)."""
    return format_html(
        '<figure class="chart spark" data-chart="{}">\n<figcaption class="spark-label">{}'
        "</figcaption>\n{}\n</figure>",
        name,
        short,
        _svg(c, label),
    )


@register.filter
def spark_of(sparks: dict, log_dir) -> dict | None:
    """The disk grid's small charts of ``log_dir`` (``{"usage", "latency"}``)."""
    return sparks.get(log_dir.pk) if sparks and log_dir else None


@register.simple_tag
def kind_unsupported(cluster_name: str, kind_name: str):
    """The capability workflow ``kind_name`` needs that cluster ``cluster_name`` lacks, else
    ``None`` (also for an unknown cluster: the request's own check says so). One query; lets
    the request form show a kind a cluster cannot run as unsupported, with why."""
    from console import capabilities
    from console.models import Cluster

    cluster = Cluster.objects.filter(name=cluster_name).first() if cluster_name else None
    return capabilities.kind_unsupported(cluster, kind_name) if cluster is not None else None
