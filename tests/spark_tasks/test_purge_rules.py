"""KIP-950 delete-policy purge (``rules.plan_purge``): the fence outlives the disablement."""

from __future__ import annotations

from broker_agent.contract.choices import DisablePolicy, RemoteSegmentState
from spark_tasks import rules
from spark_tasks.schema import PlanReason


def _segment(sid: str, start: int, end: int, tiered_epoch: int, state=None) -> rules.Segment:
    return rules.Segment(
        segment_id=sid,
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=0,
        size_bytes=100,
        leader_epochs=((0, start),),
        state=state or RemoteSegmentState.COPY_SEGMENT_FINISHED,
        tiered_epoch=tiered_epoch,
    )


FENCED = [_segment("a", 0, 99, 0), _segment("b", 100, 199, 0)]
DONE = _segment("c", 200, 249, 0, RemoteSegmentState.DELETE_SEGMENT_FINISHED)
RETIERED = [_segment("d", 300, 399, 1), _segment("e", 400, 499, 1)]


def _partition(policy: str | None, **kw) -> rules.PartitionState:
    fields = {
        "log_start_offset": 300,
        "local_log_start_offset": 450,
        "log_end_offset": 600,
        "purge_below_tiered_epoch": 1,
        **kw,
    }
    return rules.PartitionState(leader_epochs=((0, 0),), disable_policy=policy, **fields)


def test_purge_right_after_a_delete_disablement_moves_log_start_to_local_log_start():
    part = _partition(DisablePolicy.DELETE, log_start_offset=250, local_log_start_offset=300)
    plan = rules.plan_purge(part, [*FENCED, DONE])
    assert [d.segment.segment_id for d in plan.deletions] == ["a", "b"]
    assert {d.reason for d in plan.deletions} == {PlanReason.PURGE_DISABLED}
    assert plan.new_log_start_offset == 300


def test_fenced_segments_are_still_purged_after_a_re_enable_and_re_tiered_ones_stay_readable():
    """A re-enable clears the policy but not the fence; the log start offset never moves past
    the first segment tiered at the new epoch (offsets stay continuous)."""
    plan = rules.plan_purge(_partition(None), [*FENCED, DONE, *RETIERED])
    assert [d.segment.segment_id for d in plan.deletions] == ["a", "b"]
    assert plan.new_log_start_offset == 300


def test_without_a_fence_nothing_is_purged():
    part = _partition(DisablePolicy.DELETE, purge_below_tiered_epoch=0)
    assert rules.plan_purge(part, FENCED).deletions == []


def test_retention_leaves_fenced_segments_to_the_purge_and_does_not_count_them():
    """Before the purge ran, fenced bytes must not make retention.bytes delete readable data."""
    part = _partition(None, retention_bytes=200, log_start_offset=300)
    plan = rules.plan_retention(part, [*FENCED, *RETIERED], now_ms=0)
    assert plan.deletions == [] and plan.new_log_start_offset == 300
