"""Listing an S3 store for the orphan sweep, on the executors (issue #13).

The sweep must not list a fleet's store in one serial driver loop (the failure mode Iceberg
users hit, apache/iceberg#16932). The driver lists only the root's first level (one topic
prefix per ``<topic>-<topic_id>/``, with ``Delimiter='/'``); the executors list each topic's
partition prefixes, then page through each partition prefix (ListObjectsV2, 1,000 keys a page)
in parallel. The metadata records' prefix (``__remote_log_metadata/``) is never listed: records
are not objects the sweep may delete.

Standard library and boto3 only: shipped to the executors in the ``spark_tasks`` zip.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker_agent.contract.objectstore import S3Location
from spark_tasks.s3_delete import store_client

__all__ = ["METADATA_PREFIX", "children", "walk"]

#: Where the brokers keep the metadata records (``broker_agent.simulator.remote.METADATA_DIR``).
METADATA_PREFIX = "__remote_log_metadata/"


def _pages(bucket: str, prefix: str, delimiter: str | None) -> Iterator[dict]:
    client = store_client()
    kwargs = {"Bucket": bucket, "Prefix": prefix}
    if delimiter:
        kwargs["Delimiter"] = delimiter
    yield from client.get_paginator("list_objects_v2").paginate(**kwargs)


def children(uri: str) -> list[tuple[str, bool]]:
    """The direct entries of ``uri`` (a store root or a prefix under it): (uri, is_prefix). The
    root's metadata prefix is left out."""
    loc = S3Location.parse(uri)
    prefix = loc.key_prefix()
    out: list[tuple[str, bool]] = []
    for page in _pages(loc.bucket, prefix, "/"):
        for cp in page.get("CommonPrefixes", []):
            if cp["Prefix"][len(prefix) :] == METADATA_PREFIX:
                continue
            out.append((loc.object_uri(cp["Prefix"].rstrip("/")), True))
        for obj in page.get("Contents", []):
            out.append((loc.object_uri(obj["Key"]), False))
    return out


def walk(uri: str) -> Iterator[tuple[str, int, int]]:
    """Every object at or under ``uri``: (object uri, size, last-modified ms)."""
    loc = S3Location.parse(uri)
    for page in _pages(loc.bucket, loc.key_prefix(), None):
        for obj in page.get("Contents", []):
            yield (
                loc.object_uri(obj["Key"]),
                int(obj["Size"]),
                int(obj["LastModified"].timestamp() * 1000),
            )
