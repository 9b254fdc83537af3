"""Deleting a plan's objects from an S3 store, on the executors (issue #13).

The counterpart of :func:`spark_tasks.jobkit.unlink_paths` for an ``s3://`` root, same inputs
and outputs. A key is deleted only when strictly under the configured bucket and prefix
(:meth:`broker_agent.contract.objectstore.S3Location.key_of`), else ``refused`` — the second check after
``jobkit.ensure_inside_store``. DeleteObjects with 1,000 keys a call (S3's maximum),
:data:`CALLS_IN_FLIGHT` at once, ``Quiet``; botocore retries throttling and 5xx, retryable
per-key failures are re-sent :data:`KEY_RETRIES` rounds; the rest is ``failed``, never skipped.
A missing key counts as deleted (``already_gone`` when the server says ``NoSuchKey``).
Standard library, boto3 and tenacity only: shipped to the executors in the ``spark_tasks`` zip.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location

__all__ = ["CALLS_IN_FLIGHT", "KEYS_PER_CALL", "delete_paths", "store_client"]

#: S3's limit for one DeleteObjects call.
KEYS_PER_CALL = 1000
#: DeleteObjects calls one batch keeps in flight (the delete job runs several batches at once).
CALLS_IN_FLIGHT = 4
#: Rounds of re-sending keys reported with a retryable error code.
KEY_RETRIES = 5
RETRYABLE_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling"}
)
_GONE_CODES = frozenset({"NoSuchKey", "NotFound"})

DELETED, ALREADY_GONE, REFUSED, FAILED = "deleted", "already_gone", "refused", "failed"


@functools.lru_cache(maxsize=8)
def _location(root: str) -> S3Location:
    return S3Location.parse(root)


@functools.lru_cache(maxsize=1)
def store_client():
    """One S3 client per executor process (boto3 clients are thread-safe), configured from the
    environment (``STRATA_S3_ENDPOINT_URL``, ``AWS_*``) with a connection pool for the calls in
    flight of every delete thread."""
    return ObjectStoreConfig.from_env().client(max_pool_connections=4 * CALLS_IN_FLIGHT)


class _KeysFailed(Exception):
    def __init__(self, failed: dict[str, tuple[str, str]]) -> None:
        super().__init__(f"{len(failed)} keys failed")
        self.failed = failed


def _delete_call(client, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
    """One DeleteObjects call, its retryable per-key failures re-sent with backoff. Returns the
    keys that failed for good: key -> (code, message)."""
    from tenacity import (
        RetryError,
        retry,
        retry_if_exception_type,
        stop_after_attempt,
        wait_random_exponential,
    )

    pending = list(keys)
    final: dict[str, tuple[str, str]] = {}

    @retry(
        retry=retry_if_exception_type(_KeysFailed),
        stop=stop_after_attempt(KEY_RETRIES),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
    )
    def attempt() -> None:
        nonlocal pending
        answer = client.delete_objects(
            Bucket=bucket,
            Delete={"Objects": [{"Key": k} for k in pending], "Quiet": True},
        )
        retry_keys: dict[str, tuple[str, str]] = {}
        for err in answer.get("Errors") or []:
            key, code, message = err.get("Key", ""), err.get("Code", ""), err.get("Message", "")
            if code in RETRYABLE_CODES:
                retry_keys[key] = (code, message)
            else:
                final[key] = (code, message)
        if retry_keys:
            pending = list(retry_keys)
            raise _KeysFailed(retry_keys)

    try:
        attempt()
    except RetryError as exc:
        last = exc.last_attempt.exception()
        if isinstance(last, _KeysFailed):
            final.update(last.failed)
    return final


def delete_paths(
    paths: list[str | None], root: str, *, client=None, calls_in_flight: int = CALLS_IN_FLIGHT
) -> tuple[list[str], list[str | None]]:
    """Delete the objects named by ``paths`` (``s3://BUCKET/KEY``) that lie inside the store
    ``root`` (``s3://BUCKET/PREFIX``). Returns (outcome, error) per path, in order."""
    loc = _location(root)
    outcomes: list[str] = [DELETED] * len(paths)
    errors: list[str | None] = [None] * len(paths)
    index: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        key = loc.key_of(path)
        if key is None:
            outcomes[i], errors[i] = REFUSED, f"outside the remote store {root}: {path!r}"
            continue
        index.setdefault(key, []).append(i)
    keys = list(index)
    if not keys:
        return outcomes, errors
    client = client or store_client()
    chunks = [keys[i : i + KEYS_PER_CALL] for i in range(0, len(keys), KEYS_PER_CALL)]

    def one(chunk: list[str]) -> dict[str, tuple[str, str]]:
        try:
            return _delete_call(client, loc.bucket, chunk)
        except Exception as exc:  # the call itself failed after botocore's retries
            reason = getattr(exc, "response", {}).get("Error", {}).get("Code") or type(exc).__name__
            return {k: (reason, str(exc)) for k in chunk}

    if len(chunks) == 1 or calls_in_flight <= 1:
        results = [one(c) for c in chunks]
    else:
        with ThreadPoolExecutor(min(calls_in_flight, len(chunks))) as pool:
            results = list(pool.map(one, chunks))
    for failed in results:
        for key, (code, message) in failed.items():
            for i in index.get(key, ()):
                if code in _GONE_CODES:
                    outcomes[i] = ALREADY_GONE
                else:
                    outcomes[i], errors[i] = FAILED, f"{code}: {message}"
    return outcomes, errors
