"""schemathesis over the console's JSON API, as a viewer and as an operator: no answer is a 5xx,
every status is one the OpenAPI document lists for the operation, and every error answer is
``{"error": CODE, "message": ...}`` with a documented code. Both phases: each operation alone
(examples per operation), then the stateful phase, which chains operations by the links
schemathesis infers from the document (#39).

In-process (WSGI) on the test database with a synced cluster, a bounded number of examples per
operation so the test stays a few seconds long. The agents' and the controller's APIs are fuzzed
by ``tests/broker_agent/test_security_and_schema.py``.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings

from accounts.actions import do_issue_token

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 10


@contextlib.contextmanager
def _keep_the_test_connection() -> Iterator[None]:
    """Requests served in-process must not close the test's connection at their end (what
    Django's own test client does too)."""
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield
    finally:
        for signal in (signals.request_started, signals.request_finished):
            signal.connect(close_old_connections)


def _error_problem(text: str) -> str | None:
    try:
        body = json.loads(text)
    except ValueError:
        return "not JSON"
    if not isinstance(body, dict) or set(body) < {"error", "message"}:
        return f"not an error document: {text[:120]}"
    if not str(body["error"]).isupper():
        return f"error code {body['error']!r} is not a CODE"
    return None


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_schemathesis_finds_no_5xx_in_the_console_api(role, request, synced):
    with _keep_the_test_connection():
        _fuzz(request.getfixturevalue(role))


def _fuzz(user) -> None:
    from config.wsgi import application

    _, raw = do_issue_token(user, acting_user=None)
    headers = {"Authorization": f"Bearer {raw}"}
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application, headers=headers)
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = 0
    for result in schema.get_all_operations():
        op = result.ok()
        operations += 1

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy())
        def run(case):
            response = case.call(headers=headers)
            statuses[response.status_code // 100 * 100] += 1
            if response.status_code == 401:
                failures.append(f"{case.method} {case.formatted_path}: the token was refused")
            where = f"{case.method} {case.formatted_path} {case.query or ''}"
            if response.status_code == 503 and case.formatted_path.endswith("/health"):
                pass  # documented: unavailable while no Celery worker answers (none runs here)
            elif response.status_code >= 500:
                failures.append(f"{where}: {response.status_code} {response.text[:300]}")
            elif str(response.status_code) not in case.operation.definition.raw["responses"]:
                failures.append(f"{where}: {response.status_code} is not in the document")
            elif response.status_code >= 400:
                problem = _error_problem(response.text)
                if problem:
                    failures.append(f"{where}: {response.status_code} {problem}")

        run()
    assert operations >= 10, "the OpenAPI document lost its operations"
    assert statuses[200] >= operations, f"too few answered requests to mean anything: {statuses}"
    assert failures == [], "\n".join(failures[:20])


#: Steps of the stateful phase: scenarios of a few linked calls each, bounded like the rest.
STATEFUL_EXAMPLES = 8
STATEFUL_STEPS = 5


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_schemathesis_stateful_phase_finds_no_5xx_and_only_documented_answers(
    role, request, synced
):
    """schemathesis's stateful phase (the suite's bounded run): it chains calls by the links it
    infers from the document (a cluster's name from ``/clusters`` into its brokers, topics and
    groups; a workflow's id from ``POST /workflows`` into ``GET /workflows/{id}``, ...), so the
    calls reach real objects instead of random names. Every answer is no 5xx, an error answer
    is a documented ``{"error": CODE, ...}``, and each status is one the document lists."""
    with _keep_the_test_connection():
        calls, failures = _stateful(request.getfixturevalue(role))
    assert sum(calls.values()) >= STATEFUL_EXAMPLES, calls
    assert failures == [], "\n".join(failures[:20])


def _stateful(user) -> tuple[Counter[str], list[str]]:
    from config.wsgi import application

    _, raw = do_issue_token(user, acting_user=None)
    headers = {"Authorization": f"Bearer {raw}"}
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application, headers=headers)
    failures: list[str] = []
    calls: Counter[str] = Counter()

    class Machine(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            where = f"{case.method} {case.formatted_path} {case.query or ''}"
            calls[f"{case.method} {case.path}"] += 1
            status = response.status_code
            documented = case.operation.definition.raw.get("responses", {})
            if status == 503 and case.formatted_path.endswith("/health"):
                return  # documented: unavailable while no Celery worker answers
            if status >= 500:
                failures.append(f"{where}: {status} {response.text[:300]}")
            elif str(status) not in documented and "default" not in documented:
                failures.append(f"{where}: {status} is not in the document")
            elif status >= 400 and (problem := _error_problem(response.text)):
                failures.append(f"{where}: {status} {problem}")

    Machine.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    return calls, failures
