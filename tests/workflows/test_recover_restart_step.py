"""``recover_log_dir``'s restart step (KIP-112: a failed dir comes back only when the broker
process restarts, "fix disks and reboot broker"): after the restart, the worker's or an
operator's, a replaced dir that is still OFFLINE fails the step instead of waiting for replicas
that never return; a removed dir is gone."""

from __future__ import annotations

import contextlib
import types

import pytest

from broker_agent.contract.choices import LogDirState
from workflows.kinds import disks, get_kind
from workflows.kinds.disks_plan import DiskRefusal
from workflows.models import Workflow, WorkflowStep

pytestmark = pytest.mark.django_db


def _ctx(user, mode: str):
    wf = Workflow.objects.create(
        kind="recover_log_dir",
        cluster="lab",
        target=f"broker:1:{mode}",
        requester=user,
        parameters={"cluster": "lab", "broker": 1, "log_dir": "d1", "mode": mode},
        plan={"replicas": []},
    )
    step = WorkflowStep.objects.create(
        workflow=wf, position=0, name="restart_broker", attempts=1, idempotency_key=f"k{wf.pk}"
    )
    return types.SimpleNamespace(
        workflow=wf,
        step=step,
        params=get_kind(wf.kind).read_params(wf.parameters),
        plan=types.SimpleNamespace(**wf.plan),  # the restart step reads no plan
        idempotency_key=step.idempotency_key,
        log=lambda *a, **k: None,
    )


def _agent_with(dirs: list, incarnation: str = "i1"):
    @contextlib.contextmanager
    def open_agent(*args):
        yield types.SimpleNamespace(log_dirs=lambda: dirs, incarnation=lambda: incarnation)

    return open_agent


def _dir(state: str):
    return types.SimpleNamespace(name="d1", state=state, error="NotADirectoryError", cordoned=False)


@pytest.mark.parametrize("confirmed_by_hand", [False, True])
def test_a_replaced_dir_still_offline_after_the_restart_fails_the_step(
    monkeypatch, operator, confirmed_by_hand
):
    monkeypatch.setattr(disks, "agent", _agent_with([_dir(LogDirState.OFFLINE)]))
    restarted = {"restarted": True, "incarnation": "i2"}
    monkeypatch.setattr(
        disks,
        "controller",
        contextlib.contextmanager(
            lambda *a: iter([types.SimpleNamespace(restart_broker=lambda *a: restarted)])
        ),
    )
    ctx = _ctx(operator, "replace")
    step = disks.confirm_broker_restarted if confirmed_by_hand else disks.restart_broker
    result = step(ctx)
    assert (result.status, result.code) == ("fail", DiskRefusal.LOG_DIR_STILL_OFFLINE)
    assert "after the restart" in result.reason


def test_after_the_restart_a_good_replaced_dir_or_a_removed_dir_lets_the_runbook_go_on(
    monkeypatch, operator
):
    monkeypatch.setattr(disks, "agent", _agent_with([_dir(LogDirState.ONLINE)]))
    result = disks.confirm_broker_restarted(_ctx(operator, "replace"))
    assert result.status == "done" and result.output["log_dir_state"] == LogDirState.ONLINE
    monkeypatch.setattr(disks, "agent", _agent_with([]))  # the restarted broker has no d1
    result = disks.confirm_broker_restarted(_ctx(operator, "remove"))
    assert result.status == "done" and result.output["log_dir_state"] == "REMOVED"
