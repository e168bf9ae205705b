"""The parts of live snapshots that need no database: which buffered rows a streamed event makes
stale, the queue in an offset, token ranges of a ring cut, the --where guard, the progress bar."""

from __future__ import annotations

import io

import pytest

from cdcflow.errors import SnapshotWhereError
from cdcflow.events import ChangeEvent, Op, SchemaChangeEvent, SourceInfo
from cdcflow.live_snapshots import SnapshotRequest
from cdcflow.sources.cql.live_snapshot import (
    LiveSnapshots,
    LiveState,
    _Progress,
    _Window,
    checked_where,
    clipped,
    share_done,
    stream_position,
)
from cdcflow.sources.cql.snapshot import SnapshotTable
from cdcflow.sources.scylla_cdc.tokens import MAX_TOKEN, MIN_TOKEN, ring_ranges

TABLE = SnapshotTable("ks.t", ("p",), ("p", "c", "v"))


def _event(key: dict[str, object], table: str = "t", op: Op = Op.UPDATE) -> ChangeEvent:
    source = SourceInfo("cassandra", "c", "ks", table, "node1", {}, 1)
    return ChangeEvent(op, key, None, {**key, "v": 1}, source, 1)


def _window() -> _Window:
    window = _Window("req", None, TABLE, ("p", "c"), ((MIN_TOKEN, MAX_TOKEN),), (0, 0), 0, 10, True)
    for p in (1, 2):
        for c in (1, 2):
            window.add(_event({"p": p, "c": c}, op=Op.READ))
    return window


def _left(window: _Window) -> set[tuple[object, object]]:
    return {(e.key["p"], e.key["c"]) for e in window.events.values()}


def test_a_row_change_makes_only_its_row_stale() -> None:
    window = _window()
    window.saw(_event({"p": 1, "c": 2}))
    assert _left(window) == {(1, 1), (2, 1), (2, 2)}


def test_a_partition_deletion_or_static_row_makes_its_whole_partition_stale() -> None:
    window = _window()
    window.saw(_event({"p": 2}, op=Op.DELETE))  # no clustering values: the partition
    assert _left(window) == {(1, 1), (1, 2)}
    window.saw(_event({"p": 1, "c": None}))  # a static row
    assert _left(window) == set()


def test_other_tables_leave_the_chunk_and_a_schema_change_throws_it_away() -> None:
    window = _window()
    window.saw(_event({"p": 1, "c": 1}, table="other"))
    assert len(window.events) == 4 and not window.thrown_away
    window.saw(SchemaChangeEvent("ks", "t", "ALTER TABLE ks.t ADD w int", _event({}).source, 1))
    assert window.thrown_away


def test_requests_queue_in_the_offset_once() -> None:
    first, again = SnapshotRequest("ks.t", id="a"), SnapshotRequest("ks.t", "v > 1", id="b")
    offset = LiveSnapshots.with_request({"ts": 5}, first)
    offset = LiveSnapshots.with_request(offset, again)
    assert LiveSnapshots.with_request(offset, first) == offset  # the same id
    assert LiveSnapshots.with_request(offset, SnapshotRequest("ks.t", "v > 1", id="c")) == offset  # waiting already
    state = LiveState.of(offset)
    assert state is not None and [r.id for r in state.queue] == ["a", "b"] and stream_position(offset) == {"ts": 5}
    moved = state.advanced(chunk_end=100, rows=7, finished=False)
    assert moved is not None and (moved.after, moved.rows, moved.chunks) == (100, 7, 1)
    following = moved.advanced(chunk_end=200, rows=3, finished=True)
    assert following is not None and following.current.id == "b" and following.after is None
    assert SnapshotRequest("ks.t", "  ").where is None


def test_ranges_past_a_token_and_the_share_done() -> None:
    ranges = [(-100, 0), (50, 100)]
    assert clipped(ranges, -50) == [(-50, 0), (50, 100)]
    assert clipped(ranges, 60) == [(60, 100)]
    assert share_done(ranges, None) == 0.0 and share_done(ranges, 100) == 1.0
    assert share_done(ranges, 0) == pytest.approx(100 / 150)


def test_the_first_range_of_a_ring_cut_wraps() -> None:
    ends = [-10, 20, 30]
    assert ring_ranges(ends, 0) == ((MIN_TOKEN, -10), (30, MAX_TOKEN))
    assert ring_ranges(ends, 2) == ((20, 30),)
    assert ring_ranges([-10, MAX_TOKEN], 0) == ((MIN_TOKEN, -10),)


@pytest.mark.parametrize("where", ["v > 1; DROP TABLE ks.t", "v > 1 -- all", "v > 1 /* x */", "v > 1 // x"])
def test_a_condition_is_one_cql_condition(where: str) -> None:
    with pytest.raises(SnapshotWhereError, match="one CQL condition"):
        checked_where(where)
    assert checked_where("  region = 'eu' ") == "region = 'eu'"


def test_the_bar_shows_the_share_over_partitions_and_ends_when_all_are_done() -> None:
    shown = io.StringIO()
    progress = _Progress(True, shown)
    progress.update("g1", "ks.t", 0.5, rows=10)
    progress.update("g2", "ks.t", 0.0, rows=5)
    assert "live snapshot of ks.t: 25% of 2 partitions, 15 rows delivered by this process" in shown.getvalue()
    progress.update("g1", "ks.t", None)
    progress.update("g2", "ks.t", None)
    assert shown.getvalue().endswith("live snapshot done, 15 rows delivered by this process\n")
