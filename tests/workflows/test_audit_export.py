"""The audit export streams CSV / JSON lines over a server-side cursor: 100,000 events go out
without being loaded into memory at once."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from audit.models import AuditEvent
from audit.trail import GENESIS_HASH, compute_hash, event_payload, verify_chain

pytestmark = pytest.mark.django_db

N = 100_000


def append_chain(n: int, batch: int = 5000) -> None:
    """Append ``n`` valid chained events fast (bulk insert; same hash as ``record()``)."""
    last = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    seq, prev = last if last else (0, GENESIS_HASH)
    start = timezone.now() - dt.timedelta(days=1)
    rows: list[AuditEvent] = []
    for i in range(n):
        seq += 1
        fields = {
            "seq": seq,
            "created_at": start + dt.timedelta(milliseconds=i),
            "actor_id": None,
            "actor_name": f"bulk-{i % 7}",
            "context": "worker",
            "action": "bulk.event",
            "target_type": "topic",
            "target_id": f"topic-{i % 100}",
            "workflow_id": None,
            "before": {"n": i - 1},
            "after": {"n": i},
            "outcome": "success",
            "extra": {"note": "x" * 100},
            "prev_hash": prev,
        }
        fields["hash"] = prev = compute_hash(event_payload(fields))
        rows.append(AuditEvent(**fields))
        if len(rows) == batch:
            AuditEvent.objects.bulk_create(rows)
            rows = []
    AuditEvent.objects.bulk_create(rows)


@pytest.fixture
def many_events():
    append_chain(N)
    return AuditEvent.objects.count()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class ServerCursorSpy:
    """Records whether the export's SELECT ran on a psycopg server-side (named) cursor."""

    def __init__(self) -> None:
        self.server_side: list[bool] = []

    def __call__(self, execute, sql, params, many, context):
        if "workflows_auditevent" in sql and "ORDER BY" in sql:
            self.server_side.append(isinstance(context["cursor"].cursor, psycopg.ServerCursor))
        return execute(sql, params, many, context)


def _stream(client, fmt: str) -> dict:
    """Consume one export chunk by chunk; measure chunks, lines, bytes and RSS growth."""
    # warm up: the first request imports every app's views (some load large libraries)
    b"".join(client.get(f"/audit/export.{fmt}?actor=nobody").streaming_content)
    spy = ServerCursorSpy()
    out = {"chunks": 0, "lines": 0, "bytes": 0, "first": b"", "last": b""}
    baseline = peak = rss_bytes()
    with connection.execute_wrapper(spy):
        response = client.get(f"/audit/export.{fmt}")
        assert response.streaming
        for chunk in response.streaming_content:
            out["chunks"] += 1
            out["lines"] += chunk.count(b"\n")
            out["bytes"] += len(chunk)
            out["first"] = out["first"] or chunk
            out["last"] = chunk
            if out["chunks"] % 20 == 0:
                peak = max(peak, rss_bytes())
    out["growth"] = peak - baseline
    out["server_side"] = spy.server_side
    return out


def test_export_streams_100k_events_without_loading_them(client, viewer, many_events):
    client.force_login(viewer)  # (writes a login event)
    expected = AuditEvent.objects.count()
    for fmt, header in (("jsonl", 0), ("csv", 1)):
        got = _stream(client, fmt)
        assert got["lines"] == expected + header, fmt
        assert got["chunks"] > 100  # many small writes, not one body
        assert got["server_side"] and all(got["server_side"])  # a server-side cursor fed it
        # the export is tens of MB (its rows as Python objects hundreds); the process grows by
        # a fraction of the body while streaming it
        assert got["bytes"] > 30 * 2**20
        assert got["growth"] < got["bytes"] / 2, (fmt, got["growth"], got["bytes"])
        if fmt == "jsonl":
            record = json.loads(got["last"].splitlines()[-1])
            assert record["seq"] == expected and record["action"] == "auth.login"
        else:
            rows = list(csv.reader(io.StringIO(got["first"].decode())))
            assert rows[0][:3] == ["seq", "created_at", "actor_id"]
    assert verify_chain().ok


def test_export_applies_the_filters(client, viewer):
    append_chain(30)
    client.force_login(viewer)
    body = b"".join(client.get("/audit/export.jsonl?actor=bulk-3").streaming_content)
    records = [json.loads(line) for line in body.splitlines()]
    assert records and all(r["actor_name"] == "bulk-3" for r in records)
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)


def test_export_with_a_bad_filter_is_400(client, viewer):
    client.force_login(viewer)
    assert client.get("/audit/export.csv?since=yesterday-ish").status_code == 400


def test_csv_cells_that_a_spreadsheet_would_evaluate_are_escaped(client, viewer):
    """A failed sign-in writes what the client typed as the actor name: a formula must reach a
    spreadsheet as text. The JSON lines export keeps the value as logged."""
    from audit.trail import record_standalone

    for name in ('=HYPERLINK("http://x")', "+1+1", "-2", "@SUM(A1)", "\tx", "plain"):
        record_standalone("test.formula", actor_name=name, context="web", target_id=name)
    client.force_login(viewer)
    body = b"".join(client.get("/audit/export.csv?action=test.formula").streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [r["actor_name"] for r in rows] == [
        '\'=HYPERLINK("http://x")',
        "'+1+1",
        "'-2",
        "'@SUM(A1)",
        "'\tx",
        "plain",
    ]
    assert rows[0]["target_id"] == '\'=HYPERLINK("http://x")'
    lines = b"".join(client.get("/audit/export.jsonl?action=test.formula").streaming_content)
    assert json.loads(lines.splitlines()[0])["actor_name"] == '=HYPERLINK("http://x")'
