"""The remote store's boundary: which objects a delete may touch (issues #11, #13).

The root always comes from configuration (``--store-root``), never from inventory or plan rows:
a bad row must not widen what it may delete. A root is ``s3://BUCKET/PREFIX``; an object is
inside when its key lies strictly under the prefix with plain segments only (no empty, ``.`` or
``..``; :meth:`broker_agent.contract.objectstore.S3Location.key_of`). The rule: :func:`store_root`,
:func:`store_entry`, :func:`inside_store`. Runs on the executors too: stdlib only at import.
"""

from __future__ import annotations

import functools

from broker_agent.contract.objectstore import S3Location

__all__ = ["inside_store", "store_entry", "store_root"]

_S3_SCHEME = "s3://"


@functools.lru_cache(maxsize=16)
def _s3(root: str) -> S3Location:
    return S3Location.parse(root)


def store_root(uri: str) -> str:
    """The configured root, normalised: ``s3://BUCKET/PREFIX/`` -> ``s3://BUCKET/PREFIX``.

    Refused (``ValueError``, naming what to set): an empty root, anything but an ``s3://`` URI
    (a ``file://`` or plain path included: there is no local-directory store), and an S3 URI
    :meth:`S3Location.parse` refuses (a bad bucket name, a prefix with ``..`` or empty
    segments)."""
    if not uri:
        raise ValueError(
            "the remote store's root is not configured: set it to s3://BUCKET/PREFIX "
            "(STRATA_REMOTE_STORE, or SPARK_REMOTE_ROOTS[cluster])"
        )
    if not uri.startswith(_S3_SCHEME):
        raise ValueError(
            f"unsupported remote store {uri!r}: the root must be s3://BUCKET/PREFIX "
            "(STRATA_REMOTE_STORE, or SPARK_REMOTE_ROOTS[cluster])"
        )
    return _s3(uri).uri


def store_entry(object_path: str | None, root: str) -> str | None:
    """The object that deleting ``object_path`` removes, ``object_path`` itself, if it names a
    key strictly under the store rooted at ``root`` (a :func:`store_root` result); else None.

    Outside: an empty path, anything but an ``s3://`` URI, another bucket, a sibling prefix
    sharing the root's characters (``<prefix>-evil/…``), the prefix itself, and a key with an
    empty, ``.`` or ``..`` segment (S3 keys are literal, but servers backed by a filesystem
    resolve them)."""
    return object_path if _s3(root).key_of(object_path) is not None else None


def inside_store(object_path: str | None, root: str) -> bool:
    """Whether deleting ``object_path`` stays inside the store rooted at ``root`` (a
    :func:`store_root` result); the rule is :func:`store_entry`'s."""
    return store_entry(object_path, root) is not None
