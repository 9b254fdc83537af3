"""Over-long inputs get Strata's own answer, never the web server's raw refusal (issue #15: a
5,000-character topic on the request form met gunicorn's "Request Line is too large"; a
20,000-character key lookup got 414 and the page kept the previous result).

- "Check request" posts what was typed, so nothing typed travels in the request line; every input
  stops at the length the server takes (a topic at Kafka's 249, a cluster at its 100), and the
  server says so for a longer value sent anyway.
- The key lookup stays a GET (a result worth a link): its longest key fits gunicorn's request
  line whatever its characters, and the server says so for a longer one.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.urls import reverse
from gunicorn.config import LimitRequestLine

from console.models import Cluster, Topic
from console.views import MAX_KEY_CHARS
from workflows.kinds import CLUSTER_FIELD
from workflows.kinds.schema import form_fields
from workflows.kinds.tiering_types import DisableParams
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

CHECK = {"kind": "disable_tiering", "cluster": "local", "topic": "orders", "check": "1"}


@pytest.fixture
def browser_client(client, viewer):
    client.force_login(viewer)
    return client


def test_the_request_form_posts_its_check_and_stops_at_the_server_limits(browser_client, synced):
    html = browser_client.get("/workflows/new/", {"kind": "disable_tiering"}).content.decode()
    assert '<form class="card" method="post" aria-label="Parameters" data-params-form>' in html
    assert '<input type="hidden" name="check" value="1">' in html
    assert 'id="f-cluster" name="cluster" value="" maxlength="100"' in html
    assert 'id="f-topic" name="topic" value="" maxlength="249"' in html


def test_checking_a_request_shows_it_and_requests_nothing(browser_client, synced):
    response = browser_client.post("/workflows/new/", CHECK)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="target">topic:orders<' in html
    assert not Workflow.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("topic", "t" * 5000, "topic must be 1 to 249 printable characters (it has 5,000)."),
        ("cluster", "c" * 101, "cluster must be 1 to 100 printable characters (it has 101)."),
    ],
)
def test_an_overlong_value_is_refused_with_its_limit(browser_client, synced, field, value, says):
    response = browser_client.post("/workflows/new/", {**CHECK, field: value})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Workflow.objects.exists()


def test_the_fields_take_what_the_inventory_holds():
    assert CLUSTER_FIELD.max_length == Cluster._meta.get_field("name").max_length
    topic = next(f for f in form_fields(DisableParams) if f.name == "topic")
    assert topic.max_length == Topic._meta.get_field("name").max_length == 249


def test_key_lookup_echoes_the_key_and_refuses_an_overlong_one(browser_client, synced):
    html = browser_client.get("/topics/local/orders/?key=customer-7").content.decode()
    assert 'data-testid="looked-up-key">customer-7<' in html
    assert f'maxlength="{MAX_KEY_CHARS}"' in html
    key = "k" * (MAX_KEY_CHARS + 1)
    html = browser_client.get("/topics/local/orders/", {"key": key}).content.decode()
    assert f"A key of at most {MAX_KEY_CHARS} characters, please (this one has 401)." in html
    assert "data-partition-now=" not in html


def test_the_longest_key_lookup_fits_gunicorns_request_line():
    """The worst case: the longest cluster and topic names, and a key of characters that take 3
    UTF-8 bytes (9 once percent-encoded), as the browser sends the lookup form."""
    path = reverse("console:topic-detail", args=["c" * 100, "t" * 249])
    line = f"GET {path}?{urlencode({'key': '界' * MAX_KEY_CHARS})} HTTP/1.1"
    assert len(line.encode()) <= LimitRequestLine.default
