"""KIP-253 in-order delivery as the console shows it: consumer groups' positions (synced from
the controller's group coordinator, :mod:`console.sync.groups`) read against the topic's
partitions - which partitions a group still waits on or drains. Reads PostgreSQL only."""

from __future__ import annotations

from collections import defaultdict

from django.core.paginator import Page
from django.db import connection
from django.shortcuts import get_object_or_404

from broker_agent.contract.ordering import creation_barrier, deletion_target, split_parent
from console import selectors
from console.models import Cluster, ConsumerGroup, GroupOffset, Partition, Topic

__all__ = ["annotate_tree", "group_detail", "group_positions", "topic_ordering"]


ORDERING_GROUP_LIMIT = 20
"""Groups the topic page and API show gates for (by group id; ``groups_count`` says how many
hold positions on the topic - the groups API lists them all)."""

ORDERING_ROW_LIMIT = 100
"""Gated partitions shown per group (held ones first; ``partitions_count`` says how many): an
expansion from 5,000 to 10,000 partitions gates 5,000 of them for every group."""


def topic_ordering(topic: Topic) -> dict:
    """KIP-253 in-order delivery as the console shows it (topic page, API ``ordering``).

    ``barrier`` is False when ``enable.ordered.delivery=false``. ``groups``: per consumer group (the
    first :data:`ORDERING_GROUP_LIMIT`), its lag and each partition a gate concerns — new (``waits
    on B`` until started, B from :func:`~broker_agent.contract.ordering.creation_barrier`), marked (draining),
    or held back by an undrained marked one — the first :data:`ORDERING_ROW_LIMIT`, held first. The
    console shows the leader epochs the split and deletion offsets come from, since a web request
    never asks a broker. Bounded at any size (#17): classified in PostgreSQL (:func:`_gate_rows`),
    two queries for a topic never resized, at most six.
    """
    barrier = topic.configs.get("enable.ordered.delivery", "true") == "true"
    with connection.cursor() as cur:  # the first groups by id, and how many there are
        cur.execute(
            """
            SELECT group_id, count(*) OVER () FROM (
                SELECT DISTINCT group_id FROM console_groupoffset
                WHERE cluster_id = %s AND topic_name = %s
            ) d ORDER BY group_id LIMIT %s
            """,
            [topic.cluster_id, topic.name, ORDERING_GROUP_LIMIT],
        )
        found = cur.fetchall()
    if not found:
        return {"barrier": barrier, "groups": [], "groups_count": 0}
    ids, count = [gid for gid, _ in found], found[0][1]
    lags = _group_lags(topic, ids)
    rows, count_of = _gate_rows(topic, ids, barrier)
    groups = [
        {
            "group_id": gid,
            "lag": lags.get(gid, 0),
            "partitions_count": count_of.get(gid, 0),
            "partitions": rows.get(gid, []),
        }
        for gid in ids
    ]
    return {"barrier": barrier, "groups": groups, "groups_count": count}


def _group_lags(topic: Topic, ids: list[str]) -> dict[str, int]:
    """Each group's lag over every partition of ``topic``: high watermark minus its position,
    or minus the log start offset where it has none (one query, summed in PostgreSQL).

    The topic's partitions are read once (a materialised CTE) and hashed by partition: probing
    them per position looked one partition up 10,000 times for a 10,000-partition topic (35 ms
    of the topic page at fleet size, against 17 ms, #17)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH p AS MATERIALIZED (
                SELECT partition, high_watermark AS hw, log_start_offset AS lso
                FROM console_partition WHERE topic_id = %(topic)s
            )
            SELECT g.group_id, (SELECT coalesce(sum(greatest(0, hw - lso)), 0) FROM p)
                + coalesce(sum(greatest(0, p.hw - greatest(g.committed_offset, p.lso))
                               - greatest(0, p.hw - p.lso)), 0)
            FROM console_groupoffset g
            LEFT JOIN p ON p.partition = g.partition
            WHERE g.cluster_id = %(cluster)s AND g.topic_name = %(name)s
              AND g.group_id = ANY(%(ids)s)
            GROUP BY g.group_id
            """,
            {"topic": topic.pk, "cluster": topic.cluster_id, "name": topic.name, "ids": ids},
        )
        return {gid: int(lag) for gid, lag in cur.fetchall()}


