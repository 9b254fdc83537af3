"""The remote store's boundary: which objects a delete may touch (issue #11).

The store's root always comes from configuration, passed to the delete jobs as ``--store-root``
(see ``spark_tasks.agent_remote.AgentRemoteMetadata.remote_root``), never guessed from the rows
of an inventory or a plan: a bad row must not be able to widen what it may delete.

A root is either an S3 location (``s3://BUCKET/PREFIX``, issue #13: an object is inside when
its key lies strictly under the prefix in that bucket, see
:meth:`broker_agent.objectstore.S3Location.key_of`) or a local directory tree (``file:///…``, the
simulated cluster's ``<data>/remote`` until its brokers write to S3). The whole rule is
:func:`store_root` (what a configured root means) and :func:`store_entry` / :func:`inside_store`
(whether an object lies inside it).

Runs on the executors too (shipped in the ``spark_tasks`` zip with
``broker_agent/objectstore.py``): standard library only at import.
"""

from __future__ import annotations

import functools
import os

from broker_agent.objectstore import S3Location

__all__ = ["inside_store", "store_entry", "store_root"]

_FILE_SCHEME = "file:"
_S3_SCHEME = "s3://"


@functools.lru_cache(maxsize=16)
def _s3(root: str) -> S3Location:
    return S3Location.parse(root)


def _strip_scheme(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith(_FILE_SCHEME):
        return path[len(_FILE_SCHEME) :]
    return path


def store_root(uri: str) -> str:
    """The configured root, resolved: ``file:///srv/remote`` or ``/srv/remote`` ->
    ``/srv/remote`` with its symlinks and ``..`` resolved, no trailing slash.

    ``s3://BUCKET/PREFIX`` -> the same, normalised (no trailing slash).

    Refused (``ValueError``): an empty or relative root, the filesystem root itself (it would let
    a delete reach anything), an S3 URI :meth:`S3Location.parse` refuses, any other scheme."""
    if not uri:
        raise ValueError("the remote store's root is not configured")
    if uri.startswith(_S3_SCHEME):
        return _s3(uri).uri
    if "://" in uri and not uri.startswith("file://"):
        raise ValueError(f"unsupported remote store {uri!r}: s3:// or file:// roots only")
    path = _strip_scheme(uri)
    if not os.path.isabs(path):
        raise ValueError(f"the remote store's root must be absolute, not {uri!r}")
    resolved = os.path.realpath(path)
    if resolved == "/":
        raise ValueError(f"the remote store's root may not be the filesystem root ({uri!r})")
    return resolved


def store_entry(
    object_path: str | None, root: str, dirs: dict[str, str] | None = None
) -> str | None:
    """The directory entry that deleting ``object_path`` removes, if it lies strictly inside the
    store rooted at ``root`` (a :func:`store_root` result); else None.

    The rule: the object's parent directory is resolved (symlinks, ``.`` and ``..``) and its
    own name kept, and that entry must be below the root. The name is kept unresolved because a
    delete removes the entry itself: a symlink object is unlinked as a link, never followed, so
    its target is never touched (and a directory object is removed only when it is a real
    directory, see ``jobkit.delete_entry``). Outside: an empty or relative path, a name of
    ``.`` or ``..``, the root itself, anything whose resolved parent is not the root or below it.
    A ``file:`` scheme and trailing slashes are dropped first.

    ``dirs`` caches resolved parents (raw parent -> resolved) for the caller's batch: plans come
    partition by partition, so a batch has few directories and most rows cost a dict lookup.
    """
    if not object_path:
        return None
    if root.startswith(_S3_SCHEME):  # the object's URI itself, when its key is under the prefix
        return object_path if _s3(root).key_of(object_path) is not None else None
    path = _strip_scheme(object_path).rstrip("/")
    if not path.startswith("/"):
        return None
    parent, _, name = path.rpartition("/")
    if name in ("", ".", ".."):
        return None
    if dirs is None:
        resolved = os.path.realpath(parent or "/")
    else:
        resolved = dirs.get(parent)
        if resolved is None:
            resolved = dirs[parent] = os.path.realpath(parent or "/")
    entry = f"{resolved.rstrip('/')}/{name}"
    return entry if entry.startswith(root + "/") else None


def inside_store(object_path: str | None, root: str) -> bool:
    """Whether deleting ``object_path`` stays inside the store rooted at ``root`` (a resolved
    :func:`store_root`); the rule is :func:`store_entry`'s."""
    return store_entry(object_path, root) is not None
