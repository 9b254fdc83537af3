"""Pages: render for a viewer, show data age and staleness, refresh their live panel alone.
Their query counts are pinned in test_query_counts.py."""

from __future__ import annotations

import re

import pytest

from broker_agent.contract.choices import TopicConfig
from console.models import Broker, LogDir, Partition, Replica
from tests.console.conftest import sync
from tests.console.factories import ClusterBuilder

pytestmark = pytest.mark.django_db

PAGES = [
    ("/", "clusters-live"),
    ("/topics/", "topics-live"),
    ("/topics/local/orders/", "topic-live"),
    ("/brokers/", "brokers-live"),
    ("/topology/", "topology-live"),
]


@pytest.fixture
def browser_client(client, viewer):
    client.force_login(viewer)
    return client


@pytest.mark.parametrize(("url", "panel"), PAGES)
def test_page_shows_its_live_panel_with_data_age(browser_client, synced, url, panel):
    html = browser_client.get(url).content.decode()
    assert f'id="{panel}"' in html
    assert 'class="age" data-age=' in html and "data from" in html


@pytest.mark.parametrize(("url", "panel"), PAGES)
def test_htmx_refresh_returns_only_the_live_panel(browser_client, synced, url, panel):
    response = browser_client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=panel)
    html = response.content.decode()
    assert html.lstrip().startswith("<") and f'id="{panel}"' in html
    assert "<html" not in html and "<nav" not in html.split(panel)[0]


