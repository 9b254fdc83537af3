"""Console pages (read side): overview, a cluster, topics, topic detail, brokers & disks,
topology.

Each page is one template with its live panel in a partial; an htmx request whose target is
that panel gets the partial alone (the panel polls itself every few seconds). Every query here
is bounded whatever the cluster size (see :mod:`console.selectors`).
"""

from __future__ import annotations

import datetime as dt
import logging
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from accounts.roles import Role, has_role, require_role
from audit import targets
from audit.models import AuditEvent
from console import capabilities, charts, health, incidents, ordering, selectors
from console.choices import LogDirState, TieredState
from console.models import Broker, Cluster, Heartbeat, LogDir, Partition, Topic

log = logging.getLogger(__name__)

BEAT_FRESH = dt.timedelta(minutes=2)
LIVE_SECONDS = 5
PARTITIONS_PER_PAGE = 50
TOPOLOGY_PER_PAGE = 50
#: The key lookup takes keys up to this long; the input stops typing there and the view says so
#: for a longer one. The lookup is a GET (a result worth a link), so the key travels in the
#: request line, which gunicorn takes up to 4,094 bytes: percent-encoded, a character costs at
#: most 9 bytes (3 UTF-8 bytes as %XX; maxlength counts UTF-16 units, and a 4-byte character is
#: 2 of them), so 400 fit beside the longest cluster and topic names. (At 1,024, a key in
#: Chinese met gunicorn's "Request Line is too large" and htmx kept the previous result.)
MAX_KEY_CHARS = 400


def _system_status_context() -> dict:
    beat = Heartbeat.objects.filter(name="beat").first()
    return {
        "health": health.check(),
        "worker_max_age": health.worker_max_age(),
        "checked_at": timezone.now(),
        "beat": beat,
        "beat_fresh": beat is not None and timezone.now() - beat.beat_at < BEAT_FRESH,
    }


def _render(
    request: HttpRequest, template: str, context: dict, partials: dict[str, str]
) -> HttpResponse:
    """The page, or only the partial its htmx target names."""
    context.setdefault("live_seconds", LIVE_SECONDS)
    target = request.htmx.target if getattr(request, "htmx", None) else None
    if target in partials:
        return render(request, partials[target], context)
    return render(request, template, context)


def _cluster_context(request: HttpRequest) -> dict:
    """The selected cluster (``?cluster=``, default the first) and the picker's choices."""
    clusters = list(Cluster.objects.all())
    name = request.GET.get("cluster")
    cluster = next((c for c in clusters if c.name == name), None) if name else None
    if cluster is None and not name and clusters:
        cluster = clusters[0]
    return {"clusters": clusters, "cluster": cluster, "cluster_name": name}


def _workflow_url(kind: str, **params: object) -> str:
    """Link to the workflow request form (built by the workflows app)."""
    return "/workflows/new?" + urlencode({"kind": kind, **params})


def _action(c: Cluster, label: str, kind: str, **params: object) -> tuple[str, str, str]:
    """A request button: (label, link, why not). A kind the cluster cannot run keeps its label
    and gives the reason instead of a link (:func:`console.capabilities.kind_unsupported`)."""
    missing = capabilities.kind_unsupported(c, kind)
    if missing is not None:
        return label.rstrip("…"), "", f"{missing.label}: {missing.reason}"
    return label, _workflow_url(kind, cluster=c.name, **params), ""


# -- overview ----------------------------------------------------------------------------------


def _recent_audit_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.order_by("-seq")[:8])


@require_role(Role.VIEWER)
def overview(request: HttpRequest) -> HttpResponse:
    context = {"overview": selectors.cluster_overview(), "now": timezone.now()}
    context["audit_events"] = _recent_audit_events()
    return _render(
        request,
        "console/overview.html",
        context,
        {"clusters-live": "console/partials/overview_clusters.html"},
    )


@require_role(Role.VIEWER)
def cluster_detail(request: HttpRequest, cluster: str) -> HttpResponse:
    """A cluster's registration (backend; bootstrap servers and client settings, or controller),
    its last sync and the error of its source, and its capabilities with the reason for each it
    lacks. Never raises before a first sync: every figure here is the row's own."""
    c = selectors.get_cluster(cluster)
    context = {
        "cluster": c,
        "capabilities": capabilities.capabilities(c),
        "kafka_kinds": capabilities.KAFKA_KINDS if c.is_kafka else (),
        "last_sync": c.sync_runs.first(),
        "now": timezone.now(),
    }
    return render(request, "console/cluster_detail.html", context)


def system_status(request: HttpRequest) -> HttpResponse:
    return render(request, "console/partials/system_status.html", _system_status_context())


# -- topics ------------------------------------------------------------------------------------


