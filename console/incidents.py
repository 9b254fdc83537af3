"""The KIP-112 incident panel of the brokers page: one log dir's replicas, a page at a time,
and what its failure did to their partitions (leaders lost, offline, under min ISR)."""

from __future__ import annotations

from django.core.paginator import Page, Paginator
from django.db.models import Count, F, Q, Value, Window
from django.db.models.functions import Least, RowNumber

from console.choices import LogDirState, ReplicaState
from console.models import AgentEvent, LogDir, Replica

#: Replicas per page of the incident panel.
INCIDENT_PAGE_SIZE = 25


def incident(log_dir: LogDir, page: int | str | None = None) -> dict:
    """KIP-112 incident panel for an offline dir: its replicas, the partitions that lost their
    leader or fell under min ISR, and where leadership went (a fixed number of queries)."""
    broker_id = log_dir.broker.broker_id
    on_dir = Q(log_dir=log_dir)
    if log_dir.state == LogDirState.OFFLINE:
        # KIP-112: a broker that started with this dir already failed cannot say where its
        # missing replicas were; they are offline with no dir. Listed here, marked "dir
        # unknown" (with several offline dirs, one of them holds each).
        on_dir |= Q(broker_id=log_dir.broker_id, log_dir__isnull=True, state=ReplicaState.OFFLINE)
    # One query: the counts ride on the page's rows as window aggregates (one pass over the
    # dir's replicas and their partitions, at fleet size 2,500 of each, where a count, an
    # aggregate and the page were three, #17), and the page is found by row number, clamped to
    # the last one (past the end, as paginate() does) in the same statement.
    windows = {
        "replicas": None,
        "lost_leader": Q(partition__previous_leader=broker_id) & ~Q(partition__leader=broker_id),
        "offline": Q(partition__offline=True),
        "under_min_isr": Q(partition__under_min_isr=True),
        "unknown_dir": Q(log_dir__isnull=True),
    }
    order = ("partition__topic_name", "partition__partition")
    try:
        number = max(int(page or 1), 1)
    except (TypeError, ValueError):
        number = 1
    size = INCIDENT_PAGE_SIZE
    last_start = (F("n_replicas") - 1) / size * size  # integer division: the last page's start
    rows = list(
        Replica.objects.filter(on_dir)
        .select_related("partition")
        .only(  # what the panel shows: narrow rows to sort
            "state",
            "log_dir_id",
            "partition__topic_name",
            "partition__partition",
            "partition__leader",
            "partition__previous_leader",
            "partition__isr",
            "partition__under_min_isr",
            "partition__under_replicated",
        )
        .annotate(
            row=Window(RowNumber(), order_by=[F(f).asc() for f in order]),
            **{f"n_{k}": Window(Count("partition_id", filter=q)) for k, q in windows.items()},
        )
        .filter(row__gt=Least(Value((number - 1) * size), last_start))
        .order_by(*order)[:size]
    )
    counts = {k: getattr(rows[0], f"n_{k}") if rows else 0 for k in windows}
    paginator = Paginator([], size)
    paginator.count = counts["replicas"]  # a cached_property
    pg = Page(rows, (rows[0].row - 1) // size + 1 if rows else 1, paginator)
    event = (
        AgentEvent.objects.filter(
            cluster_id=log_dir.cluster_id, broker_id=broker_id, log_dir=log_dir.name
        )
        .order_by("-occurred_at")
        .first()
    )
    return {"log_dir": log_dir, "page": pg, "counts": counts, "event": event}
