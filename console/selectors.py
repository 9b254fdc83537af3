"""The console's read queries, shared by the pages and the JSON API.

Every function here issues a fixed number of queries whatever the cluster size: lists are
paginated in SQL, per-cluster and per-topic numbers come from aggregates the sync maintains.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

import django_filters
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Count, F, Min, Q, QuerySet, RowRange, Sum, Window
from django.http import Http404
from django.template.defaultfilters import filesizeformat

from broker_agent.contract.choices import TopicConfig
from broker_agent.contract.hashing import (
    murmur2,
    parent_partition,
    partition_for_hash,
    partitions_split_from,
    to_positive,
)
from broker_agent.contract.ordering import creation_barrier, deletion_target
from broker_agent.contract.probes import slow_probe
from console.choices import (
    BrokerState,
    DisablePolicy,
    LogDirState,
    ReplicaCell,
    TaskState,
    TieredState,
    choices,
)
from console.models import (
    Broker,
    Cluster,
    LogDir,
    Partition,
    Replica,
    ReplicaMove,
    Topic,
)

__all__ = [
    "KeyLookup",
    "PartitionFilter",
    "TopicFilter",
    "broker_grid",
    "cluster_overview",
    "dir_moves",
    "get_cluster",
    "get_topic",
    "leader_balance",
    "lookup_key",
    "paginate",
    "partition_cells",
    "split_tree",
    "stale_sources",
    "task_states",
    "topic_spread",
    "topology_page",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
SPLIT_TREE_MAX_PARTITIONS = 256


def get_cluster(name: str | None) -> Cluster:
    """The named cluster, or the first one when no name is given; 404 when there is none."""
    qs = Cluster.objects.all()
    cluster = qs.filter(name=name).first() if name else qs.first()
    if cluster is None:
        raise Http404(f"No cluster named {name!r}." if name else "No cluster is registered.")
    return cluster


def get_topic(cluster: Cluster, name: str) -> Topic:
    topic = Topic.objects.filter(cluster=cluster, name=name).first()
    if topic is None:
        raise Http404(f"No topic {name!r} in cluster {cluster.name}.")
    return topic


def paginate(
    qs: QuerySet,
    page: int | str | None,
    page_size: int | str | None = None,
    *,
    count: int | None = None,
) -> Page:
    """A page of ``qs`` (two queries: count and slice; one with ``count``, the rows of ``qs``
    where the caller has counted them already); out-of-range pages give the last."""
    try:
        size = min(max(int(page_size or DEFAULT_PAGE_SIZE), 1), MAX_PAGE_SIZE)
    except (TypeError, ValueError):
        size = DEFAULT_PAGE_SIZE
    paginator = Paginator(qs, size)
    if count is not None:
        paginator.count = count  # a cached_property
    return paginator.get_page(page)


def stale_sources(cluster: Cluster) -> list[dict]:
    """Sources whose last sync failed, with their last good time (one query)."""
    out = []
    if cluster.controller_error:
        out.append(
            {
                "source": cluster.sync_error_label,
                "error": cluster.controller_error,
                "last_good_at": cluster.controller_last_good_at,
            }
        )
    for b in Broker.objects.filter(cluster=cluster).exclude(error="").order_by("broker_id"):
        out.append(
            {"source": f"broker {b.broker_id}", "error": b.error, "last_good_at": b.last_good_at}
        )
    return out


# -- overview ----------------------------------------------------------------------------------


def cluster_overview() -> list[dict]:
    """Per cluster: brokers up / down, offline dirs (and the oldest five by name, for the
    incident banner), partition health, topics by tiered state.

    Five queries for any number of clusters; partition numbers are the sync's aggregates.
    """
    clusters = list(Cluster.objects.all())
    brokers = {
        row["cluster_id"]: row
        for row in Broker.objects.values("cluster_id").annotate(
            online=Count("id", filter=Q(state=BrokerState.ONLINE)),
            degraded=Count("id", filter=Q(state=BrokerState.DEGRADED)),
            offline=Count("id", filter=Q(state__in=[BrokerState.OFFLINE, BrokerState.UNKNOWN])),
            stale=Count("id", filter=~Q(error="")),
        )
    }
    dirs = dict(
        LogDir.objects.filter(state=LogDirState.OFFLINE)
        .values("cluster_id")
        .annotate(n=Count("id"))
        .values_list("cluster_id", "n")
    )
    failed: dict[int, list[dict]] = defaultdict(list)
    for row in (
        LogDir.objects.filter(state=LogDirState.OFFLINE)
        .order_by("state_changed_at", "broker__broker_id", "name")
        .values("cluster_id", "broker__broker_id", "name", "path", "state_changed_at")[:50]
    ):
        failed[row["cluster_id"]].append(row)
    by_state: dict[int, dict[str, int]] = defaultdict(dict)
    for row in Topic.objects.values("cluster_id", "tiered_state").annotate(n=Count("id")):
        by_state[row["cluster_id"]][row["tiered_state"]] = row["n"]
    out = []
    for c in clusters:
        b = brokers.get(c.pk, {})
        out.append(
            {
                "cluster": c,
                "brokers_online": b.get("online", 0),
                "brokers_degraded": b.get("degraded", 0),
                "brokers_offline": b.get("offline", 0),
                "brokers_stale": b.get("stale", 0),
                "offline_log_dirs": dirs.get(c.pk, 0),
                "failed_dirs": failed.get(c.pk, [])[:5],  # the oldest failures, for the banner
                "topics_by_tiered_state": {s: by_state[c.pk].get(s, 0) for s in TieredState.ALL},
            }
        )
    return out


# -- topics ------------------------------------------------------------------------------------

TOPIC_SORTS = {
    "name": "name",
    "-name": "-name",
    "remote_bytes": "remote_bytes",
    "-remote_bytes": "-remote_bytes",
    "local_bytes": "local_bytes",
    "-local_bytes": "-local_bytes",
    "partitions": "partition_count",
    "-partitions": "-partition_count",
    "tiered_epoch": "tiered_epoch",
    "-tiered_epoch": "-tiered_epoch",
    "tiered_state": "tiered_state",
    "-tiered_state": "-tiered_state",
}


class TopicFilter(django_filters.FilterSet):
    """Filters of the topics page and ``GET /api/v1/clusters/{name}/topics``."""

    name = django_filters.CharFilter(lookup_expr="icontains", label="Name contains")
    tiered_state = django_filters.ChoiceFilter(
        choices=choices(TieredState.ALL), label="Tiered state", empty_label="any"
    )
    policy = django_filters.ChoiceFilter(
        field_name="disable_policy",
        choices=choices(DisablePolicy.ALL),
        label="Disable policy",
        empty_label="any",
    )
    has_remote_data = django_filters.ChoiceFilter(
        choices=[("true", "yes"), ("false", "no")],
        method="filter_remote",
        label="Has remote data",
        empty_label="any",
    )

    class Meta:
        model = Topic
        fields = ["name", "tiered_state", "policy", "has_remote_data"]

    def filter_remote(self, qs: QuerySet, name: str, value: str) -> QuerySet:
        has = Q(remote_bytes__gt=0) | Q(remote_segments__gt=0)
        return qs.filter(has) if value == "true" else qs.exclude(has)


def topic_list(cluster: Cluster, params, sort: str | None) -> tuple[TopicFilter, QuerySet]:
    f = TopicFilter(params, queryset=Topic.objects.filter(cluster=cluster))
    qs = f.qs if f.is_valid() else Topic.objects.none()
    order = TOPIC_SORTS.get(sort or "name", "name")
    return f, qs.order_by(order, "name").defer("configs")


def task_states(topic: Topic) -> list[dict]:
    """KIP-950's two tasks per broker: how many of the topic's replicas have the copier /
    expiration task in each state (one aggregate query)."""
    rows = (
        Replica.objects.filter(partition__topic=topic)
        .values("broker__broker_id")
        .annotate(
            replicas=Count("partition_id"),
            leaders=Count("partition_id", filter=Q(is_leader=True)),
            copier_running=Count("partition_id", filter=Q(copier_state=TaskState.RUNNING)),
            copier_stopped=Count("partition_id", filter=Q(copier_state=TaskState.STOPPED)),
            expiration_running=Count("partition_id", filter=Q(expiration_state=TaskState.RUNNING)),
            expiration_stopped=Count("partition_id", filter=Q(expiration_state=TaskState.STOPPED)),
            expiration_external=Count(
                "partition_id", filter=Q(expiration_state=TaskState.EXTERNAL)
            ),
            tiered_epoch_min=Min("tiered_epoch"),
        )
        .order_by("broker__broker_id")
    )
    return list(rows)


def store_outage(topic: Topic, tasks: list[dict]) -> list[Broker]:
    """The brokers leading partitions of a tiered ``topic`` whose calls to the remote object
    store fail (issue #13): their copiers wait and retry, local segments are kept."""
    if topic.tiered_state == TieredState.NONE:
        return []
    leaders = [r["broker__broker_id"] for r in tasks if r["leaders"]]
    return list(
        Broker.objects.filter(
            cluster_id=topic.cluster_id,
            broker_id__in=leaders,
            remote_store_unreachable_since__isnull=False,
        ).order_by("broker_id")
    )


def local_not_shrinking(topic: Topic, tasks: list[dict], outage: list[Broker]) -> list[str]:
    """The topic page's answer to "why is local not shrinking?": what holds local segments
    back, from KIP-963's metrics, the tasks per broker and the brokers :func:`store_outage`
    found (synced; no query of its own: the page shows that outage too, from the same list).

    Local segments of a tiered topic go only once copied (local.retention.* applies to copied
    segments), so copy lag and a stopped copier keep them; a disablement with retain keeps
    every local segment until the remote data is gone (KIP-950 offset continuity)."""
    if topic.tiered_state == TieredState.NONE:
        return []
    reasons = []
    if outage:
        reasons.append(
            "The remote store is unreachable from broker(s) "
            + ", ".join(str(b.broker_id) for b in outage)
            + ": nothing is copied until it answers, and local segments are kept meanwhile."
        )
    if topic.remote_copy_lag_segments:
        reasons.append(
            f"Copying is behind: {topic.remote_copy_lag_segments} closed segment(s), "
            f"{_size(topic.remote_copy_lag_bytes)}, wait to be copied; a local segment is "
            "deleted only once it is in the remote tier."
        )
    stopped = [
        r["broker__broker_id"]
        for r in tasks
        if r["copier_stopped"] and topic.tiered_state == TieredState.ENABLED
    ]
    if stopped:
        reasons.append(
            "The copier is stopped on broker(s) " + ", ".join(map(str, stopped)) + " while "
            "tiering is ENABLED (the broker has not applied the tiering state yet)."
        )
    if (
        topic.tiered_state in (TieredState.DISABLED, TieredState.DISABLING)
        and topic.disable_policy == DisablePolicy.RETAIN
        and topic.remote_bytes
    ):
        reasons.append(
            "Tiering is disabled with retain: local segments are kept until the remote data is "
            "gone, so offsets stay continuous (KIP-950)."
        )
    configs = topic.configs or {}
    local_bytes = configs.get(TopicConfig.LOCAL_RETENTION_BYTES, "-2")
    local_ms = configs.get(TopicConfig.LOCAL_RETENTION_MS, "-2")
    reasons.append(
        f"Local retention: local.retention.bytes = {local_bytes}, local.retention.ms = "
        f"{local_ms} per partition (-2: the topic's retention.bytes / retention.ms)."
    )
    return reasons


def _size(n: int) -> str:
    return str(filesizeformat(n))


#: Kafka's ``leader.imbalance.per.broker.percentage`` default: a broker whose preferred partitions
#: are led by another broker for more than this share is imbalanced (the controller's trigger for
#: an automatic preferred leader election).
LEADER_IMBALANCE_PERCENT = 10
#: A broker leading more than this many times its fair share (led partitions / brokers) is skewed.
LEADER_SKEW_RATIO = 1.5
#: A partition holding more than this many times the average is called out as hot.
HOT_PARTITION_RATIO = 2.0


@dataclasses.dataclass(frozen=True)
class BrokerLeaders:
    broker_id: int
    leaders: int
    """Partitions of the topic this broker leads now (controller metadata)."""
    preferred: int
    """Partitions whose preferred leader (first replica) is this broker."""
    preferred_led_elsewhere: int
    skewed: bool
    imbalanced: bool

    @property
    def imbalance_percent(self) -> float:
        return 100.0 * self.preferred_led_elsewhere / self.preferred if self.preferred else 0.0


@dataclasses.dataclass(frozen=True)
class LeaderBalance:
    """How the topic's leadership is spread: per broker, and whether it needs attention."""

    brokers: list[BrokerLeaders]
    led: int
    fair_share: float

    @property
    def skewed(self) -> list[BrokerLeaders]:
        return [b for b in self.brokers if b.skewed]

    @property
    def imbalanced(self) -> list[BrokerLeaders]:
        return [b for b in self.brokers if b.imbalanced]


def leader_balance(topic: Topic, brokers: list[int]) -> LeaderBalance:
    """Leader skew of one topic over ``brokers`` (those hosting its replicas), two queries.

    Two signals, as an SRE reads them after an expansion or a broker restart:

    - **skew**: a broker leads more than :data:`LEADER_SKEW_RATIO` times its fair share (partitions
      with a leader / brokers) and at least two more than that share, so one extra leader of a
      small topic is not an alarm;
    - **imbalance**, Kafka's own measure: the share of the partitions preferring a broker (it is
      their first replica) that another broker leads, above
      :data:`LEADER_IMBALANCE_PERCENT` % — what a preferred leader election
      (``kafka-leader-election.sh --election-type PREFERRED``) puts right.
    """
    parts = Partition.objects.filter(topic=topic)
    leaders = dict(
        parts.filter(leader__gte=0).values_list("leader").annotate(n=Count("id")).order_by()
    )
    preferred: dict[int, tuple[int, int]] = {
        row["pref"]: (row["n"], row["elsewhere"])
        for row in parts.exclude(replicas=[])
        .annotate(pref=F("replicas__0"))
        .values("pref")
        .annotate(
            n=Count("id"),
            elsewhere=Count("id", filter=Q(leader__gte=0) & ~Q(leader=F("replicas__0"))),
        )
        .order_by()
    }
    ids = sorted(set(brokers) | set(leaders) | set(preferred))
    led = sum(leaders.values())
    fair = led / len(ids) if ids else 0.0
    rows = []
    for b in ids:
        n = leaders.get(b, 0)
        pref, elsewhere = preferred.get(b, (0, 0))
        rows.append(
            BrokerLeaders(
                broker_id=b,
                leaders=n,
                preferred=pref,
                preferred_led_elsewhere=elsewhere,
                skewed=n > LEADER_SKEW_RATIO * fair and n - fair >= 2,
                imbalanced=bool(pref) and 100 * elsewhere > LEADER_IMBALANCE_PERCENT * pref,
            )
        )
    return LeaderBalance(brokers=rows, led=led, fair_share=fair)


def broker_task_rows(
    leaders: LeaderBalance, tasks: list[dict]
) -> list[tuple[BrokerLeaders, dict | None]]:
    """The topic page's per-broker rows: each broker's leaders with its :func:`task_states` row
    (None: no snapshot from it), brokers needing a look first — leader skew, not on preferred
    leaders, no snapshot, a copier stopped while the topic is tiered elsewhere — then by id. At
    300 brokers the table is paged (:data:`BROKERS_PER_PAGE`), and the first page is where an
    SRE looks (#17)."""
    by_broker = {r["broker__broker_id"]: r for r in tasks}
    running = any(r["copier_running"] for r in tasks)

    def needs_a_look(b: BrokerLeaders) -> bool:
        r = by_broker.get(b.broker_id)
        return b.skewed or b.imbalanced or r is None or bool(running and r["copier_stopped"])

    rows = [(b, by_broker.get(b.broker_id)) for b in leaders.brokers]
    return sorted(rows, key=lambda row: (not needs_a_look(row[0]), row[0].broker_id))


@dataclasses.dataclass(frozen=True)
class Spread:
    """min / average / max of one measure over the topic's partitions, and where the max is."""

    label: str
    unit: str
    low: int
    average: float
    high: int
    high_partition: int | None

    @property
    def average_rounded(self) -> int:
        return round(self.average)

    @property
    def hot(self) -> bool:
        return self.high > HOT_PARTITION_RATIO * self.average > 0


#: The measures of :func:`topic_spread`: label, unit, SQL over a partition's row.
_SPREAD_MEASURES = (
    ("Records retained", "records", "log_end_offset - log_start_offset"),
    ("Local bytes", "bytes", "local_bytes"),
    ("Remote bytes", "bytes", "remote_bytes"),
)
#: The remote measure, left out where the cluster cannot report remote bytes.
_SPREAD_REMOTE = "Remote bytes"
_SPREAD_SQL = """
SELECT {aggregates} FROM (
    SELECT partition, {values}, {maxima} FROM console_partition WHERE topic_id = %s
) p
""".format(  # noqa: S608 - the measures are this module's constants
    values=", ".join(f"{sql} AS v{i}" for i, (_l, _u, sql) in enumerate(_SPREAD_MEASURES)),
    maxima=", ".join(
        f"max({sql}) OVER () AS m{i}" for i, (_l, _u, sql) in enumerate(_SPREAD_MEASURES)
    ),
    aggregates=", ".join(
        f"min(v{i}), avg(v{i}), max(v{i}), min(partition) FILTER (WHERE v{i} = m{i})"
        for i in range(len(_SPREAD_MEASURES))
    ),
)


def topic_spread(topic: Topic, *, remote: bool = True) -> list[Spread]:
    """How evenly the topic's data is spread over its partitions (records retained, local and
    remote bytes): a hot partition is keyed traffic concentrated on few keys, or a partition
    whose copier or retention is stuck. One pass over the topic's partitions, whatever their
    count: min / average / max of each measure, and the lowest partition holding each max
    (at fleet size one scan, 11 ms, instead of an aggregate and a sort per measure, ~20 ms,
    #17). ``remote=False`` leaves remote bytes out (a kafka cluster: RemoteLogSizeBytes is
    JMX only, the stored 0 is not a measure)."""
    with connection.cursor() as cur:
        cur.execute(_SPREAD_SQL, [topic.pk])
        row = cur.fetchone()
    if row is None or row[2] is None:
        return []
    return [
        Spread(
            label=label,
            unit=unit,
            low=int(row[4 * i]),
            average=float(row[4 * i + 1]),
            high=int(row[4 * i + 2]),
            high_partition=row[4 * i + 3] if row[4 * i + 2] > 0 else None,
        )
        for i, (label, unit, _sql) in enumerate(_SPREAD_MEASURES)
        if remote or label != _SPREAD_REMOTE
    ]


# -- KIP-253 -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KeyLookup:
    key: str
    hash: int
    initial_partition_count: int
    undeleted_partition_count: int
    partition: int
    previous_undeleted_partition_count: int | None
    previous_partition: int | None


def lookup_key(topic: Topic, key: str) -> KeyLookup:
    """KIP-253 linear hashing of ``key`` now and before the last expansion / shrink.

    h = toPositive(murmur2(key)), as Kafka's default partitioner; see broker_agent.contract.hashing.
    """
    h = to_positive(murmur2(key.encode()))
    n, u = topic.initial_partition_count, topic.undeleted_partition_count
    prev = topic.previous_undeleted_partition_count
    return KeyLookup(
        key=key,
        hash=h,
        initial_partition_count=n,
        undeleted_partition_count=u,
        partition=partition_for_hash(h, n, u),
        previous_undeleted_partition_count=prev,
        previous_partition=partition_for_hash(h, n, prev) if prev else None,
    )


def split_tree(topic: Topic, partitions: dict[int, Partition]) -> list[dict] | None:
    """KIP-253's split tree: roots 0..N-1; partition q >= N splits exactly one parent
    q - N*2^floor(log2(q/N)). Includes partitions marked for deletion (>= U) while they exist.
    None when the topic is too large to draw."""
    n = topic.initial_partition_count
    u = topic.undeleted_partition_count
    top = max([u, *[p + 1 for p in partitions]])
    if top > SPLIT_TREE_MAX_PARTITIONS or n <= 0:
        return None
    prev = topic.previous_undeleted_partition_count
    expanded = range(prev, u) if prev is not None and prev < u else range(0)

    def node(p: int) -> dict:
        children = [q for q in partitions_split_from(p, n, top) if q != p]
        row = partitions.get(p)
        parent = parent_partition(p, n) if p >= n else None
        marked = bool(row and row.marked_for_deletion)
        after_creation = (row.leader_epoch_after_creation or {}) if row else {}
        # KIP-253 step 4.2: a consumer reads p only after the first of its ancestors that
        # existed before p's expansion (its parent, unless that is new too) up to the end of
        # the leader epoch leaderEpochAfterCreation records for it
        barrier = creation_barrier(p, n, after_creation)
        return {
            "partition": p,
            "row": row,
            "children": [node(c) for c in children],
            "initial": p < n,
            "marked": marked,
            "new": p in expanded and not marked,
            "parent": parent,
            "barrier": barrier,
            "split_epoch": after_creation.get(str(barrier)) if barrier is not None else None,
            # a marked partition's keys go to its first ancestor below U (step 5.1)
            "keys_to": deletion_target(p, n, u) if marked else None,
        }

    return [node(p) for p in range(n)]


# -- brokers & disks ---------------------------------------------------------------------------


#: Brokers per page of the Brokers & disks grid (#17: a 300-broker fleet is 1,200 dir cells with
#: two charts each, re-rendered by every refresh: 1.3 s a page; 50 brokers 260 ms, 25 110 ms).
BROKERS_PER_PAGE = 25

#: At most this many offline dirs are loaded to pick the incident shown when none is asked for.
OFFLINE_DIRS_SHOWN = 50


def broker_grid(
    cluster: Cluster, page: int | str | None = None, *, problems: bool = False, paged: bool = False
) -> dict:
    """Brokers x log dirs: rows of brokers, columns of dir names. Each dir gets ``slow_probe``:
    its last probe was slow next to its broker's other dirs
    (:func:`broker_agent.contract.probes.slow_probe`) while it is still ONLINE.

    ``paged`` (the page): :data:`BROKERS_PER_PAGE` brokers of page ``page``, only those not
    ONLINE or whose agent did not answer with ``problems``, and the first
    :data:`OFFLINE_DIRS_SHOWN` offline dirs of the whole cluster (five queries). Otherwise (the
    API) every broker and dir (two queries)."""
    qs = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    if problems:
        qs = qs.filter(~Q(state=BrokerState.ONLINE) | ~Q(error=""))
    pg = paginate(qs, page, BROKERS_PER_PAGE) if paged else None
    brokers = list(pg.object_list) if pg is not None else list(qs)
    dirs = LogDir.objects.order_by("broker_id", "name")
    if pg is not None:
        dirs = list(dirs.filter(broker_id__in=[b.pk for b in brokers]))
        offline = list(
            LogDir.objects.filter(cluster=cluster, state=LogDirState.OFFLINE)
            .select_related("broker")
            .order_by("broker__broker_id", "name")[:OFFLINE_DIRS_SHOWN]
        )
    else:
        dirs = list(dirs.filter(cluster=cluster))
        offline = [d for d in dirs if d.state == LogDirState.OFFLINE]
    names = sorted({d.name for d in dirs})
    by_broker: dict[int, dict[str, LogDir]] = defaultdict(dict)
    for d in dirs:
        by_broker[d.broker_id][d.name] = d
    for own in by_broker.values():  # a slow probe of a dir still ONLINE (the agent's rule)
        for d in own.values():
            peers = [p.probe_latency_ms for p in own.values() if p is not d and p.probe_latency_ms]
            d.slow_probe = d.state == LogDirState.ONLINE and slow_probe(d.probe_latency_ms, peers)
    rows = [{"broker": b, "cells": [by_broker[b.pk].get(n) for n in names]} for b in brokers]
    return {
        "dir_names": names,
        "rows": rows,
        "offline_dirs": offline,
        "brokers": brokers,
        "log_dirs": by_broker,
        "page": pg,
        "problems": problems,
    }


# -- topology ----------------------------------------------------------------------------------


class PartitionFilter(django_filters.FilterSet):
    topic = django_filters.CharFilter(field_name="topic_name", lookup_expr="icontains")
    offline_only = django_filters.BooleanFilter(method="filter_offline", label="Offline only")
    under_replicated_only = django_filters.BooleanFilter(
        field_name="under_replicated", method="filter_urp", label="Under-replicated only"
    )

    class Meta:
        model = Partition
        fields = ["topic", "offline_only", "under_replicated_only"]

    def filter_offline(self, qs: QuerySet, name: str, value: bool) -> QuerySet:
        return qs.filter(Q(has_offline_replicas=True) | Q(offline=True)) if value else qs

    def filter_urp(self, qs: QuerySet, name: str, value: bool) -> QuerySet:
        return qs.filter(under_replicated=True) if value else qs


def partition_cells(p: Partition, broker_ids: list[int]) -> list[str]:
    """One :class:`ReplicaCell` per broker column, from the partition's own arrays."""
    out = []
    offline, isr, replicas = set(p.offline_replicas), set(p.isr), set(p.replicas)
    for b in broker_ids:
        if b not in replicas:
            out.append(ReplicaCell.NONE)
        elif b in offline:
            out.append(ReplicaCell.OFFLINE)
        elif b == p.leader:
            out.append(ReplicaCell.LEADER)
        elif b in isr:
            out.append(ReplicaCell.IN_SYNC)
        else:
            out.append(ReplicaCell.OUT_OF_SYNC)
    return out


TOPOLOGY_ALL_COLUMNS_MAX = 24


def topology_columns(broker_ids: list[int], partitions: Iterable[Partition]) -> list[int]:
    """The broker columns of a topology page: every broker of a cluster of at most
    :data:`TOPOLOGY_ALL_COLUMNS_MAX` brokers (the whole cluster at a glance, the same columns on
    every page); in a larger one only the brokers holding a replica of the page's partitions, in
    broker order — at 300 brokers a page of 50 partitions with RF 3 needs at most 150 columns,
    and 15,000 mostly empty cells helped nobody (#17)."""
    if len(broker_ids) <= TOPOLOGY_ALL_COLUMNS_MAX:
        return broker_ids
    used = {b for p in partitions for b in p.replicas}
    return [b for b in broker_ids if b in used]


def topology_page(
    cluster: Cluster, f: PartitionFilter, qs: QuerySet, page: int | str | None, per_page: int
) -> Page:
    """A page of the topology matrix (``qs``, ordered by topic name and partition) that stays
    fast however deep it is: three queries, none with an OFFSET past one topic.

    Without the offline / under-replicated filters, the page's first row is found from the
    topics' partition counts (maintained by the sync): their sum gives the page count, and a
    running sum over the topics in name order, in PostgreSQL, names the topic page N starts in
    and how far into it (37,636 topics at 1,000,000 partitions never come to Python); the page
    is then read from that topic on (a keyset on ``topic_name``) with an offset of at most one
    topic's partitions. A page past the end shows the last one. The problem filters select few
    partitions (their own partial index) and page with a plain count.
    """
    data = f.form.cleaned_data if f.is_valid() else {}
    if data.get("offline_only") or data.get("under_replicated_only") or not f.is_valid():
        return paginate(qs, page, per_page)
    topics = Topic.objects.filter(cluster=cluster)
    if data.get("topic"):
        topics = topics.filter(name__icontains=data["topic"])
    try:
        number = max(int(page or 1), 1)
    except (TypeError, ValueError):
        number = 1
    paginator = Paginator([], per_page)
    # a cached_property, set instead of COUNT(*) over the partitions
    paginator.count = topics.aggregate(n=Sum("partition_count"))["n"] or 0
    number = min(number, paginator.num_pages)  # past the end: the last page
    rows = []
    start = _topology_start(topics, (number - 1) * per_page) if paginator.count else None
    if start is not None:
        name, skip = start
        rows = list(qs.filter(topic_name__gte=name)[skip : skip + per_page])
    return Page(rows, number, paginator)


def _topology_start(topics: QuerySet, skip: int) -> tuple[str, int] | None:
    """``(the topic holding row skip of the topics' partitions in name order, rows of it
    before)``; None when there is no such row (a sync removed partitions since they were
    counted).

    The running sum is framed by rows (``ROWS UNBOUNDED PRECEDING``: names are unique, so it
    equals the default frame's) and nothing else is windowed, so PostgreSQL reads the topics in
    name order from the unique index and stops at the first one past ``skip``: 2 ms for page
    2,000 of 1,000,000 partitions and ~45 ms for the last, where a second window for the total
    made it sort every topic first (105 ms for any page, #17)."""
    upto = Window(
        Sum("partition_count"), order_by=F("name").asc(), frame=RowRange(start=None, end=0)
    )
    # Exactly one topic holds the row, so no ORDER BY is needed (one on the outer query made
    # PostgreSQL sort every topic before the window, 64 ms).
    found = (
        topics.order_by()
        .annotate(upto=upto)
        .filter(upto__gt=skip, upto__lte=skip + F("partition_count"))
        .values_list("name", "partition_count", "upto")[:1]
    )
    for name, n, total in found:
        return name, skip - (total - n)
    return None


#: The most replica moves a page lists (there are few: each is an operator's AlterReplicaLogDirs).
DIR_MOVES_SHOWN = 50


def dir_moves(cluster: Cluster, topic: Topic | None = None) -> dict:
    """The replicas being moved between two dirs of their broker (KIP-113), of ``topic`` or of
    the whole cluster, as the brokers last reported them: ``rows`` (at most
    :data:`DIR_MOVES_SHOWN`) and ``more`` (whether there are others). One query."""
    qs = ReplicaMove.objects.filter(cluster=cluster)
    if topic is not None:
        qs = qs.filter(topic_name=topic.name)
    rows = list(qs[: DIR_MOVES_SHOWN + 1])
    return {"rows": rows[:DIR_MOVES_SHOWN], "more": len(rows) > DIR_MOVES_SHOWN}


def synced_at(cluster: Cluster) -> datetime | None:
    return cluster.synced_at
