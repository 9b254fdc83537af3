"""Audit checkpoints off the machine (issue #39): every checkpoint is also an object in the object
store, numbered without gaps; ``verify_audit`` and the Verify button read that external series
and fail, naming what is missing, on a removed tail whose local checkpoints went with it, a gap,
the two series disagreeing, events no checkpoint covered for two intervals, or a store that does
not answer. Run against the test session's own SeaweedFS (``object_store`` fixture)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import secrets
import types

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.utils import timezone

from audit import checkpoints, trail
from audit.choices import AuditContext
from audit.keys import signing_key
from audit.models import AuditEvent, ChainVerification
from audit.tasks import CHECKPOINT_LOCK_KEY, checkpoint_head, verify_now
from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location
from config.seaweedfs import free_port
from tests.conftest import child_database_url

pytestmark = pytest.mark.django_db


def _record(count: int) -> list[AuditEvent]:
    out = []
    for i in range(count):
        with transaction.atomic():
            out.append(
                trail.record("test.event", context=AuditContext.CLI, actor=None, extra={"i": i})
            )
    return out


@pytest.fixture
def store(settings, tmp_path, object_store) -> S3Location:
    """Both series on: a directory of this test's own and a prefix of its own in the store."""
    location = object_store.location.child(f"audit-checkpoints-{secrets.token_hex(4)}")
    settings.STRATA_AUDIT_CHECKPOINT_STORE = location.uri
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path / "local")
    return location


@pytest.fixture
def s3():
    return ObjectStoreConfig.from_env().client()


def _external_keys(s3, location: S3Location) -> list[str]:
    answer = s3.list_objects_v2(Bucket=location.bucket, Prefix=location.key_prefix())
    return [obj["Key"].rsplit("/", 1)[1] for obj in answer.get("Contents", [])]


def _local_files(settings) -> list[str]:
    return sorted(p.name for p in checkpoints.checkpoint_dir().iterdir() if p.suffix == ".json")


