"""The tests' view of the remote store's objects (issue #13): the suite's own SeaweedFS, or the
S3 endpoint ``STRATA_S3_ENDPOINT_URL`` names (``tests/conftest.py``'s ``object_store``)."""

from __future__ import annotations

import functools

from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location


@functools.lru_cache(maxsize=1)
def _client():
    return ObjectStoreConfig.from_env().client()


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    assert uri.startswith("s3://") and key, f"not an object URI: {uri!r}"
    return bucket, key


def exists(uri: str) -> bool:
    bucket, key = _split(uri)
    try:
        _client().head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return False
        raise
    return True


def put(uri: str, data: bytes) -> int:
    """Write an object; returns its LastModified (ms) as the store reports it."""
    bucket, key = _split(uri)
    _client().put_object(Bucket=bucket, Key=key, Body=data)
    head = _client().head_object(Bucket=bucket, Key=key)
    return int(head["LastModified"].timestamp() * 1000)


def delete(uri: str) -> None:
    bucket, key = _split(uri)
    _client().delete_object(Bucket=bucket, Key=key)


def sibling(uri: str, name: str) -> str:
    """The object ``name`` in the same partition prefix as ``uri``."""
    return uri.rsplit("/", 1)[0] + "/" + name


def keys(location: str) -> list[str]:
    """Every key under ``s3://BUCKET/PREFIX``."""
    loc = S3Location.parse(location)
    pages = (
        _client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=loc.bucket, Prefix=loc.key_prefix())
    )
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]
