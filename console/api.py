"""Console's part of the JSON API (``/api/v1/``): health, who am I, and the read API.

The read API's paths and field names are STABLE (other tools rely on them, see the console
issue): ``GET /clusters``, ``/clusters/{name}/brokers``, ``/clusters/{name}/topics``,
``/clusters/{name}/topics/{topic}``, ``/clusters/{name}/partition-for-key``, and the history
series ``/clusters/{name}/brokers/{broker}/log-dirs/{log_dir}/history`` and
``/clusters/{name}/topics/{topic}/history`` (``?range=1h|24h|30d``). Every response
carries ``synced_at`` (the end of the last sync of the data it shows; for the cluster list, the
oldest of them) and the cluster-scoped ones ``stale_sources``. Same permission as the pages:
any Strata role may read.
"""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Query, Router
from ninja.errors import HttpError

from accounts.roles import Role, has_role
from console import capabilities, health, history, ordering, selectors
from console.api_schemas import (
    BrokersOut,
    ClustersOut,
    DirHistoryOut,
    GroupDetailOut,
    GroupsOut,
    PartitionForKeyOut,
    PartitionOut,
    TopicFilters,
    TopicHistoryOut,
    TopicOut,
    TopicPointOut,
    TopicsOut,
)
from console.choices import BrokerState
from console.models import Cluster, LogDir, Partition, ReplicaMove, Topic
from console.sync.rows import TIER_METRICS

#: The console's part of the API. It carries no tag itself: ninja adds a router's tags to every
#: router added under it, so a tag here listed each inventory route twice in the docs (#39).
#: Each route has one tag: ``health`` (liveness, who am I) or ``inventory`` (``read``).
router = Router()
read = Router(tags=["inventory"])
HEALTH_TAGS = ["health"]


class Forbidden(HttpError):
    code = "FORBIDDEN"

    def __init__(self, message: str):
        super().__init__(403, message)


class InvalidRequest(HttpError):
    code = "INVALID_REQUEST"

    def __init__(self, message: str):
        super().__init__(400, message)


def _require_viewer(request: HttpRequest) -> None:
    if not has_role(request.user, Role.VIEWER):
        raise Forbidden("Reading the inventory needs a Strata role (viewer or above).")


@router.get(
    "/health",
    auth=None,
    tags=HEALTH_TAGS,
    summary="Liveness of database, Redis, Celery workers and the object store",
)
def get_health(request: HttpRequest) -> JsonResponse:
    """200 when the database and Redis answer and at least one worker answered a ping, else 503.
    ``clusters``: each cluster's backend and last sync (``ok``, ``not synced yet``, or its
    source's error code: ``Kafka bootstrap error: ...`` or ``controller error: ...``), shown and
    not counted in ``status``."""
    result = health.check(clusters=True)
    return JsonResponse(result.as_dict(), status=200 if result.ok else 503)


@router.get("/me", tags=HEALTH_TAGS, summary="Who the token or session belongs to, and their roles")
def get_me(request: HttpRequest) -> dict:
    from accounts.roles import user_roles

    return {"username": request.user.get_username(), "roles": sorted(user_roles(request.user))}


# -- schemas -----------------------------------------------------------------------------------


# -- endpoints ---------------------------------------------------------------------------------


def _oldest(values: list[datetime | None]) -> datetime | None:
    if not values or any(v is None for v in values):
        return None
    return min(values)