@require_role(Role.VIEWER)
def topics(request: HttpRequest) -> HttpResponse:
    context = _cluster_context(request)
    cluster = context["cluster"]
    if cluster is not None:
        sort = request.GET.get("sort") or "name"
        form, qs = selectors.topic_list(cluster, request.GET, sort)
        context.update(
            form=form,
            sort=sort,
            page=selectors.paginate(qs, request.GET.get("page"), request.GET.get("page_size")),
            stale=selectors.stale_sources(cluster),
            caps=capabilities.by_key(cluster),
            sorts=[
                ("name", "Name"),
                ("tiered_state", "Tiered state"),
                ("tiered_epoch", "Epoch"),
                ("partitions", "Partitions"),
                ("remote_bytes", "Remote bytes"),
                ("local_bytes", "Local bytes"),
            ],
        )
    return _render(
        request,
        "console/topics.html",
        context,
        {"topics-live": "console/partials/topics_table.html"},
    )


@require_role(Role.VIEWER)
def topic_detail(request: HttpRequest, cluster: str, topic: str) -> HttpResponse:
    c = selectors.get_cluster(cluster)
    t = selectors.get_topic(c, topic)
    parts_qs = Partition.objects.filter(topic=t).order_by("partition")
    page = selectors.paginate(parts_qs, request.GET.get("page"), PARTITIONS_PER_PAGE)
    caps = capabilities.by_key(c)
    # Without KIP-253 (Kafka) the split tree, the ordering barrier and the linear-hashing key
    # lookup would describe partitions the cluster does not have: none is computed or shown.
    kip253 = caps[capabilities.LINEAR_HASHING].supported
    remote = caps[capabilities.PROBE_LATENCY].supported
    tree = None
    if kip253 and (
        max(t.partition_count, t.undeleted_partition_count) <= selectors.SPLIT_TREE_MAX_PARTITIONS
    ):
        rows = {
            p.partition: p
            for p in parts_qs.only(
                "partition",
                "marked_for_deletion",
                "marked_log_start_offset",
                "log_start_offset",
                "log_end_offset",
                "leader",
                "leader_epoch_after_creation",
            )
        }
        tree = selectors.split_tree(t, rows)
    marked = (
        list(parts_qs.filter(marked_for_deletion=True)[:50]) if kip253 and tree is None else None
    )
    delivery = ordering.topic_ordering(t) if kip253 else None
    if tree is not None:
        ordering.annotate_tree(tree, delivery)
    key = request.GET.get("key") if kip253 else None
    can_request = has_role(request.user, Role.OPERATOR)
    tasks = selectors.task_states(t)
    leaders = selectors.leader_balance(t, [r["broker__broker_id"] for r in tasks])
    outage = selectors.store_outage(t, tasks)
    context = {
        "cluster": c,
        "topic": t,
        "page": page,
        "tree": tree,
        "marked": marked,
        "tasks": tasks,
        "leaders": leaders,
        "broker_rows": selectors.paginate(
            selectors.broker_task_rows(leaders, tasks),
            request.GET.get("bpage"),
            selectors.BROKERS_PER_PAGE,
        ),
        "spread": selectors.topic_spread(t, remote=remote),
        "local_reasons": selectors.local_not_shrinking(t, tasks, outage),
        "store_outage": outage,
        "ordering": delivery,
        "stale": selectors.stale_sources(c),
        "lookup": selectors.lookup_key(t, key)
        if key is not None and len(key) <= MAX_KEY_CHARS
        else None,
        "key_error": (
            f"A key of at most {MAX_KEY_CHARS:,} characters, please (this one has {len(key):,})."
            if key and len(key) > MAX_KEY_CHARS
            else ""
        ),
        "key": (key or "")[:MAX_KEY_CHARS],
        "max_key": MAX_KEY_CHARS,
        "can_request": can_request,
        "caps": caps,
        "moves": selectors.dir_moves(c, t),
        "tasks_not_available": capabilities.task_states_not_available(c),
        "actions": _topic_actions(c, t) if can_request else [],
        "history": charts.topic_charts(t, request.GET.get("range"), remote=remote),
        "history_links": targets.history_links(targets.Target(targets.TOPIC, c.name, t.name)),
    }
    return _render(
        request,
        "console/topic_detail.html",
        context,
        {
            "topic-live": "console/partials/topic_live.html",
            "key-lookup": "console/partials/key_lookup.html",
        },
    )


def _topic_actions(c: Cluster, t: Topic) -> list[tuple[str, str, str]]:
    actions = []
    if t.tiered_state == TieredState.ENABLED:
        actions.append(_action(c, "Disable tiering…", "disable_tiering", topic=t.name))
    if t.tiered_state == TieredState.DISABLED:
        actions.append(_action(c, "Re-enable tiering…", "enable_tiering", topic=t.name))
    # KIP-253: ``partitions`` is the new undeleted_partition_count, one more / one fewer.
    u = t.undeleted_partition_count
    actions.append(
        _action(c, "Expand partitions…", "expand_partitions", topic=t.name, partitions=u + 1)
    )
    if u > 1:
        actions.append(
            _action(c, "Shrink partitions…", "shrink_partitions", topic=t.name, partitions=u - 1)
        )
    actions.append(_action(c, "Elect preferred leaders…", "elect_leaders", topic=t.name))
    return actions


# -- brokers & disks ---------------------------------------------------------------------------


