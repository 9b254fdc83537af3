"""The controller's metadata as rows: ``GET /v1/metadata?format=tsv``.

A 1,000,000-partition cluster's metadata is ~260 MB of JSON, which PostgreSQL had to parse as
``jsonb``: the largest part of a first sync after the replicas (#17). As rows it goes in with
``COPY``, like an agent's snapshot. JSON stays the default. Line 1 is the answer without topics
as JSON plus the column lists and ``topic_count``; then topic rows; then partition rows (a delta
lists changed ones only). A topic's ``digest`` (md5 of its rows) lets a console skip a topic it
already holds when a full answer comes where it asked for a delta.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from broker_agent.contract.models import ClusterMetadata, TopicMetadata, tsv_value

__all__ = [
    "METADATA_PARTITION_COLUMNS",
    "METADATA_TOPIC_COLUMNS",
    "METADATA_TSV_HELP",
    "metadata_rows_body",
    "metadata_topic_row",
    "metadata_tsv",
    "split_metadata_tsv",
]

#: A topic row (``TopicMetadata`` without ``partitions``, then ``digest``).
METADATA_TOPIC_COLUMNS = (
    "name",
    "topic_id",
    "configs",
    "tiered_state",
    "tiered_epoch",
    "disable_policy",
    "tiering_acks",
    "initial_partition_count",
    "undeleted_partition_count",
    "digest",
)
#: A partition row (``PartitionMetadata`` after its topic's name).
METADATA_PARTITION_COLUMNS = (
    "topic",
    "partition",
    "replicas",
    "leader",
    "leader_epoch",
    "partition_epoch",
    "isr",
    "offline_replicas",
    "created",
    "leader_epoch_after_creation",
    "leader_epoch_before_deletion",
    "marked_for_deletion",
)


#: The ``format`` parameter's description on the controllers' ``GET /v1/metadata``.
METADATA_TSV_HELP = (
    "json (default): a ClusterMetadata. tsv: line 1 the answer without topics as JSON, with "
    "topic_columns, partition_columns and topic_count; then topic_count topic rows, then one row "
    "per partition, in PostgreSQL's COPY text format."
)


def metadata_topic_row(topic: dict[str, Any], partition_rows: Sequence[str]) -> str:
    """The row of ``topic`` (its fields by :data:`METADATA_TOPIC_COLUMNS`, ``digest`` aside)
    with the digest of that row and of ``partition_rows``, the topic's rows in answer order."""
    row = "\t".join(tsv_value(topic[c]) for c in METADATA_TOPIC_COLUMNS[:-1])
    digest = hashlib.md5(usedforsecurity=False)
    digest.update(row.encode())
    for line in partition_rows:
        digest.update(b"\n")
        digest.update(line.encode())
    return f"{row}\t{digest.hexdigest()}"


def _partition_rows(topic: TopicMetadata) -> list[str]:
    name = tsv_value(topic.name)
    return [
        "\t".join([name, *(tsv_value(p[c]) for c in METADATA_PARTITION_COLUMNS[1:])])
        for p in (p.model_dump() for p in topic.partitions)
    ]


def metadata_rows_body(
    envelope: dict[str, Any], topics: Iterable[tuple[dict[str, Any], Sequence[str]]]
) -> bytes:
    """A ``format=tsv`` answer: ``envelope`` (the answer's fields but ``topics``, JSON-ready)
    as line 1 with the column lists and topic count, then a row per topic of ``topics`` (its
    fields without partitions, and its partitions' rows), then all their partition rows."""
    topic_rows: list[str] = []
    partition_rows: list[str] = []
    for fields, rows in topics:
        topic_rows.append(metadata_topic_row(fields, rows))
        partition_rows.extend(rows)
    head = {
        **envelope,
        "topic_columns": list(METADATA_TOPIC_COLUMNS),
        "partition_columns": list(METADATA_PARTITION_COLUMNS),
        "topic_count": len(topic_rows),
    }
    lines = [json.dumps(head, separators=(",", ":")), *topic_rows, *partition_rows, ""]
    return "\n".join(lines).encode()


def metadata_tsv(md: ClusterMetadata) -> bytes:
    """``md`` as ``format=tsv`` (see the module docstring)."""
    return metadata_rows_body(
        md.model_dump(mode="json", exclude={"topics"}),
        ((t.model_dump(exclude={"partitions"}), _partition_rows(t)) for t in md.topics),
    )


def split_metadata_tsv(body: bytes) -> tuple[ClusterMetadata, memoryview, memoryview] | None:
    """A ``format=tsv`` answer as (the metadata without its topics, the topic rows, the
    partition rows, as they came); ``None`` when ``body`` is a JSON answer instead (a
    controller that predates the format ignores the parameter). Raises ``ValueError`` for an
    envelope that is not one, or fewer topic rows than it announces."""
    end = body.find(b"\n")
    if end < 0 or not body.startswith(b"{") or body.find(b'"topic_columns"', 0, end) < 0:
        return None
    head = json.loads(body[:end])
    if not isinstance(head, dict):
        raise ValueError("not a metadata answer")
    if tuple(head.pop("topic_columns", ())) != METADATA_TOPIC_COLUMNS:
        raise ValueError("unexpected topic columns")
    if tuple(head.pop("partition_columns", ())) != METADATA_PARTITION_COLUMNS:
        raise ValueError("unexpected partition columns")
    count = head.pop("topic_count", None)
    if not isinstance(count, int) or count < 0:
        raise ValueError("no topic_count")
    start = pos = end + 1
    for _ in range(count):
        nl = body.find(b"\n", pos)
        if nl < 0:
            raise ValueError(f"fewer than {count} topic rows")
        pos = nl + 1
    view = memoryview(body)
    md = ClusterMetadata.model_validate({**head, "topics": []})
    return md, view[start:pos], view[pos:]