@read.get(
    "/clusters", response=ClustersOut, summary="Registered clusters with their health numbers"
)
def list_clusters(request: HttpRequest) -> dict:
    """``synced_at`` at the top is the oldest of the clusters' (null if one never synced)."""
    _require_viewer(request)
    rows = selectors.cluster_overview()
    clusters = []
    for row in rows:
        c: Cluster = row["cluster"]
        clusters.append(
            {
                "name": c.name,
                "backend": c.backend,
                "cluster_id": c.cluster_id,
                "controller_url": c.controller_url,
                "kafka_bootstrap": c.kafka_bootstrap,
                "sync_error_source": c.sync_error_label,
                "synced_at": c.synced_at,
                "sync_duration_ms": c.sync_duration_ms,
                "metadata_version": c.metadata_version,
                "controller_stale": c.controller_stale,
                "controller_error": c.controller_error,
                "controller_last_good_at": c.controller_last_good_at,
                "broker_count": c.broker_count,
                "brokers_online": row["brokers_online"],
                "brokers_degraded": row["brokers_degraded"],
                "brokers_offline": row["brokers_offline"],
                "brokers_stale": row["brokers_stale"],
                "offline_log_directory_count": row["offline_log_dirs"],
                "topic_count": c.topic_count,
                "topics_by_tiered_state": row["topics_by_tiered_state"],
                "partition_count": c.partition_count,
                "offline_partition_count": c.offline_partition_count,
                "under_replicated_partition_count": c.under_replicated_partition_count,
                "under_min_isr_partition_count": c.under_min_isr_partition_count,
                "offline_replica_count": c.offline_replica_count,
                "capabilities": capabilities.capabilities(c),
            }
        )
    return {"synced_at": _oldest([c["synced_at"] for c in clusters]), "clusters": clusters}


@read.get(
    "/clusters/{name}/brokers",
    response=BrokersOut,
    summary="Brokers with KIP-112 counts and their log dirs",
)
def list_brokers(request: HttpRequest, name: str) -> dict:
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    grid = selectors.broker_grid(cluster)
    brokers = []
    for b in grid["brokers"]:
        dirs = sorted(grid["log_dirs"][b.pk].values(), key=lambda d: d.name)
        brokers.append(
            {
                "id": b.broker_id,
                "url": b.url,
                "state": b.state if b.state != BrokerState.UNKNOWN else BrokerState.OFFLINE,
                "alive": b.alive,
                "offline_log_directory_count": b.offline_log_directory_count,
                "offline_replica_count": b.offline_replica_count,
                "down_replica_count": b.down_replica_count,
                "stale": b.stale,
                "error": b.error,
                "last_good_at": b.last_good_at,
                "log_dirs": dirs,
            }
        )
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        "stale_sources": selectors.stale_sources(cluster),
        "brokers": brokers,
    }


def _topic_summary(t: Topic, nulls: dict[str, object]) -> dict:
    """A topic of the list; ``nulls``: :func:`_not_available`'s (its remote bytes null where
    the cluster cannot report them)."""
    return {
        "name": t.name,
        "topic_id": t.topic_id,
        "tiered_state": t.tiered_state,
        "tiered_epoch": t.tiered_epoch,
        "policy": t.disable_policy or None,
        "partition_count": t.partition_count,
        "initial_partition_count": t.initial_partition_count,
        "undeleted_partition_count": t.undeleted_partition_count,
        "remote_bytes": t.remote_bytes,
        "local_bytes": t.local_bytes,
        "has_remote_data": t.has_remote_data,
        "offline_partition_count": t.offline_partition_count,
        "under_replicated_partition_count": t.under_replicated_partition_count,
        "under_min_isr_partition_count": t.under_min_isr_partition_count,
        **{k: v for k, v in nulls.items() if k == "remote_bytes"},
    }