@require_role(Role.VIEWER)
def brokers(request: HttpRequest) -> HttpResponse:
    context = _cluster_context(request)
    cluster = context["cluster"]
    if cluster is not None:
        grid = selectors.broker_grid(
            cluster,
            request.GET.get("bpage"),
            problems=request.GET.get("problems") == "1",
            paged=True,
        )
        context.update(
            grid=grid,
            stale=selectors.stale_sources(cluster),
            caps=capabilities.by_key(cluster),
            moves=selectors.dir_moves(cluster),
        )
        selected = _selected_dir(request, cluster, grid)
        context["incident"] = (
            incidents.incident(selected, request.GET.get("page"))
            if (selected is not None)
            else None
        )
        dirs = [d for row in grid["rows"] for d in row["cells"] if d is not None]
        context["sparks"] = charts.dir_sparks(dirs)
        if selected is not None:
            context["dir_history"] = charts.dir_charts(selected, request.GET.get("range"))
            broker_id = selected.broker.broker_id
            context["incident_links"] = {
                "dir": targets.history_links(
                    targets.Target(targets.LOG_DIR, cluster.name, f"{broker_id}:{selected.name}")
                ),
                "broker": targets.history_links(
                    targets.Target(targets.BROKER, cluster.name, str(broker_id))
                ),
            }
        context["can_request"] = has_role(request.user, Role.OPERATOR)
        if selected is not None and context["can_request"]:
            params = {"broker": selected.broker.broker_id, "log_dir": selected.name}
            context["incident_actions"] = [
                _action(
                    cluster,
                    "Recover log dir (replace disk)…",
                    "recover_log_dir",
                    **params,
                    mode="replace",
                ),
            ]
            if not cluster.is_kafka:  # Kafka's log.dirs is static: removing a dir is by hand
                context["incident_actions"].append(
                    _action(
                        cluster,
                        "Remove log dir from config…",
                        "recover_log_dir",
                        **params,
                        mode="remove",
                    )
                )
    return _render(
        request,
        "console/brokers.html",
        context,
        {
            "brokers-live": "console/partials/brokers_live.html",
        },
    )


def _selected_dir(request: HttpRequest, cluster: Cluster, grid: dict) -> LogDir | None:
    """``?dir=<broker>:<name>`` (on the grid's page, else looked up: a link or a bookmark may
    name a broker of another page), else the first offline dir (the incident to look at)."""
    wanted = request.GET.get("dir", "")
    by_id = {b.pk: b for b in grid["brokers"]}
    candidates = [d for row in grid["log_dirs"].values() for d in row.values()]
    for d in candidates:
        d.broker = by_id[d.broker_id]
    if wanted:
        broker_id, _, name = wanted.partition(":")
        for d in candidates:
            if str(d.broker.broker_id) == broker_id and d.name == name:
                return d
        if broker_id.isdigit():
            found = (
                LogDir.objects.select_related("broker")
                .filter(cluster=cluster, broker__broker_id=int(broker_id), name=name)
                .first()
            )
            if found is not None:
                return found
    offline = grid["offline_dirs"]
    return offline[0] if offline else None


# -- topology ----------------------------------------------------------------------------------


@require_role(Role.VIEWER)
def topology(request: HttpRequest) -> HttpResponse:
    context = _cluster_context(request)
    cluster = context["cluster"]
    if cluster is not None:
        broker_ids = list(
            Broker.objects.filter(cluster=cluster)
            .order_by("broker_id")
            .values_list("broker_id", flat=True)
        )
        f = selectors.PartitionFilter(
            request.GET, queryset=Partition.objects.filter(cluster=cluster)
        )
        qs = f.qs if f.is_valid() else Partition.objects.none()
        qs = qs.order_by("topic_name", "partition").only(
            "topic_name",
            "partition",
            "leader",
            "replicas",
            "isr",
            "offline_replicas",
            "under_replicated",
            "under_min_isr",
            "offline",
            "marked_for_deletion",
        )
        page = selectors.topology_page(cluster, f, qs, request.GET.get("page"), TOPOLOGY_PER_PAGE)
        columns = selectors.topology_columns(broker_ids, page.object_list)
        rows = [
            (p, list(zip(columns, selectors.partition_cells(p, columns), strict=True)))
            for p in page.object_list
        ]
        context.update(
            form=f,
            page=page,
            rows=rows,
            broker_ids=columns,
            cluster_broker_count=len(broker_ids),
            stale=selectors.stale_sources(cluster),
            dir_offline=LogDirState.OFFLINE,
        )
    return _render(
        request,
        "console/topology.html",
        context,
        {"topology-live": "console/partials/topology_matrix.html"},
    )


# -- machine endpoints -------------------------------------------------------------------------


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition. The access gate (:mod:`config.middleware`) lets only a signed-in
    user with a role, or ``Authorization: Bearer`` with an API token of one, reach it; others get
    a JSON 401 / 403. ``?topics=all``: a per-topic series for every tiered topic."""
    from prometheus_client import CONTENT_TYPE_LATEST

    from console import metrics as prom

    body = prom.render(all_topics=request.GET.get("topics") == "all")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