# Each listed group against each partition a gate may concern: made by an expansion (it has a
# leaderEpochAfterCreation), marked for deletion, or receiving a marked one's keys (a target).
# A row per (group, partition) that has a gate to show, classified as the topic page shows it,
# held ones first, the first %(limit)s of each group with how many there are.
_GATE_ROWS_SQL = """
WITH cand AS MATERIALIZED (
    SELECT x.partition AS p, x.marked_for_deletion AS marked,
           (x.partition >= %(n)s AND x.leader_epoch_after_creation <> '{}'::jsonb
            AND NOT x.marked_for_deletion) AS is_new,
           x.log_start_offset AS lso, x.log_end_offset AS leo, x.high_watermark AS hw
    FROM console_partition x
    WHERE x.topic_id = %(topic)s
      AND (x.marked_for_deletion OR x.partition = ANY(%(targets)s)
           OR (x.partition >= %(n)s AND x.leader_epoch_after_creation <> '{}'::jsonb))
),
undrained AS MATERIALIZED (
    SELECT g.gid, m.target, array_agg(m.p ORDER BY m.p) AS blockers
    FROM unnest(%(marked)s::int[], %(targets)s::int[]) AS m(p, target)
    JOIN cand c ON c.p = m.p
    CROSS JOIN unnest(%(ids)s::text[]) AS g(gid)
    LEFT JOIN console_groupoffset o
        ON o.cluster_id = %(cluster)s AND o.topic_name = %(name)s
       AND o.group_id = g.gid AND o.partition = m.p
    WHERE greatest(coalesce(o.committed_offset, c.lso), c.lso) < c.leo
    GROUP BY 1, 2
)
SELECT g.gid, r.p, r.pos, r.lag, r.marked, r.is_new, r.drained, r.started, r.blockers,
       r.rows_count
FROM unnest(%(ids)s::text[]) AS g(gid)
CROSS JOIN LATERAL (
    SELECT k.*, count(*) OVER () AS rows_count
    FROM (
        SELECT h.*, (h.marked AND NOT h.drained)
                    OR (%(barrier)s AND h.is_new AND NOT h.started)
                    OR (%(barrier)s AND h.blockers IS NOT NULL) AS held
        FROM (
            SELECT c.p, o.committed_offset AS pos, c.marked, c.is_new,
                   greatest(0, c.hw - greatest(coalesce(o.committed_offset, c.lso), c.lso))
                       AS lag,
                   greatest(coalesce(o.committed_offset, c.lso), c.lso) >= c.leo AS drained,
                   coalesce(o.committed_offset > c.lso, false) AS started,
                   CASE WHEN c.marked THEN NULL ELSE u.blockers END AS blockers
            FROM cand c
            LEFT JOIN console_groupoffset o
                ON o.cluster_id = %(cluster)s AND o.topic_name = %(name)s
               AND o.group_id = g.gid AND o.partition = c.p
            LEFT JOIN undrained u ON u.gid = g.gid AND u.target = c.p
            WHERE c.marked OR c.is_new OR (u.blockers IS NOT NULL AND NOT c.marked)
        ) h
    ) k
    ORDER BY k.held DESC, k.p
    LIMIT %(limit)s
) r
ORDER BY g.gid, r.held DESC, r.p
"""


