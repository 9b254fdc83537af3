"""Property: no input to the workflow and audit API produces a 5xx (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.models import Workflow

from .conftest import request_noop

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(
        [
            "noop_check",
            "lab",
            "plain",
            "gate",
            "flaky",
            "delete",
            "retain",
            "",
            "\x00",
            "a" * 300,
            "0" * 64,
        ]
    ),
)
json_values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=6,
)
fields = st.sampled_from(
    [
        "kind",
        "cluster",
        "topic",
        "policy",
        "broker",
        "log_dir",
        "mode",
        "partitions",
        "reason",
        "break_glass",
        "break_glass_reason",
        "expected_plan_hash",
        "plan_hash",
        "comment",
    ]
)
bodies = st.one_of(
    st.dictionaries(fields, json_values, max_size=8),
    st.fixed_dictionaries(
        {
            "kind": st.just("noop_check"),
            "cluster": scalars,
            "mode": scalars,
            "params": st.fixed_dictionaries({"label": scalars, "brokers": scalars}),
        }
    ),
    json_values,
)
query_values = st.text(max_size=30) | st.sampled_from(
    ["open", "past", "2024-01-01", "-1", "99999999999999999999"]
)


@FUZZ
@given(body=bodies)
def test_post_workflows_never_5xx(client, admin, body):
    client.force_login(admin)
    response = client.post("/api/v1/workflows", json.dumps(body), content_type="application/json")
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert set(response.json()) == {"error", "message"}


@FUZZ
@given(
    action=st.sampled_from(["approve", "reject", "cancel", "confirm"]),
    target=st.sampled_from(["own", "other", "missing"]),
    body=bodies,
    as_requester=st.booleans(),
)
def test_decisions_never_5xx(client, operator, approver, action, target, body, as_requester):
    wf = Workflow.objects.open().filter(target="noop:fuzz").first() or request_noop(
        operator, "fuzz"
    )
    pk = {"own": wf.pk, "other": wf.pk + 1000, "missing": 2**62}[target]
    client.force_login(operator if as_requester else approver)
    response = client.post(
        f"/api/v1/workflows/{pk}/{action}", json.dumps(body), content_type="application/json"
    )
    assert response.status_code < 500, response.content


@FUZZ
@given(
    params=st.dictionaries(
        st.sampled_from(
            [
                "state",
                "kind",
                "cluster",
                "target",
                "requester",
                "limit",
                "offset",
                "actor",
                "action",
                "workflow",
                "outcome",
                "context",
                "since",
                "until",
                "before",
            ]
        ),
        query_values,
        max_size=5,
    ),
    path=st.sampled_from(
        ["/api/v1/workflows", "/api/v1/audit", "/workflows/", "/audit/", "/audit/export.jsonl"]
    ),
)
def test_lists_never_5xx(client, viewer, params, path):
    client.force_login(viewer)
    response = client.get(path, params)
    assert response.status_code < 500, response.content[:500]
    if response.streaming:
        b"".join(response.streaming_content)
