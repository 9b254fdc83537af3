"""The users of ``make bench BENCH=load`` (:mod:`bench.bench_load`): an SRE team in an incident.

Run by locust in its own process, never imported by the bench runner (locust patches the
standard library with gevent on import). ``BENCH_LOAD_CONFIG`` names a JSON file saying where the
stack is; results go to its ``results`` path. Users: ``ConsoleUser`` (browser polling a page's
live panel every 5 s), ``ApiUser``, ``ChangeUser`` (operator + approver running a workflow every
``workflow_interval`` s) and ``MachineUser`` (Prometheus and a health probe). The window starts
once every user is signed in; sign-ins are reported on their own.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from pathlib import Path
from urllib.parse import urlencode

import gevent
from locust import FastHttpUser, between, constant, events, task
from locust.contrib.fasthttp import FastHttpSession

CONFIG = json.loads(Path(os.environ["BENCH_LOAD_CONFIG"]).read_text())
#: The 200,000-partition cluster gets this share of the cluster-scoped visits, the demo the rest.
BIG_SHARE = 0.7
LIVE_SECONDS = 5  # console.views.LIVE_SECONDS: how often a page's live panel polls
SIGN_IN = ("GET /accounts/login/", "POST /accounts/login/ (sign in)")

_window: dict[str, float] = {}
_records: list[tuple[str, float, float, str]] = []  # (route, start, ms, error or "")
_sign_ins: list[tuple[str, float, float, str]] = []
_workflows: list[dict] = []
_readers = itertools.count()


@events.request.add_listener
def _record(request_type, name, response_time, exception, start_time=None, **kwargs):
    row = (name, start_time or time.time(), response_time, repr(exception) if exception else "")
    (_sign_ins if name in SIGN_IN else _records).append(row)


_environment: dict = {}


@events.init.add_listener
def _init(environment, **kwargs):
    _environment["env"] = environment


@events.spawning_complete.add_listener
def _start_window(user_count, **kwargs):
    if "start" not in _window:
        _window["start"] = time.time()
        gevent.spawn_later(CONFIG["window_seconds"], _end_window)


def _end_window() -> None:
    _window["end"] = time.time()
    _environment["env"].runner.quit()


@events.quitting.add_listener
def _write(environment, **kwargs):
    start = _window.get("start")
    end = _window.get("end", time.time())
    Path(CONFIG["results"]).write_text(
        json.dumps(
            {
                "window": [start, end],
                "requests": _records,
                "sign_ins": _sign_ins,
                "workflows": _workflows,
                "users": environment.runner.user_count if environment.runner else None,
            }
        )
    )


def _cluster() -> dict:
    big, demo = CONFIG["clusters"]["big"], CONFIG["clusters"]["demo"]
    return big if random.random() < BIG_SHARE else demo


def _csrf(session: FastHttpSession) -> str:
    return next((c.value for c in session.cookiejar if c.name == "csrftoken"), "")


def _form(session: FastHttpSession, url: str, name: str, fields: dict, expect: int = 302):
    """POST a form with the CSRF token, as the browser does; a non-``expect`` answer fails."""
    body = urlencode({"csrfmiddlewaretoken": _csrf(session), **fields})
    with session.post(
        url,
        data=body,
        name=name,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Referer": session.base_url},
        allow_redirects=False,
        catch_response=True,
    ) as r:
        if r.status_code == expect:
            r.success()
        else:
            r.failure(f"HTTP {r.status_code}, expected {expect}")
        return r


def sign_in(session: FastHttpSession, username: str, attempts: int = 3) -> None:
    """The login form, as a browser fills it; a failed attempt is counted (an error in the
    sign-in row) and tried again, up to ``attempts`` times."""
    for attempt in range(attempts):
        session.get("/accounts/login/", name=SIGN_IN[0])
        password = CONFIG["passwords"][username]
        fields = {"username": username, "password": password, "next": "/"}
        if _form(session, "/accounts/login/", SIGN_IN[1], fields).status_code == 302:
            return
        gevent.sleep(1 + attempt)
    raise RuntimeError(f"{username} could not sign in ({attempts} attempts)")


def _get(session: FastHttpSession, url: str, name: str, headers: dict | None = None) -> int:
    """GET that must answer 200 without sending to the login page; 286 is htmx's "stop polling"
    (a finished workflow, a list with nothing running), an answer like 200."""
    with session.get(
        url, name=name, headers=headers or {}, allow_redirects=False, catch_response=True
    ) as r:
        if r.status_code in (200, 286):
            r.success()
        else:
            r.failure(f"HTTP {r.status_code}")
        return r.status_code


class _SignedIn(FastHttpUser):
    abstract = True

    def on_start(self) -> None:
        roles = CONFIG["reader_logins"]
        self.username = roles[next(_readers) % len(roles)]
        sign_in(self.client, self.username)


class ConsoleUser(_SignedIn):
    """A browser: a page, its live panel polled while it is read, then the next page."""

    weight = 40
    wait_time = between(1, 3)

    def _visit(self, url: str, name: str, live: str | None) -> None:
        _get(self.client, url, name)
        if live is None:
            gevent.sleep(random.uniform(3, 15))
            return
        for _ in range(random.randint(0, 3)):  # read for 0 to 15 s while htmx refreshes it
            gevent.sleep(LIVE_SECONDS)
            status = _get(
                self.client,
                url,
                f"{name} (htmx poll of #{live})",
                {"HX-Request": "true", "HX-Target": live, "HX-Current-URL": url},
            )
            if status == 286:  # htmx stops polling
                break

    @task(10)
    def overview(self) -> None:
        self._visit("/", "/ (overview)", "clusters-live")

    @task(8)
    def brokers(self) -> None:
        c = _cluster()
        self._visit(f"/brokers/?cluster={c['name']}", "/brokers/", "brokers-live")

    @task(8)
    def incident_panel(self) -> None:
        c = _cluster()
        url = f"/brokers/?cluster={c['name']}&dir={random.choice(c['dirs'])}"
        self._visit(url, "/brokers/?dir= (one dir's incident panel)", "brokers-live")

    @task(6)
    def topics(self) -> None:
        c = _cluster()
        sort = random.choice(["name", "-remote_bytes", "-local_bytes"])
        url = f"/topics/?cluster={c['name']}&sort={sort}&page={random.randint(1, 5)}"
        self._visit(url, "/topics/", "topics-live")

    @task(8)
    def topic(self) -> None:
        c = _cluster()
        url = f"/topics/{c['name']}/{random.choice(c['topics'])}/"
        self._visit(url, "/topics/<cluster>/<topic>/", "topic-live")

    @task(4)
    def topology(self) -> None:
        c = _cluster()
        self._visit(f"/topology/?cluster={c['name']}", "/topology/", "topology-live")

    @task(2)
    def topology_offline(self) -> None:
        c = _cluster()
        url = f"/topology/?cluster={c['name']}&offline_only=true"
        self._visit(url, "/topology/?offline_only", "topology-live")

    @task(4)
    def workflows(self) -> None:
        self._visit("/workflows/", "/workflows/", "wf-list")

    @task(3)
    def workflow(self) -> None:
        ids = [wf["id"] for wf in _workflows if "id" in wf]
        if not ids:  # none requested yet: the list instead
            return self.workflows()
        self._visit(f"/workflows/{ids[-1]}/", "/workflows/<id>/", None)

    @task(4)
    def audit(self) -> None:
        self._visit("/audit/", "/audit/", None)


class ApiUser(_SignedIn):
    """A script with a session, reading the inventory routes."""

    weight = 9
    wait_time = between(1, 5)

    @task(3)
    def clusters(self) -> None:
        _get(self.client, "/api/v1/clusters", "/api/v1/clusters")

    @task(3)
    def brokers(self) -> None:
        c = _cluster()
        _get(
            self.client, f"/api/v1/clusters/{c['name']}/brokers", "/api/v1/clusters/{name}/brokers"
        )

    @task(3)
    def topics(self) -> None:
        c = _cluster()
        url = f"/api/v1/clusters/{c['name']}/topics?page={random.randint(1, 20)}"
        _get(self.client, url, "/api/v1/clusters/{name}/topics")

    @task(4)
    def topic(self) -> None:
        c = _cluster()
        url = f"/api/v1/clusters/{c['name']}/topics/{random.choice(c['topics'])}"
        _get(self.client, url, "/api/v1/clusters/{name}/topics/{topic}")

    @task(2)
    def partition_for_key(self) -> None:
        c = _cluster()
        query = urlencode(
            {"topic": random.choice(c["topics"]), "key": f"order-{random.randint(1, 10**6)}"}
        )
        url = f"/api/v1/clusters/{c['name']}/partition-for-key?{query}"
        _get(self.client, url, "/api/v1/clusters/{name}/partition-for-key")

    @task(1)
    def groups(self) -> None:
        c = _cluster()
        _get(self.client, f"/api/v1/clusters/{c['name']}/groups", "/api/v1/clusters/{name}/groups")

    @task(1)
    def dir_history(self) -> None:
        c = _cluster()
        broker, log_dir = random.choice(c["dirs"]).split(":", 1)
        url = f"/api/v1/clusters/{c['name']}/brokers/{broker}/log-dirs/{log_dir}/history?range=24h"
        _get(self.client, url, "/api/v1/clusters/{name}/brokers/{b}/log-dirs/{d}/history")

    @task(1)
    def topic_history(self) -> None:
        c = _cluster()
        url = f"/api/v1/clusters/{c['name']}/topics/{random.choice(c['topics'])}/history?range=1h"
        _get(self.client, url, "/api/v1/clusters/{name}/topics/{topic}/history")

    @task(2)
    def open_workflows(self) -> None:
        _get(self.client, "/api/v1/workflows?state=open", "/api/v1/workflows")

    @task(1)
    def audit(self) -> None:
        _get(self.client, "/api/v1/audit", "/api/v1/audit")


class MachineUser(FastHttpUser):
    """Prometheus (a viewer's API token) and a load balancer's health probe: not signed in."""

    fixed_count = 1
    wait_time = constant(5)

    def on_start(self) -> None:
        self.scrapes = 0

    @task
    def probe(self) -> None:
        _get(self.client, "/api/v1/health", "/api/v1/health")
        self.scrapes += 1
        if self.scrapes % 3 == 1:  # every 15 s
            auth = {"Authorization": f"Bearer {CONFIG['metrics_token']}"}
            _get(self.client, "/metrics", "/metrics", auth)


class ChangeUser(FastHttpUser):
    """An operator requests a workflow and an approver approves it, 2 an hour."""

    fixed_count = 1
    wait_time = constant(1)

    def on_start(self) -> None:
        sign_in(self.client, "operator")
        self.approver = FastHttpSession(  # a second browser, with FastHttpUser's timeouts
            self.host,
            request_event=self.environment.events.request,
            user=self,
            network_timeout=self.network_timeout,
            connection_timeout=self.connection_timeout,
        )
        sign_in(self.approver, "approver")
        self.kinds = itertools.cycle(CONFIG["workflows"])

    @task
    def change(self) -> None:
        start = _window.get("start")
        due = None if start is None else start + CONFIG["workflow_first_after"]
        due = due and due + len(_workflows) * CONFIG["workflow_interval"]
        if due is None or time.time() < due:
            return
        spec = next(self.kinds)
        self._run(spec, {"kind": spec["kind"], "topic": spec["topic"], "state": "not requested"})

    def _run(self, spec: dict, record: dict) -> None:
        fields = dict(spec)
        _get(self.client, f"/workflows/new/?{urlencode(fields)}", "/workflows/new/ (check request)")
        requested = time.time()
        r = _form(
            self.client,
            "/workflows/new/",
            "POST /workflows/new/ (request)",
            {**fields, "reason": "bench: incident drill"},
        )
        match = re.search(r"/workflows/(\d+)/", r.headers.get("Location") or "")
        if not match:
            record["state"] = f"request refused (HTTP {r.status_code})"
            _workflows.append(record)
            return
        pk = int(match.group(1))
        record["id"] = pk
        _workflows.append(record)
        state, plan_hash = self._follow(pk, record, until_not=("planning",))
        record["planned_seconds"] = round(time.time() - requested, 1)
        if state != "pending_approval":
            record["state"] = state
            return
        _get(self.approver, f"/workflows/{pk}/approve/", "/workflows/<id>/approve/")
        approved = time.time()
        _form(
            self.approver,
            f"/workflows/{pk}/approve/",
            "POST /workflows/<id>/approve/ (approve)",
            {"decision": "approve", "plan_hash": plan_hash, "comment": "bench"},
        )
        state, _ = self._follow(pk, record, until_not=("approved", "running", "waiting"))
        record["state"] = state
        record["approve_to_end_seconds"] = round(time.time() - approved, 1)

    def _follow(self, pk: int, record: dict, until_not: tuple[str, ...]) -> tuple[str, str]:
        """Poll the workflow page's live panel (as the page does, every 2 s) and the API's
        answer until its state leaves ``until_not``; at most 10 minutes."""
        deadline = time.time() + 600
        state, plan_hash = "", ""
        while time.time() < deadline:
            _get(
                self.client,
                f"/workflows/{pk}/live/",
                "/workflows/<id>/live/ (htmx poll)",
                {"HX-Request": "true", "HX-Target": "wf-live"},
            )
            with self.client.get(
                f"/api/v1/workflows/{pk}", name="/api/v1/workflows/{id}", catch_response=True
            ) as r:
                if r.status_code != 200:
                    r.failure(f"HTTP {r.status_code}")
                else:
                    body = r.json()
                    state, plan_hash = body["state"], body.get("plan_hash") or ""
            if state and state not in until_not:
                return state, plan_hash
            gevent.sleep(2)
        return f"still {state} after 10 minutes", plan_hash
