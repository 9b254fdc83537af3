"""Pages, the API and health show a cluster's backend and capabilities (issue #35): what a kafka
cluster cannot report (probe latency, KIP-963's gauges) reads "not available for this cluster"
with the reason, never 0; what it cannot run is shown unsupported with why; its sync error is a
"Kafka bootstrap error"."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from console.models import Cluster
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def as_kafka(cluster: Cluster, **fields) -> Cluster:
    """The synced inventory as a kafka cluster's sync would leave it: the pages read the same
    rows whichever source filled them."""
    Cluster.objects.filter(pk=cluster.pk).update(
        backend="kafka",
        controller_url="",
        secret_ref="",
        kafka_bootstrap="127.0.0.1:19092",
        kafka_client_config={"security_protocol": "PLAINTEXT"},
        **fields,
    )
    cluster.refresh_from_db()
    return cluster


def test_the_overview_and_the_cluster_page_show_each_clusters_backend(viewer_client, synced):
    Cluster.objects.create(name="prod", backend="kafka", kafka_bootstrap="kafka-1:9092")
    html = viewer_client.get("/").content.decode()
    backends = re.findall(r'data-testid="backend"><a href="/clusters/([\w-]+)/">(\w+)<', html)
    assert backends == [("local", "agents"), ("prod", "kafka")]
    page = viewer_client.get("/clusters/local/").content.decode()
    assert 'data-testid="controller-url"><code>http://127.0.0.1:1</code>' in page
    assert page.count('data-status="supported"') == 10
    assert "data-runnable-kinds" not in page  # every kind runs on agents


def test_a_kafka_cluster_page_never_raises_before_its_first_sync(viewer_client):
    Cluster.objects.create(name="prod", backend="kafka", kafka_bootstrap="kafka-1:9092")
    page = viewer_client.get("/clusters/prod/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="kafka-bootstrap"><code>kafka-1:9092</code>' in html
    assert 'data-testid="never-synced"' in html
    assert re.search(
        r'data-capability="tiered_offsets" data-status="unknown">.*?Not known until the first '
        r"sync",
        html,
        re.S,
    )
    assert re.search(r'data-capability="tiered_epoch" data-status="unsupported"', html)
    assert re.search(r'data-capability="leader_election" data-status="unknown"', html)
    assert re.search(r'data-capability="partition_expansion" data-status="unknown"', html)
    assert (
        'data-runnable-kinds="elect_leaders expand_partitions recover_log_dir disable_tiering enable_tiering"'
        in html
    )
    for url in ("/", "/topics/?cluster=prod", "/brokers/?cluster=prod", "/topology/?cluster=prod"):
        assert viewer_client.get(url).status_code == 200, url


def test_a_kafka_clusters_sync_error_is_a_kafka_bootstrap_error_on_its_page_and_in_health(
    client, viewer_client, synced
):
    as_kafka(
        synced,
        controller_error="NoBrokersAvailable: no broker of 127.0.0.1:19092 answered",
        controller_error_at=timezone.now(),
    )
    html = viewer_client.get("/clusters/local/").content.decode()
    error = re.search(r'data-testid="sync-error">(.*?)</div>', html, re.S).group(1)
    assert "Kafka bootstrap error" in error and "no broker of 127.0.0.1:19092 answered" in error
    assert "Kafka bootstrap" in viewer_client.get("/").content.decode()
    health = client.get("/api/v1/health").json()
    assert health["clusters"]["local"]["backend"] == "kafka"
    assert health["clusters"]["local"]["sync"].startswith(
        "Kafka bootstrap error: NoBrokersAvailable (since "
    )
    assert "127.0.0.1" not in str(health)  # public: the code, not the hosts
    api = viewer_client.get("/api/v1/clusters").json()["clusters"][0]
    assert api["sync_error_source"] == "Kafka bootstrap"


def test_an_agents_clusters_health_says_controller_error_or_ok(client, synced):
    assert client.get("/api/v1/health").json()["clusters"] == {
        "local": {"backend": "agents", "sync": "ok"}
    }
    Cluster.objects.filter(pk=synced.pk).update(
        controller_error="ConnectError: refused", controller_error_at=timezone.now()
    )
    sync_text = client.get("/api/v1/health").json()["clusters"]["local"]["sync"]
    assert sync_text.startswith("controller error: ConnectError (since ")


def test_the_clusters_api_gives_backend_bootstrap_and_capabilities(viewer_client, synced):
    Cluster.objects.create(
        name="prod",
        backend="kafka",
        kafka_bootstrap="kafka-1:9092",
        backend_features={"api_versions": {"2": [0, 8]}},
    )
    body = viewer_client.get("/api/v1/clusters").json()["clusters"]
    local, prod = body
    assert (local["backend"], local["kafka_bootstrap"]) == ("agents", "")
    assert (prod["backend"], prod["kafka_bootstrap"], prod["controller_url"]) == (
        "kafka",
        "kafka-1:9092",
        "",
    )
    # the agents' API carries everything but KIP-966's ELR
    assert [c["key"] for c in local["capabilities"] if not c["supported"]] == [
        "eligible_leader_replicas"
    ]
    by_key = {c["key"]: c for c in prod["capabilities"]}
    assert set(by_key) == {
        "tiered_epoch",
        "linear_hashing",
        "log_dir_reset",
        "cordon",
        "tiered_offsets",
        "probe_latency",
        "restart_control",
        "log_dirs",
        "leader_election",
        "partition_expansion",
        "eligible_leader_replicas",
    }
    assert (
        by_key["tiered_offsets"]["supported"] is False
        and "v8" in by_key["tiered_offsets"]["reason"]
    )
    assert by_key["cordon"] == {
        "key": "cordon",
        "label": by_key["cordon"]["label"],
        "supported": False,
        "known": False,
        "reason": "not known until the first sync",
    }


def test_the_brokers_page_of_a_kafka_cluster_shows_probe_latency_as_not_available(
    viewer_client, synced
):
    assert " · probe 1.5 ms" in viewer_client.get("/brokers/").content.decode()
    as_kafka(synced)
    html = viewer_client.get("/brokers/").content.decode()
    assert "probe 1.5 ms" not in html and "probe 0" not in html
    assert 'data-not-available="probe_latency"' in html
    assert "Probe latency: not available for this cluster." in html and "JMX" in html


def test_the_topic_page_of_a_kafka_cluster_shows_kip_963_gauges_and_epoch_as_not_available(
    viewer_client, synced
):
    agents = viewer_client.get("/topics/local/orders/").content.decode()
    assert 'id="tier-metrics"' in agents and 'data-not-available="tiered_epoch"' not in agents
    assert "KIP-963 copy and delete lag, remote log size: not available" not in agents
    as_kafka(synced)
    html = viewer_client.get("/topics/local/orders/").content.decode()
    assert 'id="tier-metrics"' not in html
    assert "KIP-963 copy and delete lag, remote log size: not available for this cluster." in html
    assert re.search(r'id="tiered-epoch"><span [^>]*data-not-available="tiered_epoch"', html)
    body = viewer_client.get("/api/v1/clusters/local/topics/orders").json()
    assert body["tiering"]["remote_copy_lag_bytes"] is None
    assert "JMX" in body["tiering"]["not_available"]
    assert body["partitions"][0]["remote_log_size_bytes"] is None
    # Kafka gives a partition's remote size only as RemoteLogSizeBytes (JMX): null, not 0.
    assert body["tiering"]["remote_bytes"] is None
    assert body["partitions"][0]["remote_bytes"] is None
    assert body["partitions"][0]["local_bytes"] > 0


def test_the_topic_api_of_an_agents_cluster_gives_remote_bytes(viewer_client, synced):
    body = viewer_client.get("/api/v1/clusters/local/topics/orders").json()
    assert body["tiering"]["remote_bytes"] > 0 and body["tiering"]["not_available"] == ""
    assert all(isinstance(p["remote_bytes"], int) for p in body["partitions"])
    assert sum(p["remote_bytes"] for p in body["partitions"]) == body["tiering"]["remote_bytes"]


def test_requests_a_kafka_cluster_cannot_run_are_shown_unsupported_with_why(
    client, operator, synced, builder
):
    builder.fail_log_dir(1, "logdir-0")
    sync(synced, builder)
    as_kafka(synced)
    client.force_login(operator)
    topic = client.get("/topics/local/orders/").content.decode()
    brokers = client.get("/brokers/").content.decode()
    assert "/workflows/new?" not in topic + brokers  # no link to a request it cannot run
    assert "Disable tiering is not supported on this cluster." in topic
    assert "Kafka shipped KIP-950 without a tiered epoch" in topic
    assert "Expand partitions is not supported on this cluster." in topic
    assert "never shipped KIP-253" in topic
    assert "Recover log dir (replace disk) is not supported on this cluster." in brokers
    form = client.get(
        "/workflows/new?kind=disable_tiering&cluster=local&topic=orders", follow=True
    ).content.decode()
    assert "Disable tiering (KIP-950) is not supported on cluster local: Tiered offsets" in form
    assert 'data-testid="submit-request"' not in form
    # once a sync learnt the brokers answer ElectLeaders, preferred election is the one request
    as_kafka(synced, backend_features={"api_versions": {"43": [0, 2]}})
    topic = client.get("/topics/local/orders/").content.decode()
    assert re.findall(r'href="/workflows/new\?kind=(\w+)', topic) == ["elect_leaders"]
    # once it learnt DescribeLogDirs, the failed dir offers its recovery by replace only (a
    # dir leaves Kafka's static log.dirs by hand)
    as_kafka(synced, backend_features={"api_versions": {"35": [0, 4]}})
    brokers = client.get("/brokers/").content.decode()
    links = re.findall(r'href="/workflows/new\?kind=recover_log_dir[^"]*mode=(\w+)"', brokers)
    assert links == ["replace"]


def test_metrics_leave_out_the_kip963_gauges_of_a_kafka_cluster_rather_than_export_zero(
    viewer_client, synced
):
    agents = viewer_client.get("/metrics").content.decode()
    assert 'strata_cluster_remote_copy_lag_bytes{cluster="local"}' in agents
    assert re.search(
        r'strata_topic_remote_log_size_bytes\{cluster="local",topic="orders"\}', agents
    )
    as_kafka(synced)
    body = viewer_client.get("/metrics").content.decode()
    assert 'strata_cluster_remote_copy_lag_bytes{cluster="local"}' not in body
    assert 'strata_topic_remote_log_size_bytes{cluster="local"' not in body
    assert 'strata_cluster_fenced_remote_bytes{cluster="local"}' in body  # not a KIP-963 gauge
    assert 'strata_partitions{cluster="local",health="all"}' in body


def test_the_topic_list_of_a_kafka_cluster_shows_epoch_and_remote_bytes_as_not_available(
    viewer_client, synced
):
    agents = viewer_client.get("/topics/?cluster=local").content.decode()
    assert "data-not-available" not in agents
    as_kafka(synced)
    html = viewer_client.get("/topics/?cluster=local").content.decode()
    assert html.count("data-not-available") == 2 * html.count('id="topic-')
    assert "Epoch and remote bytes: not available for this cluster." in html


def _section(html: str, heading_id: str) -> str:
    """The card whose heading has ``heading_id``, up to the next card."""
    start = html.index(f'id="{heading_id}"')
    end = html.find('<section class="card"', start)
    return html[start : end if end > 0 else len(html)]


def test_the_topic_page_of_a_kafka_cluster_shows_remote_bytes_as_not_available(
    viewer_client, synced
):
    agents = viewer_client.get("/topics/local/orders/").content.decode()
    assert 'data-not-available="remote_bytes"' not in agents
    assert "Bytes: remote " in agents and '<th scope="row">Remote bytes</th>' in agents
    agents_history = _section(agents, "topic-history-h")
    assert "Bytes: remote, local, fenced pending purge" in agents_history
    assert 'class="line remote"' in agents_history and "remote: now" in agents_history
    assert re.search(r'id="remote-local-bytes">\d[^<]* / ', agents)
    as_kafka(synced)
    html = viewer_client.get("/topics/local/orders/").content.decode()
    assert "Bytes: remote " not in html and "0\xa0bytes /" not in html
    assert re.search(r'id="remote-local-bytes"><span [^>]*data-not-available="remote_bytes"', html)
    assert "Remote bytes (KIP-963 RemoteLogSizeBytes" in html
    spread = _section(html, "tiering-h")
    assert re.search(
        r'Remote bytes</th><td colspan="4"[^>]*data-not-available="remote_bytes"', spread
    )
    parts = _section(html, "parts-h")
    assert "Remote / local" not in parts and "(remote: n/a)" in parts
    assert parts.count("Remote bytes per partition: not available for this cluster") == 1
    history = _section(html, "topic-history-h")
    assert "Bytes: local, fenced pending purge" in history
    assert 'data-not-available="remote_bytes"' in history
    assert 'class="line remote"' not in history and "remote: now" not in history
    assert "local: now" in history


def test_the_topic_page_of_a_kafka_cluster_shows_kip_950_task_states_as_not_available(
    viewer_client, synced
):
    agents = viewer_client.get("/topics/local/orders/").content.decode()
    assert "Copier running / stopped" in agents and 'data-not-available="task_states"' not in agents
    as_kafka(synced)
    html = viewer_client.get("/topics/local/orders/").content.decode()
    assert "Copier running / stopped" not in html
    assert "Expiration running / stopped / external" not in html
    cells = html.count('<td class="note" data-not-available="task_states">n/a</td>')
    assert cells == 3  # one per broker
    assert html.count("Copier and expiration task states (KIP-950): not available") == 1
    assert "RLMCopyTask" in html


def test_the_topic_page_of_a_kafka_cluster_replaces_kip_253_panels_by_one_not_available(
    viewer_client, synced
):
    agents = viewer_client.get("/topics/local/orders/?key=k1").content.decode()
    for heading in ("Split tree (KIP-253)", "In-order delivery", "Key → partition"):
        assert heading in agents
    assert "data-partition-now=" in agents and 'id="kip253-not-available"' not in agents
    as_kafka(synced)
    html = viewer_client.get("/topics/local/orders/?key=k1").content.decode()
    for heading in ("Split tree (KIP-253)", "In-order delivery", "Key → partition"):
        assert heading not in html
    assert "data-partition-now=" not in html and 'name="key"' not in html
    panel = _section(html, "kip253-h")
    assert 'data-not-available="linear_hashing"' in panel
    assert "Kafka never shipped KIP-253" in panel


def test_the_topic_list_and_history_apis_of_a_kafka_cluster_give_remote_bytes_null_not_0(
    viewer_client, synced
):
    def read() -> tuple[dict, dict]:
        listed = viewer_client.get("/api/v1/clusters/local/topics?name=orders").json()
        history = viewer_client.get("/api/v1/clusters/local/topics/orders/history").json()
        [topic] = listed["results"]
        return topic, history["points"][-1]

    topic, point = read()
    assert topic["remote_bytes"] > 0 and point["remote_bytes"] > 0
    assert isinstance(point["remote_copy_lag_bytes"], int)
    as_kafka(synced)
    topic, point = read()
    # Kafka reports remote bytes only as KIP-963's RemoteLogSizeBytes (JMX): the pages say
    # "not available for this cluster", the API null whatever the rows hold (a sync writes 0).
    assert topic["remote_bytes"] is None and topic["local_bytes"] > 0
    assert point["remote_bytes"] is None and point["local_bytes"] > 0
    assert point["remote_copy_lag_bytes"] is None and point["remote_delete_lag_bytes"] is None
    assert isinstance(point["fenced_remote_bytes"], int)  # Strata's own, not a JMX gauge
