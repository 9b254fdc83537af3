"""The plan review an approver reads (issue #15, ``plan_summary``): each kind turns its plan's
actions and information into rows; what deletes or makes data unreadable is marked
destructive, with its size. Rendered on the approve / workflow pages (the delete-policy case is
checked end to end in ``test_disable_tiering``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workflows.kinds import all_kinds, get_kind
from workflows.output import plan_summary

DISABLE = {
    "topic": "t", "topic_id": "x", "policy": "delete", "tiered_state": "ENABLED",
    "tiered_epoch": 0, "new_tiered_epoch": 1, "partitions": 3, "brokers": [1, 2, 3],
    "replicas_per_broker": {"1": 3, "2": 3, "3": 1},
}  # fmt: skip
SIZES = {"remote_segments": 7, "remote_bytes": 409600}


def _destructive(rows) -> list:
    return [r for r in rows if r.destructive]


def test_delete_policy_names_brokers_epochs_and_what_becomes_unreadable():
    rows = get_kind("disable_tiering").review(DISABLE, SIZES)
    assert rows[0].before == "ENABLED, tiered epoch 0" and rows[0].after.endswith("epoch 1")
    assert rows[1].target == "brokers 1 (3 replicas), 2 (3 replicas), 3 (1 replica)"
    [red] = _destructive(rows)
    assert "unreadable at once" in red.what
    assert red.size == "7 remote segments, 400.0 KB (as of the last sync)"


def test_retain_policy_deletes_nothing_but_flags_a_dir_the_growth_does_not_fit():
    growth = {"log_dirs": [{"broker": 1, "log_dir": "d0", "replicas": 2, "fits": False}],
              "all_fit": False, "unplaced_replicas": 0}  # fmt: skip
    rows = get_kind("disable_tiering").review(
        {**DISABLE, "policy": "retain", "disk_growth": growth}, SIZES
    )
    [red] = _destructive(rows)
    assert red.after == "does NOT fit: broker 1 d0"
    fits = {**growth, "all_fit": True, "log_dirs": []}
    rows = get_kind("disable_tiering").review(
        {**DISABLE, "policy": "retain", "disk_growth": fits}, SIZES
    )
    assert not _destructive(rows)


@pytest.mark.parametrize(
    ("kind", "actions", "information", "destructive_size"),
    [
        ("expand_partitions", {"topic": "t", "undeleted_partition_count": 2,
          "new_undeleted_partition_count": 4, "replication_factor": 3,
          "new_partitions": [{"partition": 2, "parent": 0}, {"partition": 3, "parent": 1}]},
         {}, None),
        ("shrink_partitions", {"topic": "t", "undeleted_partition_count": 4,
          "new_undeleted_partition_count": 2,
          "partitions_to_mark": [{"partition": 2, "keys_move_to": 0}]},
         {"records_to_drain": 30}, "30 records left to drain (moves with traffic)"),
        ("recover_log_dir", {"broker": 1, "log_dir": "d0", "mode": "replace",
          "restart": "sim", "replica_count": 2,
          "replicas": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 1}]},
         {"log_dir_state": "OFFLINE", "bytes_to_recreate": 12345},
         "2 replicas, 12.1 KB to copy"),
        ("remote_purge", {"spark_run": 5, "plan_rows": 7, "plan_bytes": 4000,
          "plan_sha256": "abcdef0123456789", "by_reason": {"fenced": 7},
          "steps": ["publish_log_start_offsets", "mark_delete_started", "delete_objects",
                    "mark_delete_finished"]},
         {}, "7 objects, 3.9 KB; plan sha256 abcdef012345"),
        ("orphan_sweep", {"spark_run": 6, "plan_rows": 1, "plan_bytes": 1000,
          "plan_sha256": "0123456789abcdef", "by_reason": None, "steps": ["delete_objects"]},
         {}, "1 object, 1000 bytes; plan sha256 0123456789ab"),
        ("elect_leaders", {"topic": "t", "backend": "kafka",
          "elections": [{"partition": 0, "leader": 2, "preferred": 1}]},
         {"preferred_not_in_isr": []}, None),
        ("expand_partitions", {"topic": "t", "backend": "kafka", "partition_count": 2,
          "new_partition_count": 4, "replication_factor": 3, "new_partitions": [2, 3],
          "placement": "Kafka's default placement", "key_remapping": "keys move",
          "ordered_expansion": "unavailable: no KIP-253"},
         {}, "per-key order not kept across the change"),
    ],
)  # fmt: skip
def test_every_kind_reviews_its_plan(kind, actions, information, destructive_size):
    rows = get_kind(kind).review(actions, information)
    assert rows and all(r.what for r in rows)
    red = _destructive(rows)
    assert [r.size for r in red] == ([destructive_size] if destructive_size else [])


@pytest.mark.parametrize(("restart", "who"), [("sim", "the worker"), ("manual", "an operator")])
def test_recovery_review_cordon_keeps_replicas_serving_and_the_broker_restarts(restart, who):
    """KIP-1066: a cordon only stops new replicas landing on the dir; KIP-112: the failed dir
    comes back only when the broker restarts (by the worker on the simulated cluster, else by
    an operator who confirms), and there is no LogDirReset step."""
    actions = {"broker": 1, "log_dir": "d0", "mode": "replace", "restart": restart,
               "replica_count": 1, "replicas": [{"topic": "a", "partition": 0}]}  # fmt: skip
    rows = get_kind("recover_log_dir").review(actions, {"log_dir_state": "DEGRADED"})
    cordon = rows[0]
    assert "no new replicas placed on it; its replicas keep serving" in cordon.what
    assert not cordon.destructive and "offline" not in cordon.after
    restart_row = next(r for r in rows if "restart broker 1" in r.what.lower())
    assert who in restart_row.what
    assert not any("LogDirReset" in r.what for r in rows)


def test_plan_summary_is_empty_without_a_plan_or_for_a_plan_it_cannot_read():
    assert plan_summary(SimpleNamespace(kind="disable_tiering", plan={}, plan_information={})) == []
    old = SimpleNamespace(kind="disable_tiering", plan={"summary": "x"}, plan_information=None)
    assert plan_summary(old) == []  # written by an older version: the JSON still shows it
    unknown = SimpleNamespace(kind="gone", plan={"steps": ["a"]}, plan_information={})
    assert plan_summary(unknown) == []
    wf = SimpleNamespace(kind="disable_tiering", plan=DISABLE, plan_information=SIZES)
    assert plan_summary(wf)[-1]["destructive"] is True


def test_every_dry_run_the_spark_page_offers_to_execute_names_the_kind_that_executes_it():
    from spark_tasks.views import EXECUTED_BY

    executing = {k.job: k.name for k in all_kinds() if getattr(k, "job", None)}
    assert executing == EXECUTED_BY


def test_a_cluster_without_the_sim_restart_control_gets_a_manual_restart_gate():
    """#36: where the worker cannot restart the broker, the restart is a human gate an
    operator confirms (audited who / when; no worker waits); with the control, a worker step."""
    kind = get_kind("recover_log_dir")
    params = kind.read_params({"cluster": "c", "broker": 1, "log_dir": "d0", "mode": "remove"})

    def restart_by(who: str):  # the steps read only who restarts the broker
        return kind.actions_model.model_construct(restart=who)

    manual = {s.name: s for s in kind.steps(params, restart_by("manual"))}
    assert (
        manual["restart_broker"].gate and "Restart broker 1" in manual["restart_broker"].gate_prompt
    )
    sim = {s.name: s for s in kind.steps(params, restart_by("sim"))}
    assert not sim["restart_broker"].gate
    assert list(sim) == ["cordon_log_dir", "remove_log_dir", "restart_broker",
                         "recreate_replicas", "verify"]  # fmt: skip
