"""The snapshot's gates and hand-off checks (``cdcflow.sources.cql.snapshot``) on a committed-offsets
view the test controls: what the engines hand a source, without a cluster (slices are read against
the real node in tests/integration/test_*_snapshot.py)."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest

from cdcflow.contract import Offset, PluginContext
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.sources.cql.snapshot import (
    SnapshotConfig,
    SnapshotEngineError,
    SnapshotOutlivedLogError,
    SnapshotTable,
    TokenRangeSnapshot,
    token_slices,
)

TABLES = [SnapshotTable("ks.a", ("id",), ("id", "v")), SnapshotTable("ks.b", ("id",), ("id",))]


def _snapshot(
    committed: dict[str, Offset] | None,
    stream: list[str],
    pipeline: str = "p",
    refresh_s: float = 60.0,
    mode: str = "initial",
) -> tuple[TokenRangeSnapshot, io.StringIO]:
    """A snapshot of ``TABLES`` in 3 slices each whose engine shows it ``committed``; the store is
    read again only after ``refresh_s`` (0: on every look)."""
    context = PluginContext(
        pipeline, Path("p.yaml"), committed_offsets=(lambda: dict(committed)) if committed is not None else None
    )
    terminal = io.StringIO()
    config = SnapshotConfig(snapshot=mode, snapshot_slices=3, snapshot_progress=True)
    snapshot = TokenRangeSnapshot(
        config,
        TABLES,
        context,
        None,
        lambda *a: None,
        lambda: stream,
        progress_stream=terminal,
        view_refresh_s=refresh_s,
    )
    return snapshot, terminal


def test_slices_cover_the_ring_once_and_ids_name_table_and_count() -> None:
    ranges = token_slices(5)
    assert ranges[0][0] == -(2**63) and ranges[-1][1] == 2**63 - 1
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    snapshot, _ = _snapshot({}, [])
    assert [p.id for p in snapshot.partitions()][:2] == ["snapshot/ks.a/00000-of-00003", "snapshot/ks.a/00001-of-00003"]
    assert len(snapshot.partitions()) == 6


def test_slices_wait_until_every_stream_start_is_committed() -> None:
    committed: dict[str, Offset] = {"s1": {"ts": 1}}
    snapshot, _ = _snapshot(committed, ["s1", "s2"])
    first = snapshot.partitions()[0]
    start = snapshot.initial_offset()
    assert snapshot.latest_offset(start) == start  # s2's start is not recorded yet
    committed["s2"] = {"ts": 2}  # this process committed it, and says so
    snapshot.note_committed({"s2": committed["s2"]})
    end = snapshot.latest_offset(start)
    assert end["done"] is True and snapshot.is_finished(end) and first.info["table"] == "ks.a"


def test_a_tables_stream_waits_for_that_tables_slices_as_other_processes_commit_them() -> None:
    committed: dict[str, Offset] = {}
    snapshot, terminal = _snapshot(committed, [], pipeline="gates", refresh_s=0)
    ids = [p.id for p in snapshot.partitions()]
    assert not snapshot.stream_may_start("ks.a") and not snapshot.stream_may_start()
    for number, pid in enumerate(ids[:3]):  # another process finishes ks.a's slices
        committed[pid] = {"done": True, "started_us": 100 + number}
    assert snapshot.stream_may_start("ks.a") and snapshot.started_us("ks.a") == 100
    assert not snapshot.stream_may_start("ks.b") and not snapshot.stream_may_start()
    assert snapshot.stream_may_start("ks.other")  # a table without a snapshot never waits
    mine = {pid: {"done": True, "started_us": 90} for pid in ids[3:]}  # this process's, told as committed
    committed.update(mine)
    snapshot.note_committed(mine)
    assert snapshot.stream_may_start() and snapshot.started_us() == 90
    labels = {"pipeline": "gates", "table": "ks.b"}
    assert METRICS_REGISTRY.get_sample_value("cdcflow_snapshot_slices_finished", labels) == 3
    assert METRICS_REGISTRY.get_sample_value("cdcflow_snapshot_slices", labels) == 3
    assert terminal.getvalue().endswith("] 6/6 slices of 2 tables, 0 rows read by this process\n")


def test_an_engine_without_committed_offsets_is_refused() -> None:
    snapshot, _ = _snapshot(None, ["s1"])
    with pytest.raises(SnapshotEngineError, match="does not show the source the pipeline's committed offsets"):
        snapshot.latest_offset(snapshot.initial_offset())


def test_a_snapshot_without_a_stream_needs_no_committed_offsets() -> None:
    # initial_only (and the cassandra_snapshot source) hands over to nothing: any engine may run it.
    snapshot, _ = _snapshot(None, [], mode="initial_only")
    assert snapshot.is_finished(snapshot.latest_offset(snapshot.initial_offset()))


@pytest.mark.parametrize(
    ("position", "horizon", "fails"),
    [
        (900, 940, False),  # expired only what lies more than the margin before the start: the snapshot has it
        (900, 951, True),  # ... and one µs into the margin: a change there may have missed the snapshot
        (1200, 1100, False),  # the stream is past the snapshot's start: not the hand-off's business
        (900, 800, False),  # nothing the stream needs has expired
    ],
)
def test_the_log_must_keep_a_margin_before_the_snapshots_start(position: int, horizon: int, fails: bool) -> None:
    snapshot, _ = _snapshot({}, [])
    check = lambda: snapshot.check_log_kept(position, 1000, horizon, 50, "ks.a group g")  # noqa: E731
    if fails:
        with pytest.raises(SnapshotOutlivedLogError, match=r"ks\.a group g: the snapshot began at"):
            check()
    else:
        check()