def _gate_rows(
    topic: Topic, ids: list[str], barrier: bool
) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """Per group, its first :data:`ORDERING_ROW_LIMIT` gated partitions (held first) and how
    many there are. Classified in PostgreSQL (one pass over groups x gated partitions, however
    many); only the rows shown come back to Python, with the split and deletion epochs and the
    parents' positions read for those alone. None for a topic never expanded or shrunk."""
    n, u = topic.initial_partition_count, topic.undeleted_partition_count
    if topic.partition_count <= n and not topic.marked_for_deletion_count:
        return {}, {}
    of_topic = Partition.objects.filter(topic=topic)
    marked = []
    if topic.marked_for_deletion_count:
        marked = list(of_topic.filter(marked_for_deletion=True).values_list("partition", flat=True))
    params = {
        "topic": topic.pk,
        "cluster": topic.cluster_id,
        "name": topic.name,
        "ids": ids,
        "n": n,
        "marked": marked,
        "targets": [deletion_target(m, n, u) for m in marked],
        "barrier": barrier,
        "limit": ORDERING_ROW_LIMIT,
    }
    with connection.cursor() as cur:
        cur.execute(_GATE_ROWS_SQL, params)
        found = cur.fetchall()
    if not found:
        return {}, {}
    # The epochs the consumers ask the leaders for, and the barriers' positions: of shown rows.
    wanted = {r[1] for r in found} | {m for r in found for m in (r[8] or ())}
    epochs = {
        p: (after, before)
        for p, after, before in of_topic.filter(partition__in=wanted).values_list(
            "partition", "leader_epoch_after_creation", "leader_epoch_before_deletion"
        )
    }
    # KIP-253 step 4.2: the partition a new one waits on is the first of its ancestors that
    # existed before the expansion - its split parent only if that parent is not new too
    barriers = {r[1]: creation_barrier(r[1], n, epochs[r[1]][0]) for r in found if r[5]}
    at_barrier: dict[tuple[str, int], int] = {}
    if barriers:
        at_barrier = {
            (gid, p): offset
            for gid, p, offset in GroupOffset.objects.filter(
                cluster_id=topic.cluster_id,
                topic_name=topic.name,
                group_id__in=ids,
                partition__in={b for b in barriers.values() if b is not None},
            ).values_list("group_id", "partition", "committed_offset")
        }
    rows: dict[str, list[dict]] = defaultdict(list)
    count_of: dict[str, int] = {}
    for gid, p, pos, lag, marked_, is_new, drained, started, blockers, rows_count in found:
        count_of[gid] = rows_count
        entry = {"partition": p, "position": pos, "lag": lag, "kind": "", "status": ""}
        if marked_:
            entry.update(kind="marked", status="drained" if drained else "draining")
        elif is_new:
            waited = barriers[p]
            entry.update(
                kind="new",
                parent=split_parent(p, n),
                barrier=waited,
                split_epoch=epochs[p][0].get(str(waited)),
                barrier_position=at_barrier.get((gid, waited)),
                status=f"waits on {waited}"
                if barrier and not started and waited is not None
                else "released",
            )
        if blockers:
            before = {epochs[m][1].get(str(p)) for m in blockers}
            entry.update(
                kind=entry["kind"] or "holds",
                waits_on=list(blockers),
                deletion_epoch=min((e for e in before if e is not None), default=None),
                status="holds after the shrink" if barrier else entry["status"],
            )
        status = entry["status"]
        entry["held"] = status in ("draining", "holds after the shrink") or status.startswith(
            "waits on "
        )
        rows[gid].append(entry)
    return rows, count_of


def annotate_tree(tree: list[dict], ordering: dict) -> None:
    """Put each group's gate state on the split tree's nodes (``node["groups"]``): the picture
    of which new partitions a group is still held from, and which marked ones it drains."""
    by_partition: dict[int, list[dict]] = defaultdict(list)
    for g in ordering["groups"]:
        for r in g["partitions"]:
            status = "holds" if r["status"] == "holds after the shrink" else r["status"]
            by_partition[r["partition"]].append(
                {"group_id": g["group_id"], "status": status, "held": r["held"]}
            )

    def walk(nodes: list[dict]) -> None:
        for node in nodes:
            node["groups"] = by_partition.get(node["partition"], [])
            walk(node["children"])

    walk(tree)


GROUP_POSITIONS_LIMIT = 100
"""Positions listed per group in the groups list (``positions_count`` says how many; a group
reading a 10,000-partition topic holds 10,000 - the group's own route pages them all)."""


