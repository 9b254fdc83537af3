"""The digest of a Spark plan (``plan/``): what an approval of a reviewed plan names.

Computed once when a dry run succeeds and stored on its ``SparkJobRun``, so no web request scans
a plan. The algorithm must stay byte for byte what approvals already name: each row's canonical
JSON over :data:`PLAN_DIGEST_COLUMNS` (sorted keys, no spaces, ``default=str``), its SHA-256 as
an integer summed modulo 2**256 (row order and file split do not matter), then the SHA-256 hex
of ``"<rows>:<sum as 64 hex digits>"``. Rows are streamed; a plan is never loaded whole.
"""

from __future__ import annotations

import hashlib
import json
import os

__all__ = ["PLAN_DIGEST_COLUMNS", "plan_digest"]

#: Columns of a plan row that the digest covers (DESIGN.md "Outputs: plan/"), in this order.
PLAN_DIGEST_COLUMNS = (
    "segment_id",
    "cluster",
    "topic",
    "partition",
    "reason",
    "size_bytes",
    "object_path",
)
_MOD = 1 << 256
_BATCH_ROWS = 65_536


def plan_digest(plan_dir: str | os.PathLike) -> tuple[str, int]:
    """``(sha256 hex digest, rows)`` of the plan in ``plan_dir`` (a ``plan/`` directory of
    Parquet files; Spark's ``_``/``.`` files are skipped). Raises ``OSError`` / ``ValueError``
    when it cannot be read."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(os.fspath(plan_dir), format="parquet")
    present = [c for c in PLAN_DIGEST_COLUMNS if c in dataset.schema.names]
    total = 0
    rows = 0
    sha256 = hashlib.sha256
    dumps = json.dumps
    for batch in dataset.to_batches(columns=present, batch_size=_BATCH_ROWS):
        cols = batch.to_pydict()
        for i in range(batch.num_rows):
            body = dumps(
                {c: cols[c][i] for c in present},
                sort_keys=True,
                separators=(",", ":"),
                default=str,
            )
            total = (total + int.from_bytes(sha256(body.encode()).digest(), "big")) % _MOD
            rows += 1
    return hashlib.sha256(f"{rows}:{total:064x}".encode()).hexdigest(), rows
