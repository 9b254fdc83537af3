"""``rules.plan_retention`` over Arrow columns, for the partitions where that is provably the same.

The retention job spends most of its time turning every inventory row into a ``rules.Segment``
(profiled with py-spy on the Python workers: ~2/3 of the planning stage's Python time at 10M
segments was ``segments_from_table``; the scan itself only reaches the planned prefix). This module
plans a partition straight from its Arrow columns with numpy, and builds a Python value only for
the segments the scan reaches. It covers the **single-epoch domain** and returns ``None``
otherwise; the caller then runs the pure planner, so the result is always ``plan_retention``'s.

Domain (checked per partition, else ``None``): the partition's lineage is not empty; every live
segment (state not DELETE_SEGMENT_FINISHED, ``tiered_epoch`` at or above the fence) has exactly
one leader-epoch entry with no null in it; no live segment has a null ``segment_id``,
``start_offset``, ``end_offset`` or ``max_timestamp_ms``; segment ids are unique among the live
segments.

Why it is ``plan_retention`` there (numbers refer to the steps of ``rules``' module doc):

- The live set, the lineage, the raw epoch map, the time cut-off and the size estimate are
  computed from the same inputs with the same formulas (nulls mapped as ``segments_from_table``
  maps them: size, event time and tiered epoch to 0).
- With one entry ``(e, o)`` a segment's filtered epoch map is ``{e: o}``, so
  ``is_within_leader_epochs`` reduces to: ``e`` is a lineage epoch; ``o >=`` its lineage offset
  unless ``e`` is the lineage's first epoch; ``end <= next lineage offset - 1`` when ``e`` is not
  the last lineage epoch; ``end < log_end_offset``. (``e`` in the lineage already implies
  first <= e <= last, and the loop body runs once, for ``e`` as both first and last.)
- ``listRemoteLogSegments(tp, epoch)`` lists the segment under ``e`` only, so the scan (step 5)
  visits the segments of lineage epochs once each, ordered by (lineage position of ``e``, start,
  end, segment id); ``seg.segment_id in planned`` is never true on a first visit; the size sum
  (step 3) counts each COPY_SEGMENT_FINISHED valid segment of a lineage epoch once.
- The scan's per-segment decisions are run in Python in that order, with the same statements,
  until the scan stops; only the visited prefix (rounded up to a block of 256, 512, ... rows,
  see ``_in_blocks``) is converted to Python values.
- Log start offset rule: ``all(e <= first_epoch)`` is ``e <= first_epoch`` for one entry.
- The unreferenced sweep (step 7) takes segments whose single epoch is below the raw cache's
  earliest epoch, by (epoch, start, end, segment id); the scan never visits them (every lineage
  epoch is >= that earliest epoch), so none is already planned.
- The plan's deletions come out in ``plan_retention``'s order (scan order, then sweep order).

``tests/spark_tasks/test_vector_rules.py`` checks the equality with hypothesis on random
partitions, including ones outside the domain (where ``None`` must come back).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_tasks import rules
from spark_tasks.schema import PlanReason, SegmentState

__all__ = ["VectorPlan", "plan_retention_columns"]


class VectorPlan:
    """A partition's plan as row indices into the input table (``rows``, in plan order)."""

    __slots__ = ("new_log_start_offset", "reasons", "rows")

    def __init__(self, rows: list[int], reasons: list[str], new_log_start_offset: int) -> None:
        self.rows = rows
        self.reasons = reasons
        self.new_log_start_offset = new_log_start_offset


def _np(col: pa.ChunkedArray | pa.Array, default: int | None = None) -> np.ndarray:
    if default is not None and col.null_count:
        col = pc.fill_null(col, default)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col.to_numpy(zero_copy_only=False)


