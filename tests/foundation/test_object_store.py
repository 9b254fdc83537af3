"""The remote tier's object store: configuration, the embedded SeaweedFS, health (issue #13)."""

from __future__ import annotations

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


@pytest.mark.integration
def test_a_private_store_starts_again_on_new_ports_when_one_was_taken_meanwhile(
    monkeypatch, tmp_path
):
    """A port found free and taken before SeaweedFS binds it (a `make run` starting beside
    the suite took the S3 port once) costs a second start on fresh ports, not the suite."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real, given = seaweedfs.free_port, []

    def free_port(*, with_grpc: bool = False) -> int:
        given.append(with_grpc)
        return port if len(given) == 1 else real(with_grpc=with_grpc)  # the S3 port, first

    monkeypatch.setattr(seaweedfs, "free_port", free_port)
    monkeypatch.delenv("STRATA_S3_ENDPOINT_URL", raising=False)
    try:
        with seaweedfs.private_store(tmp_path, "retry") as config:
            assert config.endpoint_url != f"http://127.0.0.1:{port}"
            assert probe(config) is None
    finally:
        taken.close()
    assert "address already in use" in (tmp_path / "seaweedfs.log").read_text()
