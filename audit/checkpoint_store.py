"""The external series of audit checkpoints: one object per checkpoint in the object store (#39).

``STRATA_AUDIT_CHECKPOINT_STORE=s3://BUCKET/PREFIX`` (unset: ``audit-checkpoints`` under
``$STRATA_REMOTE_STORE``; ``off``: none); object ``<PREFIX>/<n:012d>.json``. Where the bucket has
Object Lock, each is written ``COMPLIANCE`` until now + ``STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS``
and read through its versions (the first version is the one checked); otherwise ``verify_audit``
says retention is not enforced. The series is a witness only in a store the database's admins
cannot reach (SeaweedFS on the same machine is not). An unreachable store is "not checked", a
problem, never "intact". With no store configured and ``make run``'s credentials present, it
uses the embedded SeaweedFS, as ``config.seaweedfs`` does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings

from audit.checkpoints import Checkpoint, parse, spans
from audit.keys import AuditKey
from broker_agent.contract.objectstore import (
    DEFAULT_REMOTE_STORE,
    EMBEDDED_ENDPOINT,
    ObjectStoreConfig,
    S3Location,
)

__all__ = ["Listing", "location", "object_lock_enabled", "put", "read_series"]

_OBJECT = re.compile(r"^(\d{12})\.json$")
#: Codes of a bucket without Object Lock (or a store that does not implement it).
_NO_LOCK = {
    "ObjectLockConfigurationNotFoundError",
    "NotImplemented",
    "NoSuchObjectLockConfiguration",
}
#: Parallel GETs when reading the newest checkpoints (boto3 clients are thread-safe).
READ_THREADS = 8


#: make run's embedded store's credentials, in its run directory (``config.seaweedfs``).
EMBEDDED_CREDENTIALS = "s3-credentials.json"


def store_env() -> dict[str, str]:
    """The environment the store is reached with (module doc): the process's own, or, where
    it configures no store and ``make run``'s credentials file exists, ``make run``'s embedded
    SeaweedFS with those credentials."""
    env = dict(os.environ)
    if env.get("STRATA_S3_ENDPOINT_URL") or env.get("STRATA_REMOTE_STORE"):
        return env
    try:
        data = json.loads((settings.RUN_DIR / EMBEDDED_CREDENTIALS).read_text())
        keys = {
            "AWS_ACCESS_KEY_ID": data["access_key"],
            "AWS_SECRET_ACCESS_KEY": data["secret_key"],
        }
    except (OSError, ValueError, KeyError, TypeError):
        return env
    return {
        **env,
        "STRATA_S3_ENDPOINT_URL": EMBEDDED_ENDPOINT,
        "STRATA_REMOTE_STORE": DEFAULT_REMOTE_STORE,
        **keys,
    }


def location() -> S3Location:
    """The external series' location (``ValueError`` for a malformed setting)."""
    configured = settings.STRATA_AUDIT_CHECKPOINT_STORE.strip()
    if configured:
        return S3Location.parse(configured)
    return ObjectStoreConfig.from_env(store_env()).location.child("audit-checkpoints")


def _client() -> Any:
    """One client per store configuration and credentials (building one costs ~0.3 s)."""
    env = store_env()
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    return _client_for(ObjectStoreConfig.from_env(env), tuple(env.get(n) for n in names))


@functools.lru_cache(maxsize=4)
def _client_for(config: ObjectStoreConfig, credentials: tuple[str | None, ...]) -> Any:
    key, secret, token, _profile = credentials
    # explicit keys when the environment gave both and no session token (which boto3's own
    # chain must pair with them); else boto3's chain, as before
    explicit = (key, secret) if key and secret and not token else None
    return config.client(
        connect_timeout=5.0, read_timeout=15.0, max_attempts=2, credentials=explicit
    )


def _reason(exc: Exception) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    if error:
        return f"{error.get('Code') or 'error'}: {error.get('Message') or exc}"
    return f"{type(exc).__name__}: {exc}"