@read.get(
    "/clusters/{name}/topics",
    response=TopicsOut,
    summary="Topics, paginated, filtered as on the topics page",
)
def list_topics(request: HttpRequest, name: str, filters: Query[TopicFilters]) -> dict:
    """Filters: ``name`` (contains), ``tiered_state``, ``policy``, ``has_remote_data``; ``sort``
    one of name, remote_bytes, local_bytes, partitions, tiered_epoch, tiered_state (prefix
    ``-`` for descending); ``page`` / ``page_size`` (at most 1000)."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    params = filters.dict(exclude_none=True)
    if "has_remote_data" in params:
        params["has_remote_data"] = "true" if params["has_remote_data"] else "false"
    form, qs = selectors.topic_list(cluster, params, filters.sort)
    if form.errors:
        raise InvalidRequest("; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
    page = selectors.paginate(qs, filters.page, filters.page_size)
    nulls = _not_available(cluster)
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        "stale_sources": selectors.stale_sources(cluster),
        "count": page.paginator.count,
        "page": page.number,
        "page_size": page.paginator.per_page,
        "num_pages": page.paginator.num_pages,
        "results": [_topic_summary(t, nulls) for t in page.object_list],
    }


def _not_available(cluster: Cluster) -> dict[str, object]:
    """KIP-963's gauges and the remote bytes, ``None`` where ``cluster`` cannot report them
    (Kafka gives a partition's remote size only as RemoteLogSizeBytes, a JMX metric), with the
    reason as ``not_available``; ``{}`` where it can."""
    nulls = capabilities.gauges_not_available(cluster)
    return {**nulls, "remote_bytes": None} if nulls else {}


def _partitions(cluster: Cluster, rows) -> list:
    """The page's partitions, their KIP-963 gauges and remote bytes null where the cluster
    cannot report them, and their KIP-966 ELR too (set on the rows: no copy of each)."""
    if not capabilities.by_key(cluster)[capabilities.ELIGIBLE_LEADER_REPLICAS].supported:
        rows = list(rows)
        for p in rows:
            p.eligible_leader_replicas = p.last_known_elr = None
    nulls = _not_available(cluster)
    if not nulls:
        return list(rows)
    nulls.pop("not_available")
    return [PartitionOut.model_validate(p).model_copy(update=nulls) for p in rows]


@read.get(
    "/clusters/{name}/topics/{topic}",
    response=TopicOut,
    summary="One topic: KIP-950 tiering with offsets, KIP-253 counts, partitions (paginated)",
)
def get_topic(
    request: HttpRequest, name: str, topic: str, page: int = 1, page_size: int = 1000
) -> dict:
    """``tiering`` offsets are sums over the topic's partitions (each partition's own are in
    ``partitions``); partitions come ``page_size`` (at most 1000) at a time."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    t = selectors.get_topic(cluster, topic)
    parts = selectors.paginate(
        Partition.objects.filter(topic=t).order_by("partition"), page, page_size
    )
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        "stale_sources": selectors.stale_sources(cluster),
        "name": t.name,
        "topic_id": t.topic_id,
        "configs": t.configs,
        "tiering": {
            "state": t.tiered_state,
            "epoch": t.tiered_epoch,
            "policy": t.disable_policy or None,
            "remote_log_start_offset": t.remote_log_start_offset,
            "remote_log_end_offset": t.remote_log_end_offset,
            "local_log_start_offset": t.local_log_start_offset,
            "log_end_offset": t.log_end_offset,
            "log_start_offset": t.log_start_offset,
            "remote_bytes": t.remote_bytes,
            "local_bytes": t.local_bytes,
            "tiering_acks": t.tiering_acks,
            **{f: getattr(t, f) for f in TIER_METRICS},
            **_not_available(cluster),
        },
        "initial_partition_count": t.initial_partition_count,
        "undeleted_partition_count": t.undeleted_partition_count,
        "previous_undeleted_partition_count": t.previous_undeleted_partition_count,
        "partition_count": t.partition_count,
        "partitions_page": parts.number,
        "partitions_page_size": parts.paginator.per_page,
        "partitions": _partitions(cluster, parts.object_list),
        "dir_moves": list(ReplicaMove.objects.filter(cluster=cluster, topic_name=t.name)),
        "ordering": ordering.topic_ordering(t),
    }