def group_positions(
    cluster: Cluster, page: int | str | None = 1, page_size: int | str | None = None
) -> tuple[Page, list[dict]]:
    """A page of the consumer groups (by group id; a fleet has 20,000 of them), each with its
    lag summed over all its committed positions (high watermark - position, as
    ``kafka-consumer-groups.sh --describe`` shows it; the topic page's ordering panel also
    counts partitions a group has not started), how many positions it holds, and the first
    :data:`GROUP_POSITIONS_LIMIT` of them (by topic and partition) with their lag. Five
    queries: the count, the page, the groups' sums, their first positions and the high
    watermarks of those."""
    groups = selectors.paginate(
        ConsumerGroup.objects.filter(cluster=cluster).only("group_id", "generation", "members"),
        page,
        page_size,
    )
    out = {
        g.group_id: {
            "group_id": g.group_id,
            "generation": g.generation,
            "members": g.members,
            "lag": 0,
            "positions_count": 0,
            "positions": [],
        }
        for g in groups.object_list
    }
    ids = list(out)
    for group_id, count, lag in _group_sums(cluster, ids):
        out[group_id].update(positions_count=count, lag=lag)
    with connection.cursor() as cur:  # each group's first positions, through its index
        cur.execute(
            """
            SELECT i.group_id, g.topic_name, g.partition, g.committed_offset
            FROM unnest(%(ids)s::text[]) AS i(group_id)
            CROSS JOIN LATERAL (
                SELECT topic_name, partition, committed_offset FROM console_groupoffset o
                WHERE o.cluster_id = %(cluster)s AND o.group_id = i.group_id
                ORDER BY o.topic_name, o.partition LIMIT %(limit)s
            ) g
            ORDER BY i.group_id, g.topic_name, g.partition
            """,
            {"cluster": cluster.pk, "ids": ids, "limit": GROUP_POSITIONS_LIMIT},
        )
        rows = cur.fetchall()
    hw = _high_watermarks(cluster, [(topic, p) for _gid, topic, p, _o in rows])
    for group_id, topic, partition, offset in rows:
        out[group_id]["positions"].append(
            position(topic, partition, offset, hw.get((topic, partition)))
        )
    return groups, list(out.values())


def group_detail(
    cluster: Cluster, group_id: str, page: int | str | None = 1, page_size: int | str | None = None
) -> tuple[dict, Page]:
    """One consumer group (its lag and position count as in :func:`group_positions`) and a
    page of all its positions (by topic and partition), each a :func:`position` dict. 404 for
    a group the sync does not know. Four queries (the positions are counted once, with the
    lag)."""
    group = get_object_or_404(ConsumerGroup, cluster=cluster, group_id=group_id)
    sums = _group_sums(cluster, [group_id])
    count, lag = (sums[0][1], sums[0][2]) if sums else (0, 0)
    positions = selectors.paginate(
        GroupOffset.objects.filter(cluster=cluster, group_id=group_id)
        .order_by("topic_name", "partition")
        .values_list("topic_name", "partition", "committed_offset"),
        page,
        page_size,
        count=count,
    )
    rows = list(positions.object_list)
    hw = _high_watermarks(cluster, [(topic, p) for topic, p, _o in rows])
    positions.object_list = [position(t, p, o, hw.get((t, p))) for t, p, o in rows]
    summary = {
        "group_id": group.group_id,
        "generation": group.generation,
        "members": group.members,
        "positions_count": count,
        "lag": lag,
    }
    return summary, positions


def _high_watermarks(cluster: Cluster, keys: list[tuple[str, int]]) -> dict:
    """``{(topic, partition): high watermark}`` of the partitions of ``keys`` that exist (one
    query, through the partitions' (cluster, topic name, partition) index)."""
    if not keys:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT p.topic_name, p.partition, p.high_watermark
            FROM unnest(%s::text[], %s::int[]) AS k(topic, partition)
            JOIN console_partition p ON p.cluster_id = %s AND p.topic_name = k.topic
                AND p.partition = k.partition
            """,
            [[t for t, _ in keys], [p for _, p in keys], cluster.pk],
        )
        return {(t, p): hw for t, p, hw in cur.fetchall()}


def position(topic: str, partition: int, offset: int, hw: int | None) -> dict:
    """A committed position as the API gives it: lag None when the partition is gone."""
    return {
        "topic": topic,
        "partition": partition,
        "committed_offset": offset,
        "lag": None if hw is None else max(0, hw - offset),
    }


def _group_sums(cluster: Cluster, ids: list[str]) -> list[tuple[str, int, int]]:
    """(group id, positions, lag over them) for each of ``ids`` holding positions (one
    query): a position on a partition that is gone counts no lag."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT g.group_id, count(*),
                coalesce(sum(greatest(0, p.high_watermark - g.committed_offset)), 0)
            FROM console_groupoffset g
            LEFT JOIN console_partition p ON p.cluster_id = g.cluster_id
                AND p.topic_name = g.topic_name AND p.partition = g.partition
            WHERE g.cluster_id = %s AND g.group_id = ANY(%s)
            GROUP BY g.group_id
            """,
            [cluster.pk, ids],
        )
        return [(gid, count, int(lag)) for gid, count, lag in cur.fetchall()]