def _delete_rows_from(seq: int) -> None:
    """What the table's owner can do behind the application's back."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE workflows_auditevent DISABLE TRIGGER ALL")
        cursor.execute("DELETE FROM workflows_auditevent WHERE seq >= %s", [seq])
        cursor.execute("ALTER TABLE workflows_auditevent ENABLE TRIGGER ALL")


def _verify_fails() -> str:
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")
    assert failure.value.returncode == 1
    return str(failure.value)


def _clock(monkeypatch, ahead: dt.timedelta) -> None:
    """The verifier's (and the audit writer's) clock ``ahead`` of the real one."""
    real = timezone.now
    monkeypatch.setattr(trail, "timezone", types.SimpleNamespace(now=lambda: real() + ahead))


def _verify_on_the_page(client, viewer) -> str:
    client.force_login(viewer)
    client.post("/audit/verify/")
    verify_now(ChainVerification.objects.latest("pk").pk)
    html = client.get("/audit/").content.decode()
    return html[html.index('data-testid="chain-verification"') :].split("</section>")[0]


def test_each_checkpoint_is_written_to_the_store_numbered_without_gaps(
    store, s3, settings, client, viewer
):
    events = _record(3)
    assert checkpoint_head() == ("written", events[-1].seq)
    assert checkpoint_head() == ("unchanged", events[-1].seq)  # the head did not move
    events += _record(2)
    assert checkpoint_head() == ("written", events[-1].seq)
    assert _external_keys(s3, store) == ["000000000001.json", "000000000002.json"]
    assert _local_files(settings) == [
        "000000000001.json",
        "000000000002.json",
    ]
    body = s3.get_object(Bucket=store.bucket, Key=store.key("000000000002.json"))["Body"].read()
    doc = json.loads(body)
    assert (doc["n"], doc["seq"], doc["hash"], doc["count"]) == (2, 5, events[-1].hash, 5)
    assert doc["key_id"] == signing_key().key_id and doc["signature"]
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert "Audit chain intact: 5 events" in out.getvalue()
    assert f"external series {store.uri}: 2 checkpoints, the newest #2" in out.getvalue()
    assert "no Object Lock: retention is not enforced" in out.getvalue()
    card = _verify_on_the_page(client, viewer)
    assert 'data-testid="chain-intact"' in card
    assert f"External series <code>{store.uri}</code>: 2 checkpoints, the newest #2" in card
    assert "the bucket has no Object Lock: retention is not enforced" in card


def test_a_tail_removed_with_the_local_checkpoints_is_reported_from_the_external_series(
    store, settings, client, viewer
):
    events = _record(5)
    assert checkpoint_head() == ("written", events[-1].seq)
    _delete_rows_from(events[3].seq)
    for path in checkpoints.checkpoint_dir().iterdir():
        path.unlink()
    message = _verify_fails()
    assert f"ends at #{events[2].seq} but a signed checkpoint names #{events[4].seq}" in message
    assert "the local checkpoint directory holds none of the external series' checkpoints (#1)" in (
        message
    )
    card = _verify_on_the_page(client, viewer)
    assert 'data-testid="chain-broken"' in card and "chain-intact" not in card
    assert "removed from its end" in card and "holds none" in card
    assert checkpoint_head() == ("broken", None)  # nothing signed over it


def test_a_gap_in_the_series_is_reported_and_stops_the_writer(store, s3, settings):
    _record(2)
    checkpoint_head()
    _record(1)
    checkpoint_head()
    _record(1)
    checkpoint_head()
    s3.delete_object(Bucket=store.bucket, Key=store.key("000000000002.json"))
    (checkpoints.checkpoint_dir() / "000000000002.json").unlink()
    message = _verify_fails()
    assert f"the external series at {store.uri} has a gap: checkpoints #2 are missing" in message
    assert "the local checkpoint directory has a gap: checkpoints #2 are missing" in message
    assert checkpoint_head() == ("broken", None)


def test_a_checkpoint_deleted_from_the_store_only_is_reported_as_a_disagreement(store, s3):
    _record(2)
    checkpoint_head()
    _record(1)
    checkpoint_head()
    s3.delete_object(Bucket=store.bucket, Key=store.key("000000000002.json"))
    message = _verify_fails()
    assert "checkpoints #2 are in the local directory but not in the external series" in message


def test_a_missing_newest_checkpoint_is_reported_once_two_intervals_passed(
    store, s3, settings, monkeypatch, client, viewer
):
    events = _record(3)
    checkpoint_head()
    events += _record(2)
    checkpoint_head()
    # the newest checkpoint (#2, head #5) deleted from both series, the events kept
    s3.delete_object(Bucket=store.bucket, Key=store.key("000000000002.json"))
    (checkpoints.checkpoint_dir() / "000000000002.json").unlink()
    call_command("verify_audit", stdout=io.StringIO())  # within two intervals: not yet evidence
    _clock(monkeypatch, dt.timedelta(seconds=3 * settings.STRATA_AUDIT_CHECKPOINT_SECONDS))
    message = _verify_fails()
    assert "the newest checkpoint #1 (head #3" in message
    assert f"while events #4..#{events[-1].seq} follow it" in message
    assert "a newer checkpoint is missing" in message
    card = _verify_on_the_page(client, viewer)
    assert 'data-testid="checkpoint-problems"' in card and "a newer checkpoint is missing" in card


def test_a_quiet_chain_and_a_restart_after_downtime_are_not_reported_stale(
    store, settings, monkeypatch
):
    events = _record(3)
    checkpoint_head()
    _clock(monkeypatch, dt.timedelta(days=2))  # nothing written for two days: a quiet chain
    call_command("verify_audit", stdout=io.StringIO())
    events += _record(2)  # the first events after a restart, before the beat's first run
    call_command("verify_audit", stdout=io.StringIO())
    _clock(monkeypatch, dt.timedelta(days=3))  # and then the writer never ran
    assert f"while events #4..#{events[-1].seq} follow it" in _verify_fails()


def test_events_without_any_checkpoint_are_reported_after_two_intervals(
    store, settings, monkeypatch
):
    _record(2)
    call_command("verify_audit", stdout=io.StringIO())  # just started: the beat has not run yet
    _clock(monkeypatch, dt.timedelta(seconds=3 * settings.STRATA_AUDIT_CHECKPOINT_SECONDS))
    assert "2 events but no signed checkpoint" in _verify_fails()


def test_an_unreachable_store_is_not_intact_and_gets_no_checkpoint(
    store, settings, monkeypatch, client, viewer
):
    events = _record(2)
    checkpoint_head()
    _record(1)
    monkeypatch.setenv("STRATA_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    message = _verify_fails()
    assert f"the external checkpoint series at {store.uri} was not checked" in message
    assert checkpoint_head() == ("broken", None)
    assert _local_files(settings) == ["000000000001.json"]
    result = trail.verify_chain()
    assert not result.ok and result.external["checked"] is False
    assert result.checkpoint_seq == events[-1].seq  # the local series was still checked
    card = _verify_on_the_page(client, viewer)
    assert ">not checked</span>" in card and "chain-intact" not in card


def test_a_missing_bucket_is_reported_not_checked_and_nothing_is_signed(store, settings):
    _record(2)
    settings.STRATA_AUDIT_CHECKPOINT_STORE = f"s3://no-such-bucket-{secrets.token_hex(4)}/cp"
    assert "was not checked: the store answered NoSuchBucket" in _verify_fails()
    assert checkpoint_head() == ("broken", None)
    assert not checkpoints.checkpoint_dir().exists()


def test_two_writers_never_sign_the_same_checkpoint_number(store, s3):
    _record(2)
    with psycopg.connect(child_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [CHECKPOINT_LOCK_KEY])
        assert checkpoint_head() == ("busy", None)
        other.execute("SELECT pg_advisory_unlock(%s)", [CHECKPOINT_LOCK_KEY])
    assert checkpoint_head() == ("written", 2)
    assert _external_keys(s3, store) == ["000000000001.json"]


def test_the_series_disagreeing_on_a_checkpoint_is_reported(store):
    events = _record(3)
    checkpoint_head()
    doc = checkpoints.make(1, events[1].seq, events[1].hash, events[1].seq, signing_key())
    checkpoints.write_local(doc)  # validly signed (the key's holder), but not what the store says
    assert (
        "checkpoint #1 differs between the local directory (#2) and the external series (#3)"
        in (_verify_fails())
    )


def test_a_bucket_with_object_lock_gets_compliance_retention_and_a_hidden_checkpoint_is_caught(
    settings, tmp_path, s3
):
    bucket = f"strata-audit-lock-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    settings.STRATA_AUDIT_CHECKPOINT_STORE = f"s3://{bucket}/checkpoints"
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path / "local")
    settings.STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS = 1
    events = _record(3)
    checkpoint_head()
    head = s3.head_object(Bucket=bucket, Key="checkpoints/000000000001.json")
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert head["ObjectLockRetainUntilDate"] > timezone.now() + dt.timedelta(hours=23)
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert "written with Object Lock COMPLIANCE retention" in out.getvalue()
    # a plain DELETE on a versioned bucket only hides the object behind a delete marker
    s3.delete_object(Bucket=bucket, Key="checkpoints/000000000001.json")
    for path in checkpoints.checkpoint_dir().iterdir():
        path.unlink()
    _delete_rows_from(events[2].seq)
    message = _verify_fails()
    assert "checkpoints #1 of the external series" in message and "delete marker" in message
    assert f"a signed checkpoint names #{events[2].seq}" in message  # its retained version read


def test_a_shell_beside_make_run_reaches_its_embedded_store_with_its_credentials_file(
    settings, tmp_path, object_store, monkeypatch
):
    """``manage.py verify_audit`` from a shell beside ``make run`` has none of the store's
    variables that ``make run`` gives its own processes: the series is then reached through
    make run's embedded store with its ``.run/s3-credentials.json`` (the embedded endpoint
    stands in for this session's store here). Without that file nothing is added: the
    environment alone decides, as before."""
    from audit import checkpoint_store

    endpoint = ObjectStoreConfig.from_env().endpoint_url
    access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    for name in ("STRATA_S3_ENDPOINT_URL", "STRATA_REMOTE_STORE"):
        monkeypatch.delenv(name)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setattr(checkpoint_store, "EMBEDDED_ENDPOINT", endpoint)
    settings.RUN_DIR = tmp_path
    settings.STRATA_AUDIT_CHECKPOINT_STORE = ""
    settings.STRATA_AUDIT_CHECKPOINT_DIR = str(tmp_path / "local")
    assert checkpoint_store.store_env() == dict(os.environ)  # no credentials file

    (tmp_path / "s3-credentials.json").write_text(
        json.dumps({"access_key": access, "secret_key": secret})
    )
    events = _record(2)
    assert checkpoint_head() == ("written", events[-1].seq)
    out = io.StringIO()
    call_command("verify_audit", stdout=out)
    assert "external series s3://strata-remote/tiered/audit-checkpoints: 1 checkpoint" in (
        out.getvalue()
    )
    s3 = ObjectStoreConfig.from_env(checkpoint_store.store_env()).client(
        credentials=(access, secret)
    )
    listed = s3.list_objects_v2(Bucket="strata-remote", Prefix="tiered/audit-checkpoints/")
    assert [o["Key"] for o in listed.get("Contents", [])] == [
        "tiered/audit-checkpoints/000000000001.json"
    ]
