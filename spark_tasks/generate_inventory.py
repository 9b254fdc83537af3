"""Write a synthetic remote-segment inventory and matching partition state (DESIGN.md schemas).

    python -m spark_tasks.generate_inventory --out DIR --segments N --topics T \
        [--partitions-per-topic P] [--seed S] [--now-ms T] [--remote-root s3://BUCKET/PREFIX]
        [--write-objects [--object-bytes B]]

Deterministic for a seed; written one row group per batch of partitions, so 10M segments stay
within a few hundred MB. Prints the counts (``DIR/counts.json``) so a test can check a job's
totals against the generator's own. Each partition looks like a tiered Kafka partition after
some life (finished and crashed deletes, an upload in flight in every seventh, the epoch cache
truncated at the log start offset); ``object_path`` follows the brokers' key layout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_agent.contract.choices import DisablePolicy, RemoteSegmentState, TieredState
from broker_agent.contract.objectstore import ObjectStoreConfig, S3Location
from spark_tasks.schema import EPOCH_ENTRY, INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA

__all__ = ["DEFAULT_REMOTE_ROOT", "generate"]

DEFAULT_NOW_MS = 1_700_000_000_000
#: Where the generated segments' objects are said to be (and written with ``write_objects``).
DEFAULT_REMOTE_ROOT = "s3://strata-remote/generated"
#: Concurrent PUTs of ``write_objects``.
PUT_THREADS = 32
RECORDS_PER_SEGMENT = 1000
SEGMENT_INTERVAL_MS = 60_000
BATCH_ROWS = 500_000
STATE_CODES = RemoteSegmentState.ALL
CSS, CSF, DSS, DSF = range(4)


def _partition_sizes(segments: int, partitions: int) -> np.ndarray:
    base, extra = divmod(segments, partitions)
    sizes = np.full(partitions, base, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


def generate(
    out: str | os.PathLike,
    segments: int,
    topics: int,
    partitions_per_topic: int = 4,
    seed: int = 42,
    now_ms: int = DEFAULT_NOW_MS,
    cluster: str = "sim",
    remote_root: str = DEFAULT_REMOTE_ROOT,
    write_objects: bool = False,
    object_bytes: int = 0,
) -> dict[str, Any]:
    """Write the inventory and partition state under ``out``; return the counts. Segments'
    objects lie under ``remote_root`` (``s3://BUCKET/PREFIX``; anything else is refused with a
    ``ValueError``), written there too with ``write_objects``."""
    out = Path(out)
    (out / "inventory").mkdir(parents=True, exist_ok=True)
    (out / "partitions").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_parts = topics * partitions_per_topic
    sizes = _partition_sizes(segments, n_parts)
    topic_names = [f"topic-{t:04d}" for t in range(topics)]
    topic_ids = [f"{seed:08x}-{t:04x}-4000-8000-{t * 7919 + seed:012x}" for t in range(topics)]
    counts = np.zeros((topics, 4, 2), dtype=np.int64)  # topic, state, (segments, bytes)

    inv_writer = pq.ParquetWriter(out / "inventory" / "part-00000.parquet", INVENTORY_SCHEMA)
    part_rows: dict[str, list[Any]] = {f.name: [] for f in PARTITION_STATE_SCHEMA}
    batch: list[pa.RecordBatch] = []
    batch_rows = 0
    root = S3Location.parse(remote_root).uri
    client = (
        ObjectStoreConfig.from_env().client(max_pool_connections=PUT_THREADS)
        if (write_objects)
        else None
    )
    try:
        for gp in range(n_parts):
            t, p = divmod(gp, partitions_per_topic)
            n = int(sizes[gp])
            kind = t % 4  # 0 time, 1 size, 2 both, 3 delete-policy disablement
            idx = np.arange(n, dtype=np.int64)
            start = idx * RECORDS_PER_SEGMENT
            end = start + RECORDS_PER_SEGMENT - 1
            max_ts = now_ms - (n - idx) * SEGMENT_INTERVAL_MS + rng.integers(0, 1000, n)
            size = rng.integers(512 * 1024, 1536 * 1024, n, dtype=np.int64)
            # Leader epochs: three, each starting on a segment boundary.
            epoch_of = np.minimum(idx * 3 // max(n, 1), 2).astype(np.int32)
            state = np.full(n, CSF, dtype=np.int8)
            n_dsf = n // 50
            n_dss = min(n - n_dsf, n // 100 if n >= 100 else int(n >= 10))
            state[:n_dsf] = DSF
            state[n_dsf : n_dsf + n_dss] = DSS
            if n and gp % 7 == 0:
                state[-1] = CSS
            event_ts = max_ts + 5_000
            if n and gp % 7 == 0:
                event_ts[-1] = now_ms - 60_000
            tiered = np.zeros(n, dtype=np.int32)
            if kind == 3:
                tiered[int(n * 0.8) :] = 1
            if n:
                seg_id = pc.binary_join_element_wise(
                    pa.array([f"{t:04x}{p:04x}"] * n),
                    pc.cast(pa.array(idx), pa.string()),
                    "-",
                )
                paths = pc.binary_join_element_wise(
                    pa.array([f"{root}/{topic_names[t]}-{topic_ids[t]}/{p}/"] * n),
                    pc.utf8_lpad(pc.cast(pa.array(start), pa.string()), 20, "0"),
                    pa.array(["-"] * n),
                    seg_id,
                    pa.array([".log"] * n),
                    "",
                )
            else:
                seg_id = pa.array([], pa.string())
                paths = pa.array([], pa.string())
            epochs = pa.ListArray.from_arrays(
                pa.array(np.arange(n + 1, dtype=np.int32)),
                pa.StructArray.from_arrays(
                    # one epoch a segment, starting at the segment's own start offset
                    [pa.array(epoch_of), pa.array(start)],
                    fields=list(EPOCH_ENTRY),
                ),
            )
            rb = pa.RecordBatch.from_arrays(
                [
                    pa.array([cluster] * n),
                    pa.array([topic_names[t]] * n),
                    pa.array([topic_ids[t]] * n),
                    pa.array(np.full(n, p, dtype=np.int32)),
                    seg_id,
                    pa.array(start),
                    pa.array(end),
                    pa.array(max_ts),
                    pa.array(size),
                    epochs,
                    pa.array(tiered),
                    pa.array(np.array(STATE_CODES, dtype=object)[state].tolist(), pa.string()),
                    paths,
                    pa.array(event_ts),
                ],
                schema=INVENTORY_SCHEMA,
            )
            batch.append(rb)
            batch_rows += n
            for code in range(4):
                mask = state == code
                counts[t, code, 0] += int(mask.sum())
                counts[t, code, 1] += int(size[mask].sum())
            if client is not None:
                _write_objects(client, paths, state, object_bytes)

            # Partition state.
            live_from = n_dsf + n_dss
            lso = int(start[live_from]) if live_from < n else (int(end[-1]) + 1 if n else 0)
            remote_end = int(end[-1]) if n else -1
            untiered_records = 3 * RECORDS_PER_SEGMENT
            leo = remote_end + 1 + untiered_records
            local_lso = int(start[max(0, n - max(1, n // 10))]) if n else 0
            lineage = _truncated_lineage(epoch_of, start, lso)
            total_bytes = int(size[state == CSF].sum())
            local_bytes = int(rng.integers(1, 4) * 1024 * 1024)
            retention_ms = -1 if kind == 1 else int((n * 0.7) * SEGMENT_INTERVAL_MS)
            retention_bytes = -1 if kind in (0, 3) else int(total_bytes * 0.75)
            row = {
                "cluster": cluster,
                "topic": topic_names[t],
                "topic_id": topic_ids[t],
                "partition": p,
                "retention_ms": retention_ms,
                "retention_bytes": retention_bytes,
                "log_start_offset": lso,
                "local_log_start_offset": local_lso,
                "log_end_offset": leo,
                "local_untiered_bytes": local_bytes,
                "leader_epochs": lineage,
                "tiered_state": TieredState.ENABLED,
                "tiered_epoch": 1 if kind == 3 else 0,
                "disable_policy": DisablePolicy.DELETE if kind == 3 else None,
                "purge_below_tiered_epoch": 1 if kind == 3 else None,
            }
            for key, value in row.items():
                part_rows[key].append(value)
            if batch_rows >= BATCH_ROWS:
                inv_writer.write_table(pa.Table.from_batches(batch, INVENTORY_SCHEMA))
                batch, batch_rows = [], 0
        if batch:
            inv_writer.write_table(pa.Table.from_batches(batch, INVENTORY_SCHEMA))
    finally:
        inv_writer.close()
    pq.write_table(
        pa.table(part_rows, schema=PARTITION_STATE_SCHEMA),
        out / "partitions" / "part-00000.parquet",
    )
    result = _counts_json(counts, topic_names, segments, n_parts, seed, now_ms)
    (out / "counts.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    return result


def _truncated_lineage(epoch_of: np.ndarray, start: np.ndarray, lso: int) -> list[dict[str, int]]:
    """The partition's leader-epoch cache, truncated at the log start offset (Kafka moves the
    first entry's offset up to the log start offset and drops the epochs wholly before it)."""
    entries: list[dict[str, int]] = []
    for epoch in sorted(set(epoch_of.tolist())):
        first = int(start[np.argmax(epoch_of == epoch)])
        entries.append({"epoch": int(epoch), "start_offset": first})
    if not entries:
        return [{"epoch": 0, "start_offset": lso}]
    kept = [e for e in entries if e["start_offset"] > lso]
    at = [e for e in entries if e["start_offset"] <= lso]
    head = [{"epoch": at[-1]["epoch"], "start_offset": lso}] if at else []
    return head + kept


