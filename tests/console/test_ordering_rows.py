"""The topic page's KIP-253 gates, classified in PostgreSQL (#17), against the rules written out
in Python (``broker_agent.contract.ordering``, partition by partition, group by group) on random topics:
expanded by one partition or by several doublings at once, shrunk, both, with the barrier on or
off and positions anywhere."""

from __future__ import annotations

import random

import pytest
from django.utils import timezone

from broker_agent.contract.ordering import deletion_blockers, deletion_target, split_parent
from console import ordering
from console.models import GroupOffset, Partition, Topic

pytestmark = pytest.mark.django_db

HELD = ("draining", "holds after the shrink")


def _held(status: str) -> bool:
    return status in HELD or status.startswith("waits on ")


def _first_existing_ancestor(p: int, n: int, after: dict) -> int:
    """Seed step 4.2 written out: up the split tree to a key of leaderEpochAfterCreation."""
    while str(p) not in after:
        p = split_parent(p, n)
    return p


def _expected(topic: Topic, limit: int) -> list[tuple[str, int, list[dict]]]:
    """Every gate row of every group, one partition at a time (the rules as the seed says them),
    held first then by partition; the first ``limit`` of each group with how many there are."""
    n, u = topic.initial_partition_count, topic.undeleted_partition_count
    barrier = topic.configs.get("enable.ordered.delivery", "true") == "true"
    parts = {p.partition: p for p in Partition.objects.filter(topic=topic)}
    positions: dict[str, dict[int, int]] = {}
    for g in GroupOffset.objects.filter(topic_name=topic.name):
        positions.setdefault(g.group_id, {})[g.partition] = g.committed_offset
    marked = sorted(p for p, row in parts.items() if row.marked_for_deletion)
    targets = {deletion_target(m, n, u) for m in marked}
    out = []
    for gid in sorted(positions)[: ordering.ORDERING_GROUP_LIMIT]:
        pos = positions[gid]

        def at(p: int, pos=pos) -> int:
            return max(pos.get(p, parts[p].log_start_offset), parts[p].log_start_offset)

        undrained = [m for m in marked if at(m) < parts[m].log_end_offset]
        rows = []
        for p, row in sorted(parts.items()):
            parent = split_parent(p, n)
            new = parent is not None and bool(row.leader_epoch_after_creation)
            if not (row.marked_for_deletion or p in targets or new):
                continue
            entry = {
                "partition": p,
                "position": pos.get(p),
                "lag": max(0, row.high_watermark - at(p)),
                "kind": "",
                "status": "",
            }
            if row.marked_for_deletion:
                status = "draining" if p in undrained else "drained"
                entry.update(kind="marked", status=status)
            elif new:
                started = pos.get(p) is not None and pos[p] > row.log_start_offset
                waited = _first_existing_ancestor(p, n, row.leader_epoch_after_creation)
                entry.update(
                    kind="new",
                    parent=parent,
                    barrier=waited,
                    split_epoch=row.leader_epoch_after_creation[str(waited)],
                    barrier_position=pos.get(waited),
                    status="released" if started or not barrier else f"waits on {waited}",
                )
            blockers = deletion_blockers(p, undrained, n, u)
            if blockers and not row.marked_for_deletion:
                epochs = {parts[m].leader_epoch_before_deletion.get(str(p)) for m in blockers}
                entry.update(
                    kind=entry["kind"] or "holds",
                    waits_on=blockers,
                    deletion_epoch=min((e for e in epochs if e is not None), default=None),
                    status="holds after the shrink" if barrier else entry["status"],
                )
            if entry["kind"]:
                entry["held"] = _held(entry["status"])
                rows.append(entry)
        rows.sort(key=lambda r: not r["held"])
        out.append((gid, len(rows), rows[:limit]))
    return out


def _random_topic(cluster, rng: random.Random, name: str) -> Topic:
    n = rng.randint(1, 5)
    count = rng.randint(n, 4 * n + 3)
    u = rng.randint(n, count)  # u == count: never shrunk
    barrier = rng.random() < 0.7
    topic = Topic.objects.create(
        cluster=cluster,
        name=name,
        topic_id=name,
        initial_partition_count=n,
        undeleted_partition_count=u,
        partition_count=count,
        marked_for_deletion_count=count - u,
        configs={} if barrier else {"enable.ordered.delivery": "false"},
    )
    targets = {m: deletion_target(m, n, u) for m in range(u, count)}
    rows = []
    for p in range(count):
        lso = rng.randint(0, 5)
        leo = lso + rng.randint(0, 10)
        after = {}
        if p >= n and rng.random() < 0.8:
            # as the controller writes it: every partition that existed before the expansion
            # that made p (U_before from N to p: several doublings at once when far below p)
            existed = n if rng.random() < 0.5 else rng.randint(n, p)
            after = {str(q): rng.randint(0, 5) for q in range(existed)}
        before = {}
        if p in targets and rng.random() < 0.8:
            before = {str(targets[p]): rng.randint(0, 5)}
        rows.append(
            Partition(
                cluster=cluster,
                topic=topic,
                topic_name=name,
                partition=p,
                log_start_offset=lso,
                log_end_offset=leo,
                high_watermark=rng.randint(lso, leo),
                marked_for_deletion=p >= u,
                leader_epoch_after_creation=after,
                leader_epoch_before_deletion=before,
            )
        )
    Partition.objects.bulk_create(rows)
    now = timezone.now()
    GroupOffset.objects.bulk_create(
        GroupOffset(
            cluster=cluster,
            group_id=f"g{g}",
            topic_name=name,
            partition=r.partition,
            committed_offset=rng.randint(0, r.log_end_offset + 2),
            synced_at=now,
        )
        for g in range(rng.randint(1, 4))
        for r in rows
        if rng.random() < 0.6
    )
    return topic


@pytest.mark.parametrize("limit", [100, 3])
def test_the_gates_classified_in_sql_are_the_rules_partition_by_partition(
    cluster, monkeypatch, limit
):
    monkeypatch.setattr(ordering, "ORDERING_ROW_LIMIT", limit)
    rng = random.Random(253 + limit)
    seen, waiting = set(), []
    for i in range(40):
        topic = _random_topic(cluster, rng, f"t{i}")
        got = ordering.topic_ordering(topic)
        shown = [(g["group_id"], g["partitions_count"], g["partitions"]) for g in got["groups"]]
        assert shown == _expected(topic, limit), topic.name
        seen |= {r["status"] for g in got["groups"] for r in g["partitions"]}
        waiting += [
            r for g in got["groups"] for r in g["partitions"] if r["status"].startswith("waits")
        ]
    # every kind of gate came up at least once among the random topics
    assert seen >= {"released", "draining", "drained", "holds after the shrink"}
    # and new partitions held by their split parent and by an older ancestor (step 4.2); with
    # 3 rows a group, the lowest held partitions shown are mostly split from a first partition
    assert any(r["parent"] == r["barrier"] for r in waiting)
    assert limit == 3 or any(r["parent"] != r["barrier"] for r in waiting)
