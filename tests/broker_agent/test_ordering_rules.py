"""KIP-253 consumer-side rules (broker_agent.contract.ordering) and the group coordinator's fencing."""

from __future__ import annotations

import sqlite3

import pytest

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.errors import ApiError
from broker_agent.contract.hashing import partition_for_key
from broker_agent.contract.ordering import (
    Gate,
    creation_barrier,
    creation_gate_applies,
    deletion_blockers,
    deletion_target,
    split_parent,
)
from broker_agent.simulator.groups import GroupCoordinator


def test_each_new_partition_waits_on_exactly_the_partition_its_keys_came_from():
    n = 3
    for u in range(n + 1, 13):
        for i in range(500):
            key = f"k{i}".encode()
            before, after = partition_for_key(key, n, u - 1), partition_for_key(key, n, u)
            if after != before:  # only keys of the new partition's split parent move
                assert after == u - 1 and split_parent(after, n) == before
    assert split_parent(1, 3) is None


@pytest.mark.parametrize(
    ("n", "u_before", "u_after"),
    [(2, 2, 3), (2, 2, 8), (3, 3, 13), (1, 1, 16), (2, 3, 8), (3, 5, 7), (2, 5, 21)],
)
def test_a_new_partition_waits_on_the_first_ancestor_that_existed_before_the_expansion(
    n, u_before, u_after
):
    """KIP-253 consumer step 4.2: every key now in a partition made by the expansion was, under
    the old count, in exactly the partition :func:`creation_barrier` names from the keys of the
    new partition's leaderEpochAfterCreation - the split parent only when that parent existed."""
    after_creation = {str(p): 7 for p in range(u_before)}  # as the controller records it
    moved_through_new_parent = 0
    for i in range(3000):
        key = f"key-{i}".encode()
        before, after = partition_for_key(key, n, u_before), partition_for_key(key, n, u_after)
        if after < u_before:
            assert after == before  # linear hashing moves only keys of split partitions
            continue
        assert creation_barrier(after, n, after_creation) == before
        if split_parent(after, n) >= u_before:
            moved_through_new_parent += 1  # the parent is new: it held none of them before
    if u_after > 2 * u_before:
        assert moved_through_new_parent
    assert creation_barrier(6, 2, {"0": 3, "1": 4}) == 0  # 2 -> 8: 6 splits 2, itself new
    assert creation_barrier(1, 2, {"0": 3}) is None  # below N: not made by an expansion
    assert creation_barrier(5, 2, {}) is None  # no map: no barrier to name


def test_a_marked_partition_sends_its_keys_to_its_first_ancestor_below_the_count():
    n = 2
    for u_old in range(3, 17):
        for u_new in range(n, u_old):
            for i in range(300):
                key = f"key-{i}".encode()
                p_old = partition_for_key(key, n, u_old)
                if p_old >= u_new:
                    assert deletion_target(p_old, n, u_new) == partition_for_key(key, n, u_new)
    # 8 -> 2 with N=2: 0 is blocked by 2, 4 and 6 (O(log n) of them), 1 by 3, 5, 7
    marked = list(range(2, 8))
    assert deletion_blockers(0, marked, 2, 2) == [2, 4, 6]
    assert deletion_blockers(1, marked, 2, 2) == [3, 5, 7]


def test_the_creation_gate_holds_only_until_the_group_starts_the_partition():
    assert creation_gate_applies(2, 2, None, 0)
    assert creation_gate_applies(2, 2, 5, 5)  # at its log start: not started
    assert not creation_gate_applies(2, 2, 6, 5)
    assert not creation_gate_applies(1, 2, None, 0)  # not made by an expansion
    g = Gate(limit=10)
    assert g.allows(9) and not g.allows(10) and not Gate(open=False).allows(0)


def _coordinator(layout):
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return db, GroupCoordinator(db, lambda t: layout.get(t))


def test_marked_and_live_partitions_are_dealt_separately():
    layout = {"t": ([0, 1], [2, 3])}
    _db, c = _coordinator(layout)
    a = c.join("g", None, ["t"])["member_id"]
    b = c.join("g", None, ["t"])["member_id"]
    got = {m: c.heartbeat("g", m)["assignment"]["t"] for m in (a, b)}
    # each member gets one live and one marked partition, not one all-live and one all-marked
    for parts in got.values():
        assert len([p for p in parts if p < 2]) == 1 and len([p for p in parts if p >= 2]) == 1


def test_a_commit_from_an_older_generation_or_an_unknown_member_is_fenced():
    layout = {"t": ([0, 1], [])}
    db, c = _coordinator(layout)
    first = c.join("g", None, ["t"])
    c.commit("g", first["member_id"], first["generation"], {"t": {0: 5}})
    layout["t"] = ([0, 1, 2, 3], [])  # an expansion: a new generation
    with pytest.raises(ApiError) as exc:
        c.commit("g", first["member_id"], first["generation"], {"t": {0: 9}})
    assert exc.value.error == ErrorCode.ILLEGAL_GENERATION
    fresh = c.heartbeat("g", first["member_id"])
    assert fresh["generation"] == first["generation"] + 1
    assert fresh["assignment"]["t"] == [0, 1, 2, 3]
    with pytest.raises(ApiError) as exc:
        c.commit("g", "member-nobody", fresh["generation"], {"t": {0: 9}})
    assert exc.value.error == ErrorCode.UNKNOWN_MEMBER_ID
    # positions survive a restart of the controller (the same store, a new coordinator)
    again = GroupCoordinator(db, lambda t: layout.get(t))
    assert again.view("g")["offsets"] == {"t": {0: 5}}
    with pytest.raises(ApiError) as exc:
        again.view("no such group")
    assert exc.value.error == ErrorCode.INVALID_GROUP_ID


def test_a_removed_partition_takes_the_groups_commits_so_a_re_created_one_starts_fresh():
    """KIP-253 shrink then re-expansion: once the controller removes a drained partition no
    group keeps a committed offset on it (Kafka drops the offsets of deleted partitions), and a
    commit on a partition the topic does not have is refused - so the partition an expansion
    makes again starts from offset 0, behind the creation gate, not at a stale position past
    its end."""
    layout = {"t": ([0, 1, 2, 3], [])}
    _db, c = _coordinator(layout)
    m = c.join("g", None, ["t"])
    c.commit("g", m["member_id"], m["generation"], {"t": {0: 50, 1: 60, 2: 812, 3: 9}})
    other = c.join("h", None, ["t"])
    c.commit("h", other["member_id"], other["generation"], {"t": {0: 1}})
    layout["t"] = ([0, 1], [])  # shrunk to 2; 2 and 3 drained and removed
    assert c.forget_partitions("t", [2, 3]) == ["g"]  # h held nothing there
    assert c.view("g")["offsets"] == {"t": {0: 50, 1: 60}}
    fresh = c.heartbeat("g", m["member_id"])
    with pytest.raises(ApiError) as exc:  # a member that delivered from 2 before it went
        c.commit("g", m["member_id"], fresh["generation"], {"t": {0: 55, 2: 813}})
    assert exc.value.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.view("g")["offsets"] == {"t": {0: 50, 1: 60}}  # nothing of it written
    layout["t"] = ([0, 1, 2, 3], [])  # re-expanded: 2 and 3 exist again, empty
    assert 2 not in c.view("g")["offsets"]["t"]
    fresh = c.heartbeat("g", m["member_id"])
    c.commit("g", m["member_id"], fresh["generation"], {"t": {2: 4}})
    assert c.view("g")["offsets"] == {"t": {0: 50, 1: 60, 2: 4}}
