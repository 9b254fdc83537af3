"""#17: the controller's answer reaches PostgreSQL in pieces of whole topics.

A 1,000,000-partition cluster's metadata is 260 MB: as one ``jsonb`` value PostgreSQL refused it
("total size of jsonb array elements exceeds the maximum of 268435455 bytes") and the first sync
of a fleet failed. ``split_topics`` cuts the answer between topics without parsing it; an answer
laid out otherwise is staged whole, as before.
"""

from __future__ import annotations

import json

import pytest

from console.models import Partition, Replica, Topic
from console.sync import do_sync_cluster, metadata
from console.sync.common import split_topics
from tests.console.factories import ClusterBuilder

pytestmark = pytest.mark.django_db


def _builder() -> ClusterBuilder:
    b = ClusterBuilder(brokers=3, log_dirs=2)
    for i in range(12):
        b.add_topic(f"t{i:02d}", partitions=1 + i % 5, rf=3, tiered=i % 2 == 0)
    return b


def _inventory(cluster) -> tuple:
    return (
        sorted(Topic.objects.filter(cluster=cluster).values_list("name", "partition_count")),
        sorted(
            Partition.objects.filter(cluster=cluster).values_list(
                "topic_name", "partition", "leader", "isr", "log_end_offset"
            )
        ),
        Replica.objects.filter(cluster=cluster).count(),
    )


def test_split_topics_cuts_between_topics_and_keeps_every_one():
    body = _builder().metadata().model_dump_json().encode()
    envelope, chunks = split_topics(body, 1)  # every topic a piece of its own
    assert len(chunks) == 12
    assert json.loads(envelope)["topics"] == [] and json.loads(envelope)["brokers"]
    topics = [t for c in chunks for t in json.loads(c)]
    assert topics == json.loads(body)["topics"]
    envelope, chunks = split_topics(body, 1 << 30)  # one piece
    assert [t for c in chunks for t in json.loads(c)] == json.loads(body)["topics"]


def test_an_answer_laid_out_otherwise_is_not_cut():
    body = json.dumps(_builder().metadata().model_dump(), sort_keys=True).encode()
    assert split_topics(body, 1) is None  # "changed" comes before "topics": staged whole


@pytest.mark.parametrize("layout", ["one piece per topic", "keys sorted: staged whole"])
def test_a_sync_from_pieces_builds_the_same_inventory(cluster, monkeypatch, layout):
    b = _builder()
    do_sync_cluster(cluster, source=b.source(set()))
    want = _inventory(cluster)
    Topic.objects.filter(cluster=cluster).delete()
    Partition.objects.filter(cluster=cluster).delete()
    Replica.objects.filter(cluster=cluster).delete()
    source = b.source(set())
    if layout == "one piece per topic":
        monkeypatch.setattr(metadata, "METADATA_CHUNK_BYTES", 1)
    else:
        source.metadata_json = lambda since: json.dumps(
            source.metadata(since).model_dump(), sort_keys=True
        ).encode()
    run = do_sync_cluster(cluster, source=source, full=True).run
    assert run.errors == {} and _inventory(cluster) == want
