"""Quarantined partitions on the console's side (issue #39): loaded from a run's
``quarantined/``, audited, shown on the run's page and as a health warning.

:func:`load_quarantined` streams ``quarantined/`` into the summary (at most
:data:`QUARANTINE_NAMED` named); :func:`record_quarantine_event` writes one
``spark.partitions_quarantined`` event in the transaction that marks the run succeeded;
:func:`health_warnings` (registered with ``console.health``) warns while a cluster's latest
retention or purge run of the last week quarantined partitions. ``/api/v1/health`` is public,
so it names counts only; the runs' pages name the partitions.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from django.utils import timezone

from audit.choices import AuditOutcome
from spark_tasks.audit import record_run_event
from spark_tasks.models import SparkJob, SparkJobRun, SparkRunState
from spark_tasks.schema import QuarantineReason

__all__ = [
    "QUARANTINE_JOBS",
    "QUARANTINE_NAMED",
    "QuarantineAction",
    "health_warnings",
    "load_quarantined",
    "quarantined_count",
    "record_quarantine_event",
]

#: Partitions named in a run's summary and audit event (the counts cover all of them).
QUARANTINE_NAMED = 100
#: The jobs that quarantine (they plan from the remote-log metadata).
QUARANTINE_JOBS = (SparkJob.RETENTION, SparkJob.PURGE)
_BATCH_ROWS = 65_536
#: How far back the health warning looks for a cluster's latest runs.
WARNING_WINDOW = dt.timedelta(days=7)


class QuarantineAction:
    QUARANTINED = "spark.partitions_quarantined"


def load_quarantined(out: Path) -> list[dict[str, Any]]:
    """The partitions of ``out/quarantined/``, sorted, at most :data:`QUARANTINE_NAMED`: each
    {cluster, topic, partition, outside_objects, segments, object_path} (``object_path``: the
    first record's object outside the store). [] when there is no such output."""
    path = Path(out) / "quarantined"
    if not path.is_dir():
        return []
    by_key: dict[tuple, dict[str, Any]] = {}
    dataset = ds.dataset(str(path), format="parquet")
    columns = ["cluster", "topic", "partition", "object_path", "reason"]
    for batch in dataset.to_batches(columns=columns, batch_size=_BATCH_ROWS):
        cols = batch.to_pydict()
        for cluster, topic, partition, path_, reason in zip(
            *(cols[c] for c in columns), strict=True
        ):
            entry = by_key.setdefault(
                (cluster or "", topic or "", partition if partition is not None else -1),
                {
                    "cluster": cluster,
                    "topic": topic,
                    "partition": partition,
                    "outside_objects": 0,
                    "segments": 0,
                    "object_path": None,
                },
            )
            entry["segments"] += 1
            if reason == QuarantineReason.OUTSIDE_STORE:
                entry["outside_objects"] += 1
                entry["object_path"] = entry["object_path"] or path_
    return [by_key[k] for k in sorted(by_key)[:QUARANTINE_NAMED]]


def quarantined_count(summary: dict[str, Any] | None) -> int:
    """How many partitions a run's summary says were quarantined (0 if none or not said)."""
    quarantined = (summary or {}).get("quarantined") or {}
    try:
        return int(quarantined.get("partitions") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0


def record_quarantine_event(run: SparkJobRun, summary: dict[str, Any] | None) -> None:
    """One ``spark.partitions_quarantined`` event for ``run`` if it quarantined anything; call
    inside the transaction of its state change, after that change."""
    count = quarantined_count(summary)
    if not count:
        return
    assert summary is not None
    named = summary.get("quarantined_partitions") or []
    record_run_event(
        run,
        QuarantineAction.QUARANTINED,
        outcome=AuditOutcome.FAILURE,
        extra={
            "quarantined": summary.get("quarantined"),
            "partitions": [
                {k: p.get(k) for k in ("topic", "partition", "outside_objects", "object_path")}
                for p in named
            ],
            "named": len(named),
            "reason": "remote-log metadata names objects outside the remote store; "
            "the partitions' cleanup is refused",
        },
    )


def health_warnings() -> list[str]:
    """``quarantined_partitions`` when the latest succeeded retention or purge run of a cluster
    quarantined partitions (the larger of the two per cluster). One query over the runs
    created in the last :data:`WARNING_WINDOW` (the ``(job, -created_at)`` index bounds it
    whatever the history's length: retention runs hourly, so a cluster's latest runs are in
    it; a cluster with no run that recent is not warned about)."""
    latest = (
        SparkJobRun.objects.filter(
            state=SparkRunState.SUCCEEDED,
            job__in=QUARANTINE_JOBS,
            created_at__gte=timezone.now() - WARNING_WINDOW,
        )
        .exclude(cluster=None)
        .order_by("cluster", "job", "-finished_at", "-pk")
        .distinct("cluster", "job")
        .values_list("cluster", "output_summary__quarantined__partitions")
    )
    by_cluster: dict[str, int] = {}
    for cluster, partitions in latest:
        count = quarantined_count({"quarantined": {"partitions": partitions}})
        if count:
            by_cluster[cluster] = max(by_cluster.get(cluster, 0), count)
    if not by_cluster:
        return []
    partitions = sum(by_cluster.values())
    clusters = len(by_cluster)
    return [
        f"quarantined_partitions: {partitions} partition{'s' if partitions != 1 else ''} in "
        f"{clusters} cluster{'s' if clusters != 1 else ''} with remote-log metadata naming "
        "objects outside the remote store; their retention and purge are refused (Spark jobs "
        "page)"
    ]
