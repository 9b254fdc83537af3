"""The remote tier's object store: where it is (S3) and how to reach it (issue #13).

Stable configuration, the same for agents, Spark jobs, ``make run`` and the console:
``STRATA_REMOTE_STORE=s3://BUCKET/PREFIX``, ``STRATA_S3_ENDPOINT_URL`` (unset = AWS; set =
path-style, which every non-AWS server supports) and boto3's own ``AWS_*`` (never copied by
Strata). Keys follow Kafka's RSM plugins' layout (DESIGN.md). :class:`S3Location` is the one
place that turns a URI into bucket and prefix and a key back into a URI: what a delete may touch
is decided against it (``spark_tasks.store``). Standard library and boto3 only: the Spark
executors import it too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_BUCKET",
    "DEFAULT_REMOTE_STORE",
    "EMBEDDED_ENDPOINT",
    "ENV_NAMES",
    "ObjectStoreConfig",
    "S3Location",
    "probe",
    "remote_store_uri",
]

DEFAULT_BUCKET = "strata-remote"
DEFAULT_REMOTE_STORE = f"s3://{DEFAULT_BUCKET}/tiered"
#: Where ``make run`` looks for (or starts) the embedded SeaweedFS: its S3 API's default port.
EMBEDDED_ENDPOINT = "http://127.0.0.1:8333"
#: boto3 wants a region even for a local endpoint; S3-compatible servers ignore it.
DEFAULT_REGION = "us-east-1"

_SCHEME = "s3://"

#: The environment an S3 client of the remote store reads (processes that get a whitelisted
#: environment, like the Spark jobs, pass these on).
ENV_NAMES = (
    "STRATA_REMOTE_STORE",
    "STRATA_S3_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE",
)


@dataclasses.dataclass(frozen=True, slots=True)
class S3Location:
    """A bucket and a key prefix (no leading or trailing slash; empty = the whole bucket)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        """``s3://BUCKET/PREFIX`` -> S3Location. Refused (``ValueError``): another scheme, no
        bucket, a bucket name S3 would refuse, or a prefix with empty, ``.`` or ``..`` segments
        (S3 keys are literal, but servers backed by a filesystem resolve them)."""
        if not uri or not uri.startswith(_SCHEME):
            raise ValueError(f"the remote store must be s3://BUCKET/PREFIX, not {uri!r}")
        bucket, _, prefix = uri[len(_SCHEME) :].partition("/")
        prefix = prefix.strip("/")
        if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in "-." for c in bucket):
            raise ValueError(f"{bucket!r} is not a valid bucket name (in {uri!r})")
        if bucket != bucket.lower():
            raise ValueError(f"bucket names are lower case: {bucket!r} (in {uri!r})")
        if prefix and not key_is_plain(prefix):
            raise ValueError(f"the prefix of {uri!r} has an empty, '.' or '..' segment")
        return cls(bucket, prefix)

    @property
    def uri(self) -> str:
        return f"{_SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{_SCHEME}{self.bucket}"

    def key(self, *parts: str) -> str:
        """The key of ``parts`` under the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)

    def key_prefix(self) -> str:
        """What every key under this location starts with ('' for a whole bucket)."""
        return f"{self.prefix}/" if self.prefix else ""

    def object_uri(self, key: str) -> str:
        return f"{_SCHEME}{self.bucket}/{key}"

    def key_of(self, object_uri: str | None) -> str | None:
        """The key of ``object_uri`` if it names an object strictly under this location (same
        bucket, below the prefix, plain segments only); else None. The whole rule of what a
        delete may touch."""
        if not object_uri or not object_uri.startswith(_SCHEME):
            return None
        bucket, _, key = object_uri[len(_SCHEME) :].partition("/")
        if bucket != self.bucket or not key or not key_is_plain(key):
            return None
        return key if key.startswith(self.key_prefix()) and key != self.prefix else None

    def child(self, *parts: str) -> S3Location:
        return S3Location(self.bucket, self.key(*parts))


def remote_store_uri(cluster_id: str, configured: str | None = None) -> str:
    """A cluster's remote store: ``configured`` if given, else ``$STRATA_REMOTE_STORE/<cluster>``
    (one bucket and prefix can hold several clusters, each under its own id)."""
    if configured:
        return S3Location.parse(configured).uri
    return ObjectStoreConfig.from_env().location.child(cluster_id).uri


def key_is_plain(key: str) -> bool:
    """No empty, ``.`` or ``..`` segment, no trailing slash, no NUL."""
    return "\0" not in key and all(seg not in ("", ".", "..") for seg in key.split("/"))


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectStoreConfig:
    """The configured remote store: location and endpoint (credentials stay boto3's)."""

    location: S3Location
    endpoint_url: str | None = None
    region: str = DEFAULT_REGION

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObjectStoreConfig:
        env = os.environ if env is None else env
        location = S3Location.parse(env.get("STRATA_REMOTE_STORE") or DEFAULT_REMOTE_STORE)
        endpoint = (env.get("STRATA_S3_ENDPOINT_URL") or "").strip() or None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        return cls(location, endpoint, region)

    def with_location(self, location: S3Location) -> ObjectStoreConfig:
        return dataclasses.replace(self, location=location)

    def client(
        self,
        *,
        max_pool_connections: int = 16,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 4,
        credentials: tuple[str, str] | None = None,
    ) -> Any:
        """A boto3 S3 client. botocore's "standard" retry mode backs off on ``SlowDown``,
        throttling and 5xx answers (``max_attempts`` in all); callers retry on top of it only
        where a step must outlast an outage (the copier). ``credentials`` (access key, secret)
        instead of boto3's own chain (the environment, profiles, ...)."""
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=self.region,
            max_pool_connections=max_pool_connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "max_attempts": max_attempts},
            s3={"addressing_style": "path"} if self.endpoint_url else {},
        )
        session = (
            boto3.session.Session(
                aws_access_key_id=credentials[0], aws_secret_access_key=credentials[1]
            )
            if credentials
            else boto3.session.Session()
        )
        return session.client("s3", endpoint_url=self.endpoint_url, config=config)

    def describe(self) -> str:
        return f"{self.location.uri} at {self.endpoint_url or 'AWS S3'}"


def probe(config: ObjectStoreConfig, *, timeout: float = 2.0) -> str | None:
    """None when the bucket answers (HeadBucket), else a one-line reason."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = config.client(connect_timeout=timeout, read_timeout=timeout, max_attempts=1)
    try:
        client.head_bucket(Bucket=config.location.bucket)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        return f"{error.get('Code') or 'error'}: {error.get('Message') or exc}"
    except BotoCoreError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
