"""``GET /v1/snapshot?format=tsv``: the same snapshot as COPY rows (what the console's sync loads)."""

from __future__ import annotations

import pytest

from broker_agent.contract.models import (
    SNAPSHOT_TSV_COLUMNS,
    BrokerSnapshot,
    snapshot_tsv,
    split_snapshot_tsv,
)
from broker_agent.simulator.synthetic import SyntheticCluster
from console.sync.rows import REPLICA_COLUMNS

from .conftest import wait_until


def _same(tsv: bytes, snap: BrokerSnapshot) -> None:
    head, rows = split_snapshot_tsv(tsv)
    ref_head, ref_rows = split_snapshot_tsv(snapshot_tsv(snap))
    assert bytes(rows) == bytes(ref_rows)
    # log dirs carry live probe latencies (a new latency is a new version): two answers agree
    # on which dirs, in which state
    skip = {"generated_at_ms", "log_dirs", "version"}
    assert head.model_dump(exclude=skip) == ref_head.model_dump(exclude=skip)
    assert [(d.name, d.state) for d in head.log_dirs] == [
        (d.name, d.state) for d in ref_head.log_dirs
    ]


def test_the_console_stage_table_has_the_agents_row_layout():
    assert tuple(c for c, _ in REPLICA_COLUMNS) == SNAPSHOT_TSV_COLUMNS


def test_rows_escape_what_copy_text_format_would_misread():
    snap = BrokerSnapshot.model_validate(
        {
            "broker_id": 7,
            "version": 3,
            "full": True,
            "state": "ONLINE",
            "expiration_mode": "internal",
            "log_dirs": [],
            "replicas": [
                {
                    "topic": "a\tb\\c\nd",
                    "topic_id": "x",
                    "partition": 0,
                    "log_dir": None,
                    "state": "ONLINE",
                    "is_leader": True,
                    "leader": 7,
                    "leader_epoch": 1,
                    "isr": [7],
                    "log_start_offset": 0,
                    "local_log_start_offset": 0,
                    "log_end_offset": 5,
                    "high_watermark": 5,
                    "size_bytes": 10,
                    "tiered_state": "NONE",
                    "tiered_epoch": 0,
                    "copier_state": "STOPPED",
                    "expiration_state": "STOPPED",
                }
            ],
            "offline_log_directory_count": 0,
            "offline_replica_count": 0,
            "generated_at_ms": 1,
        }
    )
    head, rows = split_snapshot_tsv(snapshot_tsv(snap))
    assert head.broker_id == 7 and head.replicas == []
    (line,) = bytes(rows).decode().splitlines()
    fields = line.split("\t")
    assert len(fields) == len(SNAPSHOT_TSV_COLUMNS)
    assert fields[:6] == ["7", "a\\tb\\\\c\\nd", "0", "\\N", "ONLINE", "t"]


def test_a_json_body_is_not_mistaken_for_rows():
    assert split_snapshot_tsv(b'{"broker_id":1,"replicas":[]}') is None
    assert split_snapshot_tsv(b'{\n  "broker_id": 1\n}') is None
    with pytest.raises(ValueError, match="unexpected replica columns"):
        split_snapshot_tsv(b'{"replica_columns":["topic"]}\n')


@pytest.mark.parametrize("broker", [1, 4])
def test_synthetic_rows_match_its_json_snapshot_full_and_since(broker):
    c = SyntheticCluster("c", 6, 2, 5, 40, base_url="http://x")
    _same(
        c.broker_snapshot(broker, None, rows=True),
        BrokerSnapshot.model_validate_json(c.broker_snapshot(broker, None)),
    )
    since = c.version
    c.churn(0.2, seed=1)
    c.tick(0.2)
    inc = BrokerSnapshot.model_validate_json(c.broker_snapshot(broker, since))
    assert not inc.full and inc.replicas
    _same(c.broker_snapshot(broker, since, rows=True), inc)


@pytest.mark.integration
def test_the_agent_serves_its_snapshot_as_rows(sim_factory):
    sim = sim_factory(2, 2)
    sim.controller.create_topic("rows", 4, 2)
    agent = sim.agent(1)
    wait_until(lambda: len(agent.snapshot().replicas) == 4, 15, what="replicas")
    tsv = agent.snapshot_tsv()
    _same(tsv, agent.snapshot())
    head, _ = split_snapshot_tsv(tsv)
    assert head.full and head.broker_id == 1
    assert split_snapshot_tsv(agent.snapshot_tsv(since=head.version))[0].version >= head.version