def object_lock_enabled(client: Any, bucket: str) -> bool:
    """Whether the bucket has Object Lock enabled (then every PUT carries a retention)."""
    from botocore.exceptions import ClientError

    try:
        answer = client.get_object_lock_configuration(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _NO_LOCK:
            return False
        raise
    return answer.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled"


def put(doc: dict[str, Any]) -> bool:
    """Write a checkpoint document as ``<prefix>/<n>.json``; True when under COMPLIANCE retention.
    Raises botocore's errors: the caller writes nothing locally then."""
    loc = location()
    client = _client()
    retention: dict[str, Any] = {}
    locked = object_lock_enabled(client, loc.bucket)
    if locked:
        until = dt.datetime.now(dt.UTC) + dt.timedelta(
            days=settings.STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS
        )
        retention = {"ObjectLockMode": "COMPLIANCE", "ObjectLockRetainUntilDate": until}
    client.put_object(
        Bucket=loc.bucket,
        Key=loc.key(f"{doc['n']:012d}.json"),
        Body=json.dumps(doc, sort_keys=True).encode(),
        ContentType="application/json",
        **retention,
    )
    return locked


@dataclasses.dataclass
class Listing:
    """The external series as read: the numbers listed, the newest read and verified."""

    uri: str
    checked: bool = False
    error: str = ""
    object_lock: bool | None = None
    numbers: list[int] = dataclasses.field(default_factory=list)
    read: dict[int, Checkpoint] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """``VerifyResult.external``: stable keys for ``verify_audit --json`` and the API."""
        return {
            "location": self.uri,
            "checked": self.checked,
            "error": self.error,
            "object_lock": self.object_lock,
            "checkpoints": len(self.numbers),
            "newest": max(self.numbers) if self.numbers else None,
        }


def read_series(keys: dict[str, AuditKey], limit: int) -> Listing:
    """List the whole series; read and verify the newest ``limit`` checkpoints."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        loc = location()
    except ValueError as exc:
        listing = Listing(uri=settings.STRATA_AUDIT_CHECKPOINT_STORE, error=str(exc))
        listing.problems.append(f"STRATA_AUDIT_CHECKPOINT_STORE is not valid: {exc}")
        return listing
    listing = Listing(uri=loc.uri)
    try:
        client = _client()
        listing.object_lock = object_lock_enabled(client, loc.bucket)
        versions = _list(client, loc, listing)
        newest = sorted(versions)[-limit:] if limit > 0 else []
        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            bodies = list(pool.map(lambda n: _get(client, loc, n, versions[n]), newest))
    except (BotoCoreError, ClientError) as exc:
        listing.error = _reason(exc)
        listing.problems.append(
            f"the external checkpoint series at {loc.uri} was not checked: the store answered "
            f"{listing.error}"
        )
        return listing
    listing.checked = True
    listing.numbers = sorted(versions)
    for n, body in zip(newest, bodies, strict=True):
        cp, problem = parse(body, f"{loc.uri}/{n:012d}.json", n, keys)
        if problem:
            listing.problems.append(problem)
        elif cp is not None:
            listing.read[n] = cp
    return listing


def _list(client: Any, loc: S3Location, listing: Listing) -> dict[int, str | None]:
    """``{n: version id to read}`` (None in an unversioned bucket); hidden or overwritten
    checkpoints become problems of ``listing``."""
    prefix = loc.key_prefix()
    versioning = client.get_bucket_versioning(Bucket=loc.bucket).get("Status")
    found: dict[int, str | None] = {}
    if versioning not in ("Enabled", "Suspended"):
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                if match := _OBJECT.match(obj["Key"][len(prefix) :]):
                    found[int(match.group(1))] = None
        return found
    written: dict[int, list[tuple[Any, str]]] = {}
    hidden: list[int] = []
    pages = client.get_paginator("list_object_versions").paginate(Bucket=loc.bucket, Prefix=prefix)
    for page in pages:
        for version in page.get("Versions", []):
            if match := _OBJECT.match(version["Key"][len(prefix) :]):
                entry = (version["LastModified"], version["VersionId"])
                written.setdefault(int(match.group(1)), []).append(entry)
        for marker in page.get("DeleteMarkers", []):
            if marker.get("IsLatest") and (match := _OBJECT.match(marker["Key"][len(prefix) :])):
                hidden.append(int(match.group(1)))
    if hidden:
        listing.problems.append(
            f"checkpoints {spans(hidden)} of the external series at {loc.uri} are hidden by a "
            "delete marker (deleted; their retained versions are still read)"
        )
    if twice := sorted(n for n, entries in written.items() if len(entries) > 1):
        listing.problems.append(
            f"checkpoints {spans(twice)} of the external series at {loc.uri} were written more "
            "than once (the first version is read)"
        )
    return {n: min(entries)[1] for n, entries in written.items()}


def _get(client: Any, loc: S3Location, n: int, version_id: str | None) -> bytes:
    extra = {"VersionId": version_id} if version_id else {}
    answer = client.get_object(Bucket=loc.bucket, Key=loc.key(f"{n:012d}.json"), **extra)
    return answer["Body"].read()
