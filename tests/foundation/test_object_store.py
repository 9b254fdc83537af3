"""The remote tier's object store: configuration, the embedded SeaweedFS, health (issue #13)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from broker_agent.contract.objectstore import (
    DEFAULT_REMOTE_STORE,
    ObjectStoreConfig,
    S3Location,
    probe,
)
from config import seaweedfs


def test_store_uri_is_a_bucket_and_a_plain_prefix():
    loc = S3Location.parse("s3://strata-remote/tiered/prod/")
    assert (loc.bucket, loc.prefix, loc.uri) == (
        "strata-remote",
        "tiered/prod",
        "s3://strata-remote/tiered/prod",
    )
    assert S3Location.parse("s3://bucket").uri == "s3://bucket"
    for bad in ("", "file:///srv/remote", "/srv/remote", "s3://", "s3://B/x", "s3://ab/x",
                "s3://bucket/a//b", "s3://bucket/a/../b", "s3://bucket/./a"):  # fmt: skip
        with pytest.raises(ValueError):
            S3Location.parse(bad)


def test_a_key_belongs_to_a_store_only_strictly_under_its_prefix():
    loc = S3Location.parse("s3://strata-remote/tiered")
    assert loc.key_of("s3://strata-remote/tiered/t-1/0/00000000000000000000-a.log") == (
        "tiered/t-1/0/00000000000000000000-a.log"
    )
    outside = [
        None,
        "",
        "s3://other-bucket/tiered/t-1/0/a.log",  # another bucket
        "s3://strata-remote/tiered",  # the prefix itself
        "s3://strata-remote/tiered2/t/0/a.log",  # a sibling prefix sharing the characters
        "s3://strata-remote/untiered/a.log",
        "s3://strata-remote/tiered/../secrets/a.log",  # resolved by filesystem-backed servers
        "s3://strata-remote/tiered/t//a.log",
        "s3://strata-remote/tiered/t/a.log/",
        "/tmp/tiered/a.log",
        "file:///strata-remote/tiered/a.log",
    ]
    for uri in outside:
        assert loc.key_of(uri) is None, uri
    whole = S3Location.parse("s3://strata-remote")
    assert whole.key_of("s3://strata-remote/any/key") == "any/key"


def test_configuration_reads_the_stable_names():
    config = ObjectStoreConfig.from_env(
        {
            "STRATA_REMOTE_STORE": "s3://b-1/p",
            "STRATA_S3_ENDPOINT_URL": "http://h:9000",
            "AWS_REGION": "eu-west-1",
        }
    )
    assert (config.location, config.endpoint_url, config.region) == (
        S3Location("b-1", "p"),
        "http://h:9000",
        "eu-west-1",
    )
    default = ObjectStoreConfig.from_env({})
    assert default.location.uri == DEFAULT_REMOTE_STORE and default.endpoint_url is None
    assert seaweedfs.embedded_wanted({}) and not seaweedfs.embedded_wanted(
        {"STRATA_REMOTE_STORE": "s3://mine/x"}
    )


def test_the_suites_store_answers_signed_requests_only(object_store):
    assert probe(object_store) is None
    client = object_store.client()
    key = object_store.location.key("probe", "hello.txt")
    client.put_object(Bucket=object_store.location.bucket, Key=key, Body=b"hi")
    assert client.get_object(Bucket=object_store.location.bucket, Key=key)["Body"].read() == b"hi"

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    stranger = boto3.session.Session(aws_access_key_id="nobody", aws_secret_access_key="x").client(
        "s3", endpoint_url=object_store.endpoint_url, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )  # fmt: skip
    with pytest.raises(ClientError):
        stranger.get_object(Bucket=object_store.location.bucket, Key=key)


def test_make_run_names_the_variable_when_the_endpoint_is_wrong(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_S3_ENDPOINT_URL", f"http://127.0.0.1:{seaweedfs.free_port()}")
    monkeypatch.setenv("STRATA_REMOTE_STORE", "s3://strata-remote/x")
    with pytest.raises(seaweedfs.ObjectStoreError) as exc:
        seaweedfs.ensure_object_store(tmp_path)
    assert "STRATA_S3_ENDPOINT_URL" in str(exc.value)


@pytest.mark.django_db
def test_health_shows_the_store_as_the_workers_probed_it(client, object_store, monkeypatch):
    from console.models import ObjectStoreProbe
    from console.tasks import probe_object_store

    assert client.get("/api/v1/health").json()["object_store"] == "unknown"  # no probe yet
    probe_object_store()
    assert client.get("/api/v1/health").json()["object_store"] == "ok"

    monkeypatch.setenv("STRATA_S3_ENDPOINT_URL", f"http://127.0.0.1:{seaweedfs.free_port()}")
    first = probe_object_store()
    again = probe_object_store()
    assert not again.ok and again.failing_since == first.failing_since is not None
    state = client.get("/api/v1/health").json()["object_store"]
    assert state.startswith("error: EndpointConnectionError (since"), state
    assert "127.0.0.1" not in state  # the public health names no endpoint
    assert ObjectStoreProbe.objects.count() == 1  # one row per store, updated in place

    monkeypatch.setenv("STRATA_S3_ENDPOINT_URL", object_store.endpoint_url)
    back = probe_object_store()
    assert back.ok and back.failing_since is None
    assert client.get("/api/v1/health").json()["object_store"] == "ok"


def _fake_weed(tmp_path, monkeypatch, says: str, code: int) -> None:
    script = tmp_path / "weed"
    script.write_text(f"#!/bin/sh\necho '{says}'\nexit {code}\n")
    script.chmod(0o755)
    monkeypatch.setattr(seaweedfs, "weed_binary", lambda: script)


def test_seaweedfs_exiting_on_a_taken_port_says_so_and_on_anything_else_does_not(
    monkeypatch, tmp_path
):
    """What it printed since this start decides (the log is appended across starts)."""
    taken = "F1128 s3.go:434 listen tcp 127.0.0.1:1: bind: address already in use"
    _fake_weed(tmp_path, monkeypatch, taken, 255)
    with pytest.raises(seaweedfs.PortTaken):
        seaweedfs.start_seaweedfs(tmp_path, s3_port=1)
    _fake_weed(tmp_path, monkeypatch, "panic: something else", 2)
    with pytest.raises(RuntimeError) as err:
        seaweedfs.start_seaweedfs(tmp_path, s3_port=1)
    assert not isinstance(err.value, seaweedfs.PortTaken)


def _starts(monkeypatch, taken: int) -> list[int]:
    """``start_seaweedfs`` whose first ``taken`` starts find their port taken and whose next
    one is the suite's own store (already running); the S3 ports asked, in order."""
    store = {k: os.environ[k] for k in ("STRATA_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                        "AWS_SECRET_ACCESS_KEY")}  # fmt: skip
    asked: list[int] = []

    def start(home, *, s3_port: int, log=None):
        asked.append(s3_port)
        if len(asked) <= taken:
            raise seaweedfs.PortTaken("SeaweedFS exited with code 255")
        return SimpleNamespace(env=lambda: store, stop=lambda timeout=0: None)

    monkeypatch.setattr(seaweedfs, "start_seaweedfs", start)
    monkeypatch.delenv("STRATA_S3_ENDPOINT_URL")
    return asked


def test_a_private_store_starts_again_on_new_ports_when_one_was_taken_meanwhile(
    monkeypatch, tmp_path, object_store
):
    """A port found free can be taken before SeaweedFS binds it (a `make run` starting beside
    the suite once took the S3 port and every test errored): another start, on a new port."""
    asked = _starts(monkeypatch, taken=seaweedfs.PORT_ATTEMPTS - 1)
    with seaweedfs.private_store(tmp_path, "retry") as config:
        assert probe(config) is None
    assert len(asked) == seaweedfs.PORT_ATTEMPTS


def test_a_private_store_gives_up_after_its_attempts(monkeypatch, tmp_path, object_store):
    asked = _starts(monkeypatch, taken=seaweedfs.PORT_ATTEMPTS)
    with pytest.raises(seaweedfs.PortTaken), seaweedfs.private_store(tmp_path, "retry"):
        pass
    assert len(asked) == seaweedfs.PORT_ATTEMPTS
