"""The read API: stable paths and field names, ``synced_at`` everywhere (its query counts are
pinned in test_query_counts.py)."""

from __future__ import annotations

import pytest

from accounts.actions import do_issue_token
from broker_agent.contract.hashing import partition_for_key
from tests.console.conftest import sync

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, viewer):
    client.force_login(viewer)
    return client


def test_clusters_lists_health_numbers_and_synced_at(api, synced):
    body = api.get("/api/v1/clusters").json()
    assert body["synced_at"] is not None
    (c,) = body["clusters"]
    assert c["name"] == "local" and c["brokers_online"] == 3 and c["partition_count"] == 10
    assert c["topics_by_tiered_state"]["ENABLED"] == 1


def test_brokers_have_the_stable_fields(api, synced, builder):
    builder.fail_log_dir(1, "logdir-1")
    sync(synced, builder)
    body = api.get("/api/v1/clusters/local/brokers").json()
    assert body["synced_at"] and body["cluster"] == "local"
    b1 = next(b for b in body["brokers"] if b["id"] == 1)
    assert set(b1) >= {
        "id",
        "state",
        "offline_log_directory_count",
        "offline_replica_count",
        "down_replica_count",
        "log_dirs",
    }
    assert b1["state"] == "DEGRADED" and b1["offline_log_directory_count"] == 1
    d = next(d for d in b1["log_dirs"] if d["name"] == "logdir-1")
    assert set(d) >= {
        "name",
        "path",
        "state",
        "total_bytes",
        "usable_bytes",
        "replica_count",
        "offline_replica_count",
    }
    assert d["state"] == "OFFLINE" and d["offline_replica_count"] == d["replica_count"] > 0
    assert b1["offline_replica_count"] == d["offline_replica_count"]


def test_topics_are_paginated_filtered_and_sorted(api, synced):
    body = api.get("/api/v1/clusters/local/topics?page_size=2&sort=-remote_bytes").json()
    assert body["count"] == 3 and body["num_pages"] == 2 and body["synced_at"]
    assert body["results"][0]["name"] == "orders"
    body = api.get("/api/v1/clusters/local/topics?tiered_state=ENABLED").json()
    assert [t["name"] for t in body["results"]] == ["orders"]
    body = api.get("/api/v1/clusters/local/topics?has_remote_data=false").json()
    assert sorted(t["name"] for t in body["results"]) == ["audit.log", "payments"]
    body = api.get("/api/v1/clusters/local/topics?name=pay").json()
    assert [t["name"] for t in body["results"]] == ["payments"]


def test_bad_filter_is_a_json_invalid_request(api, synced):
    response = api.get("/api/v1/clusters/local/topics?tiered_state=BOGUS")
    assert response.status_code == 400 and response.json()["error"] == "INVALID_REQUEST"


def test_topic_detail_has_tiering_and_partitions(api, synced, builder):
    builder.disable_tiering("orders", policy="retain")
    sync(synced, builder)
    body = api.get("/api/v1/clusters/local/topics/orders").json()
    assert body["synced_at"]
    assert body["tiering"] == {
        "state": "DISABLING",
        "epoch": 1,
        "policy": "retain",
        "remote_log_start_offset": 0,
        "remote_log_end_offset": 6 * 399,
        "local_log_start_offset": 6 * 200,
        "log_end_offset": 6 * 1000,
        "log_start_offset": 0,
        "remote_bytes": 6 * 400 * 100,
        "local_bytes": 6 * 800 * 100,
        "tiering_acks": [],
        # KIP-963, summed over the partitions' leaders (none reported here)
        "remote_copy_lag_bytes": 0,
        "remote_copy_lag_segments": 0,
        "remote_delete_lag_bytes": 0,
        "remote_delete_lag_segments": 0,
        "fenced_remote_bytes": 0,
        "fenced_remote_segments": 0,
        "remote_log_size_bytes": 0,
        "not_available": "",  # an agents cluster reports KIP-963's gauges
    }
    assert body["initial_partition_count"] == body["undeleted_partition_count"] == 6
    p0 = body["partitions"][0]
    assert p0["partition"] == 0 and p0["remote_log_end_offset"] == 399 and p0["leader"] == 1


def test_unknown_cluster_or_topic_is_json_404(api, synced):
    assert api.get("/api/v1/clusters/nope/brokers").json()["error"] == "NOT_FOUND"
    assert api.get("/api/v1/clusters/local/topics/nope").status_code == 404


def test_partition_for_key_now_and_before_an_expansion(api, synced, builder):
    builder.alter_partition_count("payments", 5)
    sync(synced, builder)
    for key in ("k-1", "customer-42", "", "ü"):
        body = api.get(
            "/api/v1/clusters/local/partition-for-key", {"topic": "payments", "key": key}
        ).json()
        assert body["synced_at"]
        assert body["partition"] == partition_for_key(key.encode(), 3, 5)
        assert body["before"] == {
            "undeleted_partition_count": 3,
            "partition": partition_for_key(key.encode(), 3, 3),
        }


def test_api_needs_a_token_or_session(client, synced, viewer):
    assert client.get("/api/v1/clusters").json()["error"] == "UNAUTHENTICATED"
    _, raw = do_issue_token(viewer, acting_user=None)
    response = client.get("/api/v1/clusters", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200


def test_a_user_without_a_role_is_forbidden(client, synced, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="x-y-z-w-1234")
    client.force_login(user)
    response = client.get("/api/v1/clusters")
    assert response.status_code == 403 and response.json()["error"] == "FORBIDDEN"
