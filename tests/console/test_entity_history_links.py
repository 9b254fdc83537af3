"""A topic's page and a failed dir's incident panel link to their audit history and their
workflows (#15), each list filtered to that topic, dir or broker."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

from audit import trail
from audit.choices import AuditContext
from tests.console.conftest import sync
from workflows.models import Workflow

pytestmark = pytest.mark.django_db


def _links(html: str, label: str) -> list[str]:
    """Filtered lists linked as ``label`` (not the menu's plain "Workflows")."""
    return [
        href.replace("&amp;", "&")
        for href in re.findall(rf'<a href="([^"]+\?[^"]+)">{label}</a>', html)
    ]


def test_the_topic_page_links_to_the_topics_audit_history_and_workflows(
    client, viewer, operator, synced
):
    wf = Workflow.objects.create(
        kind="expand_partitions", cluster="local", target="topic:orders", requester=operator
    )
    with transaction.atomic():
        event = trail.record(
            "test.partitions", context=AuditContext.CLI, target_type="topic", target_id="orders",
            workflow=wf,
        )  # fmt: skip
    client.force_login(viewer)
    html = client.get("/topics/local/orders/").content.decode()
    [audit] = _links(html, "Audit history")
    [workflows] = _links(html, "Workflows")
    assert audit == "/audit/?target=topic:local/orders"
    assert workflows == "/workflows/?cluster=local&target=topic:orders"
    assert f'href="/audit/{event.seq}/"' in client.get(audit).content.decode()
    assert f"/workflows/{wf.pk}/" in client.get(workflows).content.decode()


def test_the_incident_panel_links_to_the_dirs_and_the_brokers_history(
    client, viewer, synced, builder
):
    builder.fail_log_dir(2, "logdir-1", error="Input/output error")
    sync(synced, builder)
    client.force_login(viewer)
    html = client.get("/brokers/?dir=2:logdir-1").content.decode()
    assert _links(html, "Audit history") == [
        "/audit/?target=log_dir:local/2:logdir-1",
        "/audit/?target=broker:local/2",
    ]
    # a dir's recovery holds its whole broker: both list the broker's workflows
    assert _links(html, "Workflows") == ["/workflows/?cluster=local&target=broker:2"] * 2
    for url in _links(html, "Audit history") + _links(html, "Workflows"):
        assert client.get(url).status_code == 200, url
