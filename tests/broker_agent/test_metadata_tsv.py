"""``GET /v1/metadata?format=tsv``: the controller's metadata as COPY rows (#17), the same answer
as its JSON, from the pydantic models, the synthetic cluster and the simulated controller."""

from __future__ import annotations

import json
import re

import pytest

from broker_agent.contract.metadata_rows import (
    METADATA_PARTITION_COLUMNS,
    METADATA_TOPIC_COLUMNS,
    metadata_tsv,
    split_metadata_tsv,
)
from broker_agent.contract.models import ClusterMetadata
from broker_agent.simulator.synthetic import SyntheticCluster
from broker_agent.simulator.synthetic_tiering import SyntheticTiering
from console.sync.rows import PARTITION_COLUMNS, TOPIC_ROW_COLUMNS

from .conftest import wait_until

_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def _value(text: str, column: str):
    """A COPY text value back as the JSON answer has it (the test's own reading of the format)."""
    if text == "\\N":
        return None
    text = re.sub(r"\\(.)", lambda m: _UNESCAPE[m.group(1)], text)
    if column in {"replicas", "isr", "offline_replicas", "created", "tiering_acks"}:
        return [int(v) for v in text.strip("{}").split(",") if v]
    if column in {"configs", "leader_epoch_after_creation", "leader_epoch_before_deletion"}:
        return json.loads(text)
    if column == "marked_for_deletion":
        return text == "t"
    if column.endswith(("partition", "_epoch", "leader", "_count")):
        return int(text)
    return text


def _read(body: bytes) -> tuple[ClusterMetadata, dict[str, str]]:
    """The answer rebuilt as a ``ClusterMetadata``, and each topic's digest."""
    md, topic_rows, partition_rows = split_metadata_tsv(body)
    topics, digests = {}, {}
    for line in bytes(topic_rows).decode().splitlines():
        row = dict(zip(METADATA_TOPIC_COLUMNS, line.split("\t"), strict=True))
        digests[row["name"]] = row.pop("digest")
        topics[row["name"]] = {c: _value(v, c) for c, v in row.items()} | {"partitions": []}
    for line in bytes(partition_rows).decode().splitlines():
        row = dict(zip(METADATA_PARTITION_COLUMNS, line.split("\t"), strict=True))
        topics[row.pop("topic")]["partitions"].append({c: _value(v, c) for c, v in row.items()})
    return ClusterMetadata.model_validate(
        {**md.model_dump(), "topics": list(topics.values())}
    ), digests


def _same(body: bytes, reference: ClusterMetadata) -> dict[str, str]:
    md, digests = _read(body)
    assert md.model_dump() == ClusterMetadata.model_validate(reference).model_dump()
    return digests


def test_the_console_stage_tables_have_the_rows_layout():
    assert tuple(c for c, _ in PARTITION_COLUMNS) == ("topic_name", *METADATA_PARTITION_COLUMNS[1:])
    assert tuple(c for c, _ in TOPIC_ROW_COLUMNS) == METADATA_TOPIC_COLUMNS


def test_rows_are_the_models_answer_with_what_copy_would_misread_escaped():
    md = ClusterMetadata.model_validate(
        {
            "cluster_id": "c",
            "version": 4,
            "brokers": [{"broker_id": 1, "url": "http://x", "alive": True}],
            "topics": [
                {
                    "name": "a.b",
                    "topic_id": "id",
                    "configs": {"k": "tab\there\nnew\\line"},
                    "tiered_state": "ENABLED",
                    "tiered_epoch": 2,
                    "disable_policy": None,
                    "tiering_acks": [1, 3],
                    "initial_partition_count": 2,
                    "undeleted_partition_count": 1,
                    "partitions": [
                        {"partition": 0, "replicas": [1, 3], "leader": 1, "isr": [1]},
                        {
                            "partition": 1,
                            "replicas": [3],
                            "isr": [],
                            "leader_epoch_before_deletion": {"0": 4},
                            "marked_for_deletion": True,
                        },
                    ],
                }
            ],
        }
    )
    body = metadata_tsv(md)
    assert len(body.decode().splitlines()) == 1 + 1 + 2  # head, a topic, its partitions
    _same(body, md)  # the tab and newline were escaped (a line per row), and read back


def test_a_json_answer_is_not_mistaken_for_rows():
    assert split_metadata_tsv(b'{"cluster_id":"c","topics":[]}') is None
    assert split_metadata_tsv(b'{"cluster_id":"c","topics":[]}\n') is None
    assert split_metadata_tsv(b'{\n  "cluster_id": "c"\n}') is None
    with pytest.raises(ValueError, match="unexpected topic columns"):
        split_metadata_tsv(b'{"topic_columns":["name"]}\n')
    head = metadata_tsv(ClusterMetadata(cluster_id="c", version=1, brokers=[], topics=[]))
    with pytest.raises(ValueError, match="fewer than 2 topic rows"):
        split_metadata_tsv(head.replace(b'"topic_count":0', b'"topic_count":2'))


def test_synthetic_rows_match_its_json_full_delta_and_unchanged():
    c = SyntheticCluster("c", 6, 2, 5, 40, base_url="http://x")
    c.tiering = SyntheticTiering(c)
    full = _same(c.metadata_body(None, False, tsv=True), json.loads(c.metadata_body(None, False)))
    assert len(full) == 5 and all(full.values())
    since = c.metadata_version
    changed = c.churn(0.2, seed=1)["changed_partitions"]
    assert changed
    delta_json = json.loads(c.metadata_body(since, True))
    assert not delta_json["full"]
    _same(c.metadata_body(since, True, tsv=True), delta_json)
    again = _same(c.metadata_body(None, False, tsv=True), json.loads(c.metadata_body(None, False)))
    # a digest moves with its topic's metadata only
    moved = {t for t in full if full[t] != again[t]}
    assert moved == {t["name"] for t in delta_json["topics"]}
    unchanged = c.metadata_body(c.metadata_version, True, tsv=True)
    md, topics, partitions = split_metadata_tsv(unchanged)
    assert not md.changed and not bytes(topics) and not bytes(partitions)


@pytest.mark.integration
def test_the_simulated_controller_serves_its_metadata_as_rows(sim_factory):
    sim = sim_factory(2, 2)
    sim.controller.create_topic("rows", 4, 2)
    wait_until(  # every replica reported created: the topics hold still between two answers
        lambda: all(
            len(p.created) == 2 for t in sim.controller.metadata().topics for p in t.partitions
        ),
        15,
        what="replicas created",
    )
    rows = sim.controller.request("GET", "/v1/metadata", params={"format": "tsv"}, raw=True)
    assert rows.headers["content-type"].startswith("text/tab-separated-values")
    md = sim.controller.metadata()  # brokers' heartbeats move on: their topics are compared
    assert _read(rows.content)[0].topics == md.topics and md.topics
    current = sim.controller.request(
        "GET", "/v1/metadata", params={"format": "tsv", "since": md.version}, raw=True
    )
    assert not split_metadata_tsv(current.content)[0].changed
