"""Kafka's internal topics (``Topic.isInternal``) are marked internal on the topic list and the
topic page; a topic that merely starts with ``__`` is not."""

from __future__ import annotations

import pytest

from tests.console.conftest import sync

pytestmark = pytest.mark.django_db

BADGE = 'class="badge internal" data-internal'


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def test_consumer_offsets_and_transaction_state_are_shown_as_internal(
    viewer_client, cluster, builder
):
    builder.add_topic("__consumer_offsets", partitions=2, rf=1)
    builder.add_topic("__transaction_state", partitions=1, rf=1)
    builder.add_topic("__my_app_state", partitions=1, rf=1)
    sync(cluster, builder)

    listing = viewer_client.get("/topics/?cluster=local&name=__").content.decode()
    rows = {
        line.split('">', 1)[1].split("</a>", 1)[0]: BADGE in line
        for line in listing.splitlines()
        if 'id="topic-' in line
    }
    assert rows == {
        "__consumer_offsets": True,
        "__my_app_state": False,
        "__transaction_state": True,
    }

    for name, internal in [("__consumer_offsets", True), ("__my_app_state", False)]:
        html = viewer_client.get(f"/topics/local/{name}/").content.decode()
        h1 = html.split("<h1>", 1)[1].split("</h1>", 1)[0]
        assert (BADGE in h1) is internal
