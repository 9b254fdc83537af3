"""Template helpers of the workflow and audit pages."""

from __future__ import annotations

import json
from typing import Any

from django import template

from audit import targets
from workflows.choices import ApprovalDecision

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def short_hash(value: str | None) -> str:
    return (value or "")[:12]


@register.filter
def compact_json(value: Any) -> str:
    if value in (None, "", {}, []):
        return "—"
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def plan_review(wf: Any) -> list[dict[str, Any]]:
    """The workflow's plan review rows (``workflows.queries.plan_summary``)."""
    from workflows.output import plan_summary

    return plan_summary(wf)


@register.filter
def decided(decision: str) -> str:
    """A decision (approve, reject) in the past tense a sentence needs: "You approved ..."."""
    past = {ApprovalDecision.APPROVE: "approved", ApprovalDecision.REJECT: "rejected"}
    return past.get(decision, decision)


@register.filter
def approvals_counted(wf: Any) -> int:
    """How many approvals count (``Workflow.counted_approvals``): what the workflow page shows,
    never voided or expired ones or rejections. Uses the prefetched approvals
    (``queries.with_decisions``)."""
    return len(wf.counted_approvals())


@register.filter
def target_url(workflow: Any) -> str | None:
    """The page of a workflow's target (``topic:demo.orders`` on its cluster: the topic page;
    ``broker:2``: the brokers page), read by :func:`audit.targets.target_url`; None for a target
    with no page (a self-test label)."""
    ttype, sep, name = (workflow.target or "").partition(":")
    return targets.target_url(ttype, name, workflow.cluster) if sep else None