def test_brokers_page_shows_offline_dir_counts_and_incident(browser_client, synced, builder):
    builder.fail_log_dir(2, "logdir-1", error="Input/output error")
    sync(synced, builder)
    html = browser_client.get("/brokers/").content.decode()
    assert 'data-dir="2:logdir-1" data-state="OFFLINE"' in html
    row = re.search(r'<tr data-broker="2">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r"data-offline-dirs>1<", row)
    assert "Incident: broker 2 logdir-1" in html and "Input/output error" in html


def test_replicas_of_a_dir_that_failed_before_the_broker_started_are_listed_under_it(
    browser_client, synced, builder
):
    """KIP-112: after a restart with a failed dir the broker knows its missing replicas only as
    offline with no dir; the offline dir's incident panel lists them, marked dir unknown."""
    on_dir = sum(
        1 for t in builder.topics.values() for (_p, b), r in t.reps.items()
        if b == 2 and r.log_dir == "logdir-1"
    )  # fmt: skip
    builder.restart_with_failed_dir(2, "logdir-1")
    sync(synced, builder)
    html = browser_client.get("/brokers/?dir=2:logdir-1").content.decode()
    assert f"({on_dir} with no dir known: the broker started" in html
    assert html.count("dir unknown</small>") == min(on_dir, 25)
    healthy = browser_client.get("/brokers/?dir=2:logdir-0").content.decode()
    assert "dir unknown</small>" not in healthy  # only an offline dir takes them


def test_the_incident_panel_counts_the_dirs_partitions_and_pages_its_replicas(
    browser_client, cluster
):
    """The panel's figures and its pages of 25 replicas come from one query (#17): the counts
    equal those of the dir's partitions counted apart, pages follow (topic, partition) order,
    a page past the end (or not a number) shows the last (the first)."""
    b = ClusterBuilder(brokers=3, log_dirs=2)
    b.add_topic("orders", partitions=120, rf=3, configs={TopicConfig.MIN_INSYNC_REPLICAS: "3"})
    b.add_topic("solo", partitions=6, rf=1)  # solo-1 is broker 2's alone, on logdir-1
    sync(cluster, b)
    b.fail_log_dir(2, "logdir-1")  # the next sync sees the leaders move
    sync(cluster, b)
    d = LogDir.objects.get(broker__broker_id=2, name="logdir-1")
    parts = Partition.objects.filter(
        id__in=Replica.objects.filter(log_dir=d).values("partition_id")
    )
    expected = [f"{t}-{p}" for t, p in parts.order_by("topic_name", "partition").values_list(
        "topic_name", "partition"
    )]  # fmt: skip
    assert len(expected) == 61 and expected[-1] == "solo-1"  # orders' odd partitions, solo-1
    counts = {
        "Replicas on this dir": parts.count(),
        "Partitions that lost their leader here": parts.filter(previous_leader=2)
        .exclude(leader=2)
        .count(),
        "Now without a leader": parts.filter(offline=True).count(),
        "Under min ISR": parts.filter(under_min_isr=True).count(),
    }
    assert counts["Now without a leader"] == 1 and counts["Under min ISR"] >= 60
    assert counts["Partitions that lost their leader here"] >= 20

    def panel(page: str) -> tuple[list[str], dict[str, int], str]:
        html = browser_client.get(f"/brokers/?dir=2:logdir-1&page={page}").content.decode()
        section = html.split('id="incident"', 1)[1].split("</section>", 1)[0]
        rows = re.findall(r'<tr><td><a href="[^"]*">([^<]+)</a></td>', section)
        figures = {k: int(v) for k, v in re.findall(r"<dt>([^<]+)</dt><dd>(\d+)", section)}
        return rows, figures, re.search(r"Page \d+ of \d+", section).group(0)

    assert panel("1") == (expected[:25], counts, "Page 1 of 3")
    assert panel("2") == (expected[25:50], counts, "Page 2 of 3")
    assert panel("3") == (expected[50:], counts, "Page 3 of 3")
    assert panel("99") == panel("3")  # past the end: the last page
    assert panel("x") == panel("0") == panel("1")


def test_stale_agent_is_named_with_its_last_good_time(browser_client, synced, builder):
    sync(synced, builder, down={2})
    html = browser_client.get("/brokers/").content.decode()
    assert "Stale data." in html and "broker 2" in html and "last good" in html


def test_topic_page_shows_tiering_offsets_bar_and_lookup(browser_client, synced, builder):
    builder.disable_tiering("orders", policy="delete")
    sync(synced, builder)
    html = browser_client.get("/topics/local/orders/?key=customer-7").content.decode()
    assert 'id="tiered-state">DISABLING<' in html and 'id="tiered-epoch">1<' in html
    assert (
        'data-remote-start="0" data-remote-end="399" data-local-start="200" data-log-end="1000"'
        in html
    )
    assert "data-partition-now=" in html
    assert 'role="tree"' in html


def test_operator_sees_workflow_buttons_viewer_does_not(client, synced, viewer, operator):
    client.force_login(operator)
    html = client.get("/topics/local/orders/").content.decode()
    assert "/workflows/new?kind=disable_tiering&amp;cluster=local&amp;topic=orders" in html
    client.force_login(viewer)
    assert "/workflows/new?" not in client.get("/topics/local/orders/").content.decode()


def test_topics_filters_and_sort(browser_client, synced):
    html = browser_client.get("/topics/?tiered_state=ENABLED").content.decode()
    assert ">orders</a>" in html and ">payments</a>" not in html
    html = browser_client.get("/topics/?sort=-remote_bytes").content.decode()
    assert html.index(">orders</a>") < html.index(">payments</a>")


def test_topology_offline_only_filter(browser_client, synced, builder):
    builder.fail_log_dir(1, "logdir-0")
    sync(synced, builder)
    html = browser_client.get("/topology/?offline_only=true").content.decode()
    assert 'class="cell offline"' in html
    assert "audit.log-0" not in html or "offline" in html


def _matrix_rows(html: str) -> list[str]:
    return re.findall(r'<th scope="row"><a href="[^"]*">([^<]+)</a>', html)


@pytest.mark.parametrize("query", ["", "&topic=t1"])
def test_topology_deep_pages_list_partitions_in_order_without_gaps(browser_client, cluster, query):
    """Pages found from the topics' partition counts (not an OFFSET) still walk every
    partition in (topic, partition) order exactly once, and a page past the end shows the
    last."""
    b = ClusterBuilder(brokers=3, log_dirs=1)
    sizes = {"t0": 7, "t1": 30, "t10": 3, "t2": 45, "t3": 1}
    for name, n in sizes.items():
        b.add_topic(name, partitions=n, rf=2)
    sync(cluster, b)
    wanted = sorted(
        (name, p) for name, n in sizes.items() for p in range(n) if "t1" in name or not query
    )
    seen = []
    for page in range(1, 10):
        html = browser_client.get(f"/topology/?page={page}{query}").content.decode()
        rows = _matrix_rows(html)
        if not rows or (seen and rows[0] == seen[0]):
            break
        seen += rows
        if len(rows) < 50:
            break
    assert seen == [f"{name}-{p}" for name, p in wanted]
    last = _matrix_rows(browser_client.get(f"/topology/?page=999{query}").content.decode())
    assert last == seen[len(seen) - len(last) :] and last


def test_pages_without_a_cluster_explain_how_to_register_one(browser_client):
    for url in ("/", "/topics/", "/brokers/", "/topology/"):
        assert "register_cluster" in browser_client.get(url).content.decode()


def test_workflow_buttons_name_real_workflow_kinds(client, operator, synced, builder):
    """The request buttons open forms of kinds the workflows app registers, with their fields
    filled in: a tiered topic offers disable_tiering and KIP-253 expand / shrink by one; an
    offline dir offers recover_log_dir in both modes."""
    from workflows.kinds import get_kind

    builder.fail_log_dir(1, "logdir-0")
    sync(synced, builder)
    client.force_login(operator)
    topic = client.get("/topics/local/orders/").content.decode()
    brokers = client.get("/brokers/").content.decode()
    links = re.findall(r'href="/workflows/new\?([^"]+)"', topic + brokers)
    kinds = {re.search(r"kind=(\w+)", link).group(1) for link in links}
    for kind in kinds:
        get_kind(kind)  # raises for a kind nobody registered
    assert "kind=disable_tiering&amp;cluster=local&amp;topic=orders" in topic
    assert "kind=expand_partitions&amp;cluster=local&amp;topic=orders&amp;partitions=7" in topic
    assert "kind=shrink_partitions&amp;cluster=local&amp;topic=orders&amp;partitions=5" in topic
    assert "kind=elect_leaders&amp;cluster=local&amp;topic=orders" in topic
    for mode in ("replace", "remove"):
        assert (
            f"kind=recover_log_dir&amp;cluster=local&amp;broker=1&amp;log_dir=logdir-0&amp;mode={mode}"
            in brokers
        )


def test_overview_names_the_failed_dir_and_links_to_its_incident(browser_client, synced, builder):
    html = browser_client.get("/").content.decode()
    assert 'data-testid="failed-dirs"' not in html
    builder.fail_log_dir(2, "logdir-0")
    sync(synced, builder)
    html = browser_client.get("/").content.decode()
    assert 'data-testid="failed-dirs"' in html and "1 log dir offline" in html
    assert "/brokers/?cluster=local&amp;dir=2:logdir-0" in html
    assert 'data-metric="offline-log-dirs"><a href="/brokers/?cluster=local">1</a>' in html
    incident = browser_client.get("/brokers/?cluster=local&dir=2:logdir-0").content.decode()
    assert "logdir-0" in incident and "Incident" in incident


def test_overview_recent_audit_events_show_a_denied_outcome(browser_client, synced):
    from django.db import transaction

    from audit import trail
    from audit.choices import AuditContext, AuditOutcome

    with transaction.atomic():
        trail.record("test.refused", context=AuditContext.WEB, outcome=AuditOutcome.DENIED)
    html = browser_client.get("/").content.decode()
    assert 'data-outcome="denied"' in html and "test.refused" in html


def test_a_dead_brokers_dirs_read_unknown_not_a_green_online(browser_client, synced, builder):
    sync(synced, builder, down={2})
    html = browser_client.get("/brokers/").content.decode()
    assert 'data-dir="2:logdir-0" data-state="UNKNOWN"' in html
    assert 'data-dir="1:logdir-0" data-state="ONLINE"' in html
    row = re.search(r'<tr data-broker="2">(.*?)</tr>', html, re.S).group(1)
    assert "last seen ONLINE" in row and '<span class="badge online">ONLINE</span></a>' not in row


def test_a_killed_broker_shows_its_replicas_as_down_not_as_offline_replicas(
    browser_client, synced, builder
):
    builder.kill_broker(3)
    sync(synced, builder, down={3})
    row = re.search(
        r'<tr data-broker="3">(.*?)</tr>', browser_client.get("/brokers/").content.decode(), re.S
    ).group(1)
    down = Broker.objects.get(broker_id=3).down_replica_count
    assert down > 0 and f'data-down-replicas="{down}">broker down: {down} replicas' in row


def test_a_slow_probe_of_a_dir_still_online_is_marked(browser_client, synced):
    """A 227 ms probe beside 1.5 ms peers read as a plain ONLINE (issue #15): it is marked with
    the agent's own rule (over 10x the peers' median and 50 ms), before three in a row make the
    agent grade the dir DEGRADED."""
    from broker_agent.contract.probes import slow_probe

    assert slow_probe(227.0, [1.5]) and not slow_probe(40.0, [1.0]) and not slow_probe(9.0, [])
    LogDir.objects.filter(broker__broker_id=3, name="logdir-1").update(probe_latency_ms=227.0)
    html = browser_client.get("/brokers/").content.decode()
    assert html.count("data-slow-probe") == 1
    cell = html[html.index('data-dir="3:logdir-1"') :]
    assert cell.index("data-slow-probe") < cell.index("</td>")


def test_a_fleet_of_brokers_is_paged_and_can_be_narrowed_to_those_with_a_problem(
    browser_client, cluster
):
    """#17: the grid shows 25 brokers a page (``bpage``; a 300-broker fleet is 1,200 dir cells
    with two charts each), ``problems=1`` keeps the brokers not ONLINE or not answering, and the
    incident shown - the first offline dir, or the one ``?dir=`` names - may be on any page."""
    b = ClusterBuilder(brokers=60, log_dirs=2)
    b.add_topic("orders", partitions=6, rf=3)
    b.fail_log_dir(55, "logdir-1")
    sync(cluster, b, down={58})

    def brokers(html: str) -> list[int]:
        return [int(x) for x in re.findall(r'<tr data-broker="(\d+)">', html)]

    html = browser_client.get("/brokers/").content.decode()
    assert brokers(html) == list(range(1, 26)) and "Brokers 1\u201325 of 60" in html
    assert "Incident: broker 55 logdir-1" in html  # not on this page, still the incident
    html = browser_client.get("/brokers/?bpage=3").content.decode()
    assert brokers(html) == list(range(51, 61)) and "Brokers 51\u201360 of 60" in html
    html = browser_client.get("/brokers/?problems=1").content.decode()
    assert brokers(html) == [55, 58] and 'id="brokers-all"' in html
    html = browser_client.get("/brokers/?dir=57:logdir-0").content.decode()
    assert brokers(html) == list(range(1, 26)) and "broker 57 logdir-0" in html
    live = browser_client.get(
        "/brokers/?bpage=2", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="brokers-live"
    ).content.decode()
    assert brokers(live) == list(range(26, 51))


def test_topology_of_a_large_cluster_shows_the_brokers_of_the_page_only(browser_client, cluster):
    """Past TOPOLOGY_ALL_COLUMNS_MAX brokers a page's columns are the brokers holding its
    partitions' replicas, in broker order, and the heading says how many of how many."""
    b = ClusterBuilder(brokers=30, log_dirs=1)
    b.add_topic("wide", partitions=60, rf=2)
    sync(cluster, b)
    html = browser_client.get("/topology/?topic=wide").content.decode()
    heads = [int(x) for x in re.findall(r'<th scope="col" class="cellhead">(\d+)</th>', html)]
    assert heads == sorted(heads) and len(heads) == 30  # 50 partitions x RF 2 touch all 30
    html = browser_client.get("/topology/?topic=wide&page=2").content.decode()
    rows = _matrix_rows(html)
    heads = [int(x) for x in re.findall(r'<th scope="col" class="cellhead">(\d+)</th>', html)]
    assert rows == [f"wide-{p}" for p in range(50, 60)]
    assert 0 < len(heads) < 30 and heads == sorted(heads)
    assert f"\u00d7 {len(heads)} of 30 brokers" in html
    cells = re.findall(r'<td class="cell (leader|in-sync|out-of-sync|offline)"', html)
    assert len(cells) == 2 * len(rows)  # every replica of the page still has its column


def test_topic_page_pages_its_brokers_and_puts_those_needing_a_look_first(browser_client, cluster):
    """Past 25 brokers the per-broker leaders / tasks table is paged (``bpage``), and a broker
    needing a look (here: no snapshot from it) comes first."""
    b = ClusterBuilder(brokers=30, log_dirs=1)
    b.add_topic("wide", partitions=60, rf=2, tiered=True)
    sync(cluster, b, down={17})

    def broker_cells(html: str) -> list[str]:
        table = html[html.index("Preferred (led elsewhere)") :]
        return re.findall(r"<tr><td>(\d+)</td>", table)

    html = browser_client.get("/topics/local/wide/").content.decode()
    first = broker_cells(html)
    assert len(first) == 25 and first[0] == "17"
    assert "no snapshot from this broker" in html and "Brokers 1\u201325 of 30" in html
    assert 'id="topic-brokers-next"' in html and 'hx-target="#topic-live"' in html
    second = broker_cells(browser_client.get("/topics/local/wide/?bpage=2").content.decode())
    assert len(second) == 5
    assert sorted(int(x) for x in first + second) == list(range(1, 31))