@read.get(
    "/clusters/{name}/groups",
    response=GroupsOut,
    summary="Consumer groups, paged: committed positions and lag per partition (KIP-253)",
)
def list_groups(
    request: HttpRequest, name: str, page: int = 1, page_size: int = selectors.DEFAULT_PAGE_SIZE
) -> dict:
    """As of the last sync of the controller's group coordinator; groups by id, ``page_size``
    (at most 1000) at a time."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    groups, rows = ordering.group_positions(cluster, page, page_size)
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        "count": groups.paginator.count,
        "page": groups.number,
        "page_size": groups.paginator.per_page,
        "num_pages": groups.paginator.num_pages,
        "groups": rows,
    }


@read.get(
    "/clusters/{name}/groups/{group}",
    response=GroupDetailOut,
    summary="One consumer group: every committed position with its lag, paged",
)
def get_group(
    request: HttpRequest,
    name: str,
    group: str,
    page: int = 1,
    page_size: int = selectors.MAX_PAGE_SIZE,
) -> dict:
    """As of the last sync; positions by topic and partition, ``page_size`` (at most 1000) at
    a time."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    summary, positions = ordering.group_detail(cluster, group, page, page_size)
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        **summary,
        "page": positions.number,
        "page_size": positions.paginator.per_page,
        "num_pages": positions.paginator.num_pages,
        "positions": positions.object_list,
    }


@read.get(
    "/clusters/{name}/partition-for-key",
    response=PartitionForKeyOut,
    summary="KIP-253 linear hashing: the partition of a key, now and before the last change",
)
def partition_for_key(request: HttpRequest, name: str, topic: str, key: str) -> dict:
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    t = selectors.get_topic(cluster, topic)
    found = selectors.lookup_key(t, key)
    before = None
    if found.previous_undeleted_partition_count is not None:
        before = {
            "undeleted_partition_count": found.previous_undeleted_partition_count,
            "partition": found.previous_partition,
        }
    return {
        "cluster": cluster.name,
        "synced_at": cluster.synced_at,
        "topic": t.name,
        "key": key,
        "hash": found.hash,
        "partition": found.partition,
        "initial_partition_count": found.initial_partition_count,
        "undeleted_partition_count": found.undeleted_partition_count,
        "before": before,
    }


def _window(name: str) -> history.Window:
    if name not in history.RANGES:
        raise InvalidRequest(f"range must be one of {', '.join(history.RANGES)}, not {name!r}.")
    return history.RANGES[name]


def _series_head(cluster: Cluster, win: history.Window, now: datetime) -> dict:
    start, end = win.bounds(now)
    return {
        "cluster": cluster.name,
        "range": win.name,
        "step_seconds": win.step,
        "start": start,
        "end": end,
        "last_sample_at": cluster.history_sampled_at,
    }


@read.get(
    "/clusters/{name}/brokers/{broker}/log-dirs/{log_dir}/history",
    response=DirHistoryOut,
    summary="A log dir's usage, probe latency and state over time (peaks per bucket)",
)
def log_dir_history(
    request: HttpRequest,
    name: str,
    broker: int,
    log_dir: str,
    range_: str = Query("1h", alias="range"),
) -> dict:
    """``range``: ``1h`` (the default; 2-minute buckets), ``24h`` (5-minute), ``30d`` (hourly)."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    win, now = _window(range_), timezone.now()
    d = get_object_or_404(LogDir, cluster=cluster, broker__broker_id=broker, name=log_dir)
    return {
        **_series_head(cluster, win, now),
        "broker": broker,
        "log_dir": d.name,
        "points": history.dir_series([d.pk], win, now)[d.pk],
    }


@read.get(
    "/clusters/{name}/topics/{topic}/history",
    response=TopicHistoryOut,
    summary="A tiered topic's remote / local / fenced bytes and copy / delete lag over time",
)
def topic_history(
    request: HttpRequest, name: str, topic: str, range_: str = Query("1h", alias="range")
) -> dict:
    """``range`` as for log dirs. A topic that was never tiered is not sampled: no points. The
    remote bytes and KIP-963's lags are null where the cluster cannot report them (a kafka
    cluster: JMX only), as its page shows them not available."""
    _require_viewer(request)
    cluster = selectors.get_cluster(name)
    win, now = _window(range_), timezone.now()
    t = selectors.get_topic(cluster, topic)
    points = history.topic_series([t.pk], win, now)[t.pk]
    nulls = _not_available(cluster)
    if nulls:
        blank = {k: None for k in TopicPointOut.model_fields if k in nulls}
        points = [{**p, **blank} for p in points]
    return {
        **_series_head(cluster, win, now),
        "topic": t.name,
        "points": points,
    }


router.add_router("/", read)
