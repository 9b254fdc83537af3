"""The retention shuffle's narrow columns, computed by Spark, restore to the inventory's values.

``plan_io._narrow_segment_columns`` is Spark SQL and ``_restore_segment_columns`` is pyarrow; this
runs the first in a real local session over rows with every odd state and leader-epoch list, and
checks that the second gives back exactly what was read, and that Spark agrees with the Python
model of the narrowing that the UDF tests use (``test_plan_job.narrow``).
"""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest

from spark_tasks import jobkit
from spark_tasks.plan_io import _narrow_segment_columns, _restore_segment_columns
from tests.spark_tasks.test_plan_job import narrow, odd_rows


@pytest.fixture(scope="module")
def spark():
    # py4j logs at INFO when its connection is collected at exit, after pytest closed the stream
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = jobkit.session("strata-test-narrow", "local[1]")
    yield session
    session.stop()


def test_spark_narrowing_restores_every_odd_row(spark, tmp_path):
    table = odd_rows()
    pq.write_table(table, tmp_path / "inv.parquet")
    df = spark.read.parquet(str(tmp_path / "inv.parquet"))
    narrowed = df.select(*_narrow_segment_columns()).orderBy("segment_id").toArrow()
    by_id = {sid: i for i, sid in enumerate(table.column("segment_id").to_pylist())}
    order = [by_id[s] for s in narrowed.column("segment_id").to_pylist()]
    expected = table.take(order)

    restored = _restore_segment_columns(narrowed)
    for name in ("state", "segment_leader_epochs", "object_path", "size_bytes"):
        assert restored.column(name).to_pylist() == expected.column(name).to_pylist(), name
    model = narrow(expected)
    for name in ("_state", "_state_raw", "_e0", "_o0", "_epochs"):
        assert narrowed.column(name).to_pylist() == model.column(name).to_pylist(), name