def plan_retention_columns(
    partition: rules.PartitionState,
    table: pa.Table,
    now_ms: int,
    in_flight_ms: int = rules.DEFAULT_IN_FLIGHT_MS,
) -> VectorPlan | None:
    """``rules.plan_retention(partition, segments_from_table(table), ...)`` as row indices, or
    ``None`` when the partition is outside the single-epoch domain (see module doc)."""
    n = table.num_rows
    lso = partition.log_start_offset
    lineage = rules.filtered_leader_epochs(partition.leader_epochs)
    if not lineage:
        return None
    if n == 0:
        return VectorPlan([], [], lso)
    state = table.column("state")
    is_dsf = _np(pc.fill_null(pc.equal(state, SegmentState.DELETE_SEGMENT_FINISHED), False))
    fence = partition.purge_below_tiered_epoch or 0
    tiered = _np(table.column("tiered_epoch"), 0)
    live_idx = np.flatnonzero(~is_dsf & (tiered >= fence))
    if live_idx.size == 0:
        return VectorPlan([], [], lso)
    t = table.take(pa.array(live_idx)) if live_idx.size != n else table
    for name in ("segment_id", "start_offset", "end_offset", "max_timestamp_ms", "state"):
        if t.column(name).null_count:
            return None
    epochs_col = t.column("segment_leader_epochs").combine_chunks()
    if epochs_col.null_count:
        return None
    lengths = _np(pc.list_value_length(epochs_col))
    if not (lengths == 1).all():
        return None
    flat = epochs_col.flatten()
    if flat.null_count or flat.field("epoch").null_count or flat.field("start_offset").null_count:
        return None
    seg_ids = t.column("segment_id")
    m = live_idx.size
    if pc.count_distinct(seg_ids).as_py() != m:
        return None

    epoch = _np(flat.field("epoch")).astype(np.int64)
    eoff = _np(flat.field("start_offset")).astype(np.int64)
    start = _np(t.column("start_offset")).astype(np.int64)
    end = _np(t.column("end_offset")).astype(np.int64)
    max_ts = _np(t.column("max_timestamp_ms")).astype(np.int64)
    size = _np(t.column("size_bytes"), 0).astype(np.int64)
    event_ts = _np(t.column("event_timestamp_ms"), 0).astype(np.int64)
    st = t.column("state")
    is_csf = _np(pc.equal(st, SegmentState.COPY_SEGMENT_FINISHED))
    is_css = _np(pc.equal(st, SegmentState.COPY_SEGMENT_STARTED))
    is_dss = _np(pc.equal(st, SegmentState.DELETE_SEGMENT_STARTED))

    lin_e = np.fromiter(lineage.keys(), dtype=np.int64, count=len(lineage))
    lin_o = np.fromiter(lineage.values(), dtype=np.int64, count=len(lineage))
    n_lin = lin_e.size
    pos = np.searchsorted(lin_e, epoch)
    pos_c = np.minimum(pos, n_lin - 1)
    in_lineage = (pos < n_lin) & (lin_e[pos_c] == epoch)
    ok_first = (pos_c == 0) | (eoff >= lin_o[pos_c])
    nxt = np.minimum(pos_c + 1, n_lin - 1)
    ok_next = (pos_c + 1 >= n_lin) | (end <= lin_o[nxt] - 1)
    valid = in_lineage & ok_first & ok_next & (end < partition.log_end_offset)

    # Size data (buildRetentionSizeData).
    breach: int | None = None
    if partition.retention_bytes >= 0:
        estimate = partition.local_untiered_bytes + int(size[is_csf].sum())
        if estimate > partition.retention_bytes:
            remote = int(size[is_csf & in_lineage & valid].sum())
            total = partition.local_untiered_bytes + remote
            if total > partition.retention_bytes:
                breach = total - partition.retention_bytes

    cleanup_until: int | None = None
    if partition.retention_ms > -1 and now_ms - partition.retention_ms >= 0:
        cleanup_until = now_ms - partition.retention_ms

    # Scan order: (lineage position, start, end, segment id) over segments of lineage epochs.
    scan_rows = np.flatnonzero(in_lineage)
    order = _sorted_rows(scan_rows, pos, start, end, seg_ids)

    remaining = breach if breach is not None else 0
    first_epoch = int(lin_e[0])
    rows: list[int] = []
    reasons: list[str] = []
    new_lso: int | None = None
    planned: set[int] = set()
    moves = PlanReason.MOVES_LOG_START
    for i, css, dss, ev_ts, seg_end, seg_epoch, is_valid, seg_size, seg_ts in _in_blocks(
        order, is_css, is_dss, event_ts, end, epoch, valid, size, max_ts
    ):
        if css and now_ms - ev_ts < in_flight_ms:
            break
        if dss:
            rows.append(i)
            reasons.append(PlanReason.DELETE_RETRY)
            planned.add(i)
            continue
        reason = None
        if seg_epoch <= first_epoch and seg_end < lso:
            reason = PlanReason.LOG_START_OFFSET
            is_valid = False
        elif is_valid:
            if cleanup_until is not None and seg_ts < cleanup_until:
                remaining = max(0, remaining - seg_size)
                reason = PlanReason.RETENTION_TIME
            elif breach is not None and remaining > 0 and remaining >= seg_size:
                remaining -= seg_size
                reason = PlanReason.RETENTION_SIZE
        if reason is not None:
            rows.append(i)
            reasons.append(reason)
            planned.add(i)
            if reason in moves and (new_lso is None or seg_end + 1 > new_lso):
                new_lso = seg_end + 1
        elif is_valid:
            break  # the first segment kept stops the scan

    # Unreferenced sweep: single epoch below the raw cache's earliest epoch.
    earliest = next(iter(rules._as_map(partition.leader_epochs)))
    sweep_rows = np.flatnonzero(epoch < earliest)
    if sweep_rows.size:
        for i in _sorted_rows(sweep_rows, epoch, start, end, seg_ids).tolist():
            if i in planned:
                continue
            rows.append(i)
            reasons.append(PlanReason.DELETE_RETRY if is_dss[i] else PlanReason.UNREFERENCED)

    final_lso = lso if new_lso is None else max(lso, new_lso)
    return VectorPlan([int(live_idx[i]) for i in rows], reasons, final_lso)


def _in_blocks(order: np.ndarray, *cols: np.ndarray):
    """``(i, cols[0][i], cols[1][i], ...)`` as Python values for each ``i`` in ``order``, converted
    in growing blocks: the scan reads them one at a time and may stop early, and indexing numpy
    arrays per row (``int(end[i])``) made the whole planner about twice as slow: on 10 groups of
    9,800 rows (~5,400 planned each) it took 9.5-13.5 ms a group with per-row numpy indexing
    and 5.6-6.8 ms with this (alternating runs on the loaded bench machine)."""
    step, first = 256, 0
    while first < order.size:
        block = order[first : first + step]
        yield from zip(block.tolist(), *(col[block].tolist() for col in cols), strict=True)
        first += step
        step = min(step * 2, 16384)


def _sorted_rows(
    rows: np.ndarray, major: np.ndarray, start: np.ndarray, end: np.ndarray, ids: pa.ChunkedArray
) -> np.ndarray:
    """``rows`` ordered by (major, start, end, segment id) like Python's tuple sort (ids compare
    by code point, which is UTF-8 byte order)."""
    if rows.size == 0:
        return rows
    keys = pa.table(
        {
            "m": major[rows],
            "s": start[rows],
            "e": end[rows],
            "id": ids.take(pa.array(rows)),
        }
    )
    idx = pc.sort_indices(
        keys,
        sort_keys=[("m", "ascending"), ("s", "ascending"), ("e", "ascending"), ("id", "ascending")],
    )
    return rows[_np(idx)]