def _write_objects(client, paths: pa.Array, state: np.ndarray, object_bytes: int) -> None:
    """PUT the object of every segment not DELETE_SEGMENT_FINISHED (a finished delete left
    nothing behind), ``PUT_THREADS`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    payload = b"\0" * object_bytes
    live = [
        path for path, code in zip(paths.to_pylist(), state.tolist(), strict=True) if code != DSF
    ]

    def put(uri: str) -> None:  # s3://BUCKET/KEY
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        client.put_object(Bucket=bucket, Key=key, Body=payload)

    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for _ in pool.map(put, live):
            pass


def _counts_json(
    counts: np.ndarray, topics: list[str], segments: int, partitions: int, seed: int, now_ms: int
) -> dict[str, Any]:
    per_topic: dict[str, dict[str, dict[str, int]]] = {}
    for t, name in enumerate(topics):
        per_topic[name] = {
            STATE_CODES[c]: {"segments": int(counts[t, c, 0]), "bytes": int(counts[t, c, 1])}
            for c in range(4)
            if counts[t, c, 0]
        }
    return {
        "segments": int(counts[:, :, 0].sum()),
        "bytes": int(counts[:, :, 1].sum()),
        "requested_segments": segments,
        "partitions": partitions,
        "seed": seed,
        "now_ms": now_ms,
        "topics": per_topic,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--segments", type=int, required=True)
    parser.add_argument("--topics", type=int, required=True)
    parser.add_argument("--partitions-per-topic", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--now-ms", type=int, default=DEFAULT_NOW_MS)
    parser.add_argument("--cluster", default="sim")
    parser.add_argument("--remote-root", default=DEFAULT_REMOTE_ROOT, help="s3://BUCKET/PREFIX")
    parser.add_argument(
        "--write-objects", action="store_true", help="PUT the live segments' objects"
    )
    parser.add_argument("--object-bytes", type=int, default=0)
    args = parser.parse_args(argv)
    if args.segments < 0 or args.topics < 1 or args.partitions_per_topic < 1:
        parser.error("--segments >= 0, --topics >= 1 and --partitions-per-topic >= 1")
    result = generate(
        args.out,
        args.segments,
        args.topics,
        partitions_per_topic=args.partitions_per_topic,
        seed=args.seed,
        now_ms=args.now_ms,
        cluster=args.cluster,
        remote_root=args.remote_root,
        write_objects=args.write_objects,
        object_bytes=args.object_bytes,
    )
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
