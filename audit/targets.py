"""What an audit event is about: one written form per kind of target, how the filter reads a
target as a user types or links it, and where a target's page is.

Forms: ``topic:<cluster>/<topic>``, ``broker:<cluster>/<id>``, ``log_dir:<cluster>/<id>:<dir>``,
``cluster:<cluster>``, ``workflow:<id>``, ``spark_run:<id>``. Topics, brokers and dirs carry
their cluster since names repeat across clusters; cluster names are slugs and topic names hold
no ``/``, so the first ``/`` ends the cluster. Older events from workflow steps name them
without a cluster; the chain hashes them as written, so the filter finds their cluster through
their workflow.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict
from urllib.parse import urlencode

from django.db.models import Q
from django.urls import NoReverseMatch, reverse

__all__ = [
    "CLUSTER_SCOPED",
    "Target",
    "TargetKeys",
    "broker",
    "cluster_events",
    "history_links",
    "log_dir",
    "matching",
    "parse",
    "parse_text",
    "target_url",
    "topic",
]

TOPIC, BROKER, LOG_DIR, CLUSTER, WORKFLOW, SPARK_RUN = (
    "topic",
    "broker",
    "log_dir",
    "cluster",
    "workflow",
    "spark_run",
)
#: Target types whose id starts with ``<cluster>/``.
CLUSTER_SCOPED = (TOPIC, BROKER, LOG_DIR)


# --- writing --------------------------------------------------------------------------------


class TargetKeys(TypedDict):
    """The target keywords of an audit record (``record(..., **targets.topic(c, t))``)."""

    target_type: str
    target_id: str


def topic(cluster: str, name: str) -> TargetKeys:
    """``record(..., **targets.topic(cluster, name))``."""
    return {"target_type": TOPIC, "target_id": f"{cluster}/{name}"}


def broker(cluster: str, broker_id: int | str) -> TargetKeys:
    return {"target_type": BROKER, "target_id": f"{cluster}/{broker_id}"}


def log_dir(cluster: str, broker_id: int | str, name: str) -> TargetKeys:
    return {"target_type": LOG_DIR, "target_id": f"{cluster}/{broker_id}:{name}"}


# --- reading --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """A target as read: ``type``, ``cluster`` (empty when not said) and ``name`` (the id
    without the cluster: a topic's name, a broker id, ``<broker id>:<dir>``, a workflow id)."""

    type: str
    cluster: str
    name: str

    @property
    def broker_id(self) -> str:
        return self.name.partition(":")[0] if self.type in (BROKER, LOG_DIR) else ""

    @property
    def dir_name(self) -> str:
        return self.name.partition(":")[2] if self.type == LOG_DIR else ""

    @property
    def label(self) -> str:
        """The written form (``topic:local/demo.orders``): what the filter takes and shows."""
        if self.type in CLUSTER_SCOPED and self.cluster:
            return f"{self.type}:{self.cluster}/{self.name}"
        return f"{self.type}:{self.name}" if self.type else self.name

    @property
    def workflow_target(self) -> str:
        """The ``Workflow.target`` of workflows that change it ('' when no kind holds it): a
        topic's own; a broker's (a dir's recovery holds its whole broker)."""
        if self.type == TOPIC:
            return f"topic:{self.name}"
        if self.type in (BROKER, LOG_DIR):
            return f"broker:{self.broker_id}"
        return ""


def parse(target_type: str, target_id: str, cluster: str = "") -> Target:
    """An event's target (``cluster`` fills in an old form's missing one, e.g. its workflow's)."""
    if target_type in CLUSTER_SCOPED:
        head, sep, rest = target_id.partition("/")
        if sep and (target_type != LOG_DIR or ":" not in head):
            return Target(target_type, head, rest)
    return Target(target_type, cluster if target_type in CLUSTER_SCOPED else "", target_id)


def parse_text(text: str, cluster: str = "") -> Target:
    """A target typed or linked: ``topic:local/demo.orders``, ``topic:demo.orders`` (with
    ``cluster``, or in any cluster), ``broker:local/2``, ``log_dir:local/2:d1``,
    ``workflow:12``; with no ``type:``, an id (``12``)."""
    ttype, sep, tid = text.strip().partition(":")
    if not sep:
        return Target("", "", text.strip())
    target = parse(ttype, tid)
    if cluster and not target.cluster and ttype in CLUSTER_SCOPED:
        target = Target(ttype, cluster, target.name)
    return target


def matching(target: Target) -> Q:
    """Events about ``target``: its own events in the written form and in the old one (no
    cluster; matched through the event's workflow), and the events of the workflows that
    change it. A broker's include its dirs'. Without a cluster, the target in every cluster."""
    if not target.type:
        return Q(target_id=target.name)
    if target.type not in CLUSTER_SCOPED:
        return Q(target_type=target.type, target_id=target.name)
    q = _own(target.type, target.cluster, target.name, prefix=False)
    if target.type == BROKER:
        q |= _own(LOG_DIR, target.cluster, f"{target.name}:", prefix=True)
    on_cluster = Q(workflow__cluster=target.cluster) if target.cluster else Q()
    workflows = Q(workflow__target=target.workflow_target) & on_cluster
    if target.type == LOG_DIR:  # the recovery of this dir, not of another on the broker
        workflows &= Q(workflow__parameters__log_dir=target.dir_name)
    return q | workflows


def _own(ttype: str, cluster: str, name: str, *, prefix: bool) -> Q:
    lookup = "target_id__startswith" if prefix else "target_id"
    if cluster:
        new = Q(**{lookup: f"{cluster}/{name}"})
        old = Q(**{lookup: name}, workflow__cluster=cluster)
    else:  # any cluster: "<cluster>/<name>" has no "/" in the cluster, so a regex pins it
        pattern = "^[^/]+/" + _regex_escape(name) + ("" if prefix else "$")
        new = Q(target_id__regex=pattern)
        old = Q(**{lookup: name})
    return Q(target_type=ttype) & (new | old)


def _regex_escape(text: str) -> str:
    """Escape for a PostgreSQL regular expression (ARE): every non-alphanumeric, backslashed."""
    return "".join(c if c.isalnum() else "\\" + c for c in text)


def cluster_events(cluster: str) -> Q:
    """Every event about ``cluster``: the cluster itself, its topics, brokers and dirs, and the
    events of its workflows."""
    return (
        Q(target_type=CLUSTER, target_id=cluster)
        | Q(target_type__in=CLUSTER_SCOPED, target_id__startswith=f"{cluster}/")
        | Q(workflow__cluster=cluster)
    )


# --- links ----------------------------------------------------------------------------------


def target_url(target_type: str, target_id: Any, cluster: str = "") -> str | None:
    """The page of an event's target (None when it has none): a topic's page, the brokers page
    on a broker or dir, a workflow's, a Spark run's, a cluster's topics. ``cluster`` is the one
    to assume for an old form that does not say (its workflow's)."""
    t = parse(target_type, str(target_id), cluster)
    try:
        if t.type == TOPIC and t.cluster:
            return reverse("console:topic-detail", args=[t.cluster, t.name])
        if t.type == BROKER and t.cluster:
            return f"{reverse('console:brokers')}?{urlencode({'cluster': t.cluster})}"
        if t.type == LOG_DIR and t.cluster:
            query = urlencode({"cluster": t.cluster, "dir": t.name}, safe=":/")
            return f"{reverse('console:brokers')}?{query}#incident"
        if t.type == CLUSTER:
            return f"{reverse('console:topics')}?{urlencode({'cluster': t.name})}"
        if t.type == WORKFLOW and t.name.isdigit():
            return reverse("workflows:detail", args=[int(t.name)])
        if t.type == SPARK_RUN and t.name.isdigit():
            return reverse("spark_tasks:run-detail", args=[int(t.name)])
    except NoReverseMatch:  # a name the URL pattern refuses (a topic with odd characters)
        return None
    return None


def history_links(target: Target) -> dict[str, str]:
    """``audit`` and ``workflows``: the audit log and the workflow list filtered to ``target``
    (which has its cluster)."""
    links = {"audit": f"{reverse('audit:list')}?{urlencode({'target': target.label}, safe=':/')}"}
    if target.workflow_target:
        query = urlencode({"cluster": target.cluster, "target": target.workflow_target}, safe=":/")
        links["workflows"] = f"{reverse('workflows:list')}?{query}"
    return links
