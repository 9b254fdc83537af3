"""KIP-253 in-order delivery as the console shows it: consumer groups' positions (synced from
the controller's group coordinator, :mod:`console.sync.groups`) read against the topic's
partitions - which partitions a group still waits on or drains. Reads PostgreSQL only."""

from __future__ import annotations

from collections import defaultdict

from broker_agent.ordering import deletion_blockers, split_parent
from console.models import Cluster, GroupOffset, Partition, Topic

__all__ = ["annotate_tree", "group_positions", "topic_ordering"]


def topic_ordering(topic: Topic) -> dict:
    """KIP-253 in-order delivery as the console shows it (topic page, API ``ordering``).

    ``barrier``: False when ``enable.ordered.delivery=false`` (consumers then read every
    partition at once, and keys may be delivered out of order across an expand or shrink).
    ``groups``: per consumer group with positions on the topic (the controller's coordinator,
    synced), each partition that a gate concerns: made by an expansion (waits on its split
    parent until the group has started it), marked for deletion (draining), or holding back
    because a marked partition is not drained yet - with the group's position and lag. The
    split and deletion *offsets* are what consumers ask the leaders for; the console shows the
    leader epochs they come from (a web request never asks a broker). Two queries.
    """
    n, u = topic.initial_partition_count, topic.undeleted_partition_count
    barrier = topic.configs.get("enable.ordered.delivery", "true") == "true"
    positions: dict[str, dict[int, int]] = defaultdict(dict)
    for row in GroupOffset.objects.filter(cluster_id=topic.cluster_id, topic_name=topic.name):
        positions[row.group_id][row.partition] = row.committed_offset
    if not positions:
        return {"barrier": barrier, "groups": []}
    parts = {
        p.partition: p
        for p in Partition.objects.filter(topic=topic).only(
            "partition",
            "log_start_offset",
            "log_end_offset",
            "high_watermark",
            "marked_for_deletion",
            "leader_epoch_after_creation",
            "leader_epoch_before_deletion",
        )
    }
    marked = sorted(p for p, row in parts.items() if row.marked_for_deletion)
    groups = []
    for gid, pos in sorted(positions.items()):

        def at(p: int, pos=pos) -> int:
            row = parts[p]
            return max(pos.get(p, row.log_start_offset), row.log_start_offset)

        undrained = [m for m in marked if at(m) < parts[m].log_end_offset]
        rows = []
        for p, row in sorted(parts.items()):
            entry = {
                "partition": p,
                "position": pos.get(p),
                "lag": max(0, row.high_watermark - at(p)),
                "kind": "",
                "status": "",
            }
            parent = split_parent(p, n)
            if row.marked_for_deletion:
                drained = p not in undrained
                entry.update(kind="marked", status="drained" if drained else "draining")
            elif parent is not None and row.leader_epoch_after_creation:
                started = pos.get(p) is not None and pos[p] > row.log_start_offset
                epoch = row.leader_epoch_after_creation.get(str(parent))
                entry.update(
                    kind="new",
                    parent=parent,
                    split_epoch=epoch,
                    parent_position=pos.get(parent),
                    status="released" if started or not barrier else "waits on parent",
                )
            blockers = [m for m in deletion_blockers(p, undrained, n, u) if m in parts]
            if blockers and not row.marked_for_deletion:
                epochs = {parts[m].leader_epoch_before_deletion.get(str(p)) for m in blockers}
                entry.update(
                    kind=entry["kind"] or "holds",
                    waits_on=blockers,
                    deletion_epoch=min((e for e in epochs if e is not None), default=None),
                    status="holds after the shrink" if barrier else entry["status"],
                )
            if entry["kind"]:
                rows.append(entry)
        groups.append(
            {
                "group_id": gid,
                "lag": sum(max(0, row.high_watermark - at(p)) for p, row in parts.items()),
                "partitions": rows,
            }
        )
    return {"barrier": barrier, "groups": groups}


def annotate_tree(tree: list[dict], ordering: dict) -> None:
    """Put each group's gate state on the split tree's nodes (``node["groups"]``): the picture
    of which new partitions a group is still held from, and which marked ones it drains."""
    by_partition: dict[int, list[dict]] = defaultdict(list)
    for g in ordering["groups"]:
        for r in g["partitions"]:
            held = r["status"] in ("waits on parent", "draining", "holds after the shrink")
            status = "holds" if r["status"] == "holds after the shrink" else r["status"]
            by_partition[r["partition"]].append(
                {"group_id": g["group_id"], "status": status, "held": held}
            )

    def walk(nodes: list[dict]) -> None:
        for node in nodes:
            node["groups"] = by_partition.get(node["partition"], [])
            walk(node["children"])

    walk(tree)


def group_positions(cluster: Cluster) -> list[dict]:
    """Every consumer group's committed positions with lag (high watermark - position), and
    the group's lag summed over them - over the partitions with a committed offset, as
    ``kafka-consumer-groups.sh --describe`` shows it (the topic page's ordering panel also
    counts partitions a group has not started). Two queries."""
    rows = list(GroupOffset.objects.filter(cluster=cluster))
    hws = {
        (p["topic_name"], p["partition"]): p["high_watermark"]
        for p in Partition.objects.filter(
            cluster=cluster, topic_name__in={r.topic_name for r in rows}
        ).values("topic_name", "partition", "high_watermark")
    }
    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(
            r.group_id,
            {"group_id": r.group_id, "generation": r.generation, "members": r.members, "lag": 0},
        )
        hw = hws.get((r.topic_name, r.partition))
        lag = None if hw is None else max(0, hw - r.committed_offset)
        g["lag"] += lag or 0
        g.setdefault("positions", []).append(
            {
                "topic": r.topic_name,
                "partition": r.partition,
                "committed_offset": r.committed_offset,
                "lag": lag,
            }
        )
    return [groups[k] for k in sorted(groups)]
