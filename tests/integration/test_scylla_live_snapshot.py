"""Live snapshots on the ``scylla_cdc`` source: ScyllaCdcWriter writes the base table and ScyllaDB's
CDC log into the real node; each stream group re-reads the rows of its own token range in chunks
while it streams, with rows changing all the while: each key's values reach the sink in the order
they were written, every row is delivered, a SIGKILL mid-way resumes from the committed chunks,
``--where`` limits the rows, and ``snapshot: when_needed`` snapshots where the log's TTL passed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdcflow.cli import main as cdcflow_main
from cdcflow.config import load_pipeline
from cdcflow.offsets import PipelineOffsets
from cdcflow.plugins import PluginRegistry
from tests.integration.conftest import REPO
from tests.integration.live_snapshot_helpers import ChangingRows, live_snapshot_of, older_after_newer
from tests.integration.scylla_helpers import scylla_writer, source_section
from tests.integration.snapshot_helpers import replayed, runner_for, running, written
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

CHUNK_ROWS = 20


def _table(writer: ScyllaCdcWriter, keyspace: str, rows: int) -> tuple[str, list[int]]:
    """``items (id int, v int, total int)`` with ``rows`` rows (v = 0) written a minute ago, in a
    generation two minutes old: a stream from ``earliest`` has them at once."""
    now_us = writer.coordinator_now_us()
    writer.bootstrap(vnodes=4, timestamp_us=now_us - 120_000_000)
    writer.create_table(keyspace, "items", [("id", "int")], [], [("v", "int"), ("total", "int")])
    table = f"{keyspace}.items"
    writer.insert_many(
        table, [{"id": i, "v": 0, "total": i * 10} for i in range(rows)], timestamp_us=now_us - 60_000_000
    )
    return table, list(range(rows))


def _pipeline(folder: Path, writer: ScyllaCdcWriter, table: str, **source: Any) -> Path:
    section = source_section(writer, [table], start="earliest", snapshot_chunk_rows=CHUNK_ROWS, **source)
    file = folder / "scylla.yaml"
    file.write_text(
        f"name: live-{table.replace('.', '-')}\n"
        f"source: {json.dumps(section)}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 50}\n"
        "engine: {poll_interval_ms: 50}\n"
    )
    return file


def _table_state(session: Any, table: str) -> dict[int, dict[str, Any]]:
    return {
        r.id: {"id": r.id, "v": r.v, "total": r.total} for r in session.execute(f"SELECT id, v, total FROM {table}")
    }


def _caught_up(file: Path, keys: set[int]) -> int:
    """Run until every insert of ``keys`` is delivered; how many events the sink then holds."""
    out = file.parent / "out" / "changes.jsonl"
    with running(runner_for(file)) as pipeline:
        pipeline.wait_for(lambda: {e.id for e in written(out) if e.op == "c"} >= keys, 90, "the table's inserts")
    assert not pipeline.failure, pipeline.failure
    return len(written(out))


def _live_states(file: Path) -> dict[str, Any]:
    """Each stream group's committed live snapshot state (None: nothing queued)."""
    runner = runner_for(file)
    return {pid: live_snapshot_of(c) for pid, c in runner.store.load().items()}


def _snapshot_done(runner: Any) -> bool:
    states = [live_snapshot_of(c) for c in runner.store.load().values()]
    return bool(states) and all(s is None for s in states)


def test_each_group_snapshots_its_keys_never_after_a_newer_change_and_every_row_comes(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    table, keys = _table(writer, keyspace, rows=240)
    file = _pipeline(tmp_path, writer, table)
    before = _caught_up(file, set(keys))
    assert cdcflow_main(["snapshot", str(file), table]) == 0
    queued = _live_states(file)
    assert len(queued) > 1 and all(s is not None and s["queue"][0]["table"] == table for s in queued.values())

    # A quarter of the keys, changed often: each changes several times within a confidence window.
    hot = keys[::4]
    changing = ChangingRows(hot, lambda key, value: writer.update(table, {"id": key}, {"v": value}), pause_s=0.002)
    runner = runner_for(file)
    out = tmp_path / "out" / "changes.jsonl"
    with running(runner) as pipeline:
        changing.start()
        try:
            pipeline.wait_for(lambda: _snapshot_done(runner), 180, "the snapshot")
        finally:
            changing.stop()
        pipeline.wait_for(lambda: replayed(written(out)) == _table_state(cassandra_session, table), 60, "the changes")
    assert not pipeline.failure, pipeline.failure

    during = written(out)[before:]
    rows = [e for e in during if e.op == "r"]
    assert older_after_newer(during) == []
    assert rows and all(e.source["snapshot"] and e.source["connector"] == "scylla" for e in rows)
    # Each group delivered the rows of its own keys: the groups' rows are apart, and all of them together.
    groups = {e.source["partition"] for e in rows}
    assert len(groups) > 1 and all(g in queued for g in groups)
    ops = [e.op for e in during]
    first_row, last_row = ops.index("r"), len(ops) - 1 - ops[::-1].index("r")
    assert "u" in ops[first_row:last_row]  # the stream flowed while the snapshot ran
    assert set(hot) - {e.id for e in rows}  # keys changed between a chunk's watermarks left it
    assert {e.id for e in rows} | {e.id for e in during if e.op == "u"} == set(keys)
    assert len({e.id for e in rows}) == len(rows)
    assert replayed(written(out)) == _table_state(cassandra_session, table)


def test_a_live_snapshot_resumes_from_its_committed_chunks_after_sigkill(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    table, keys = _table(scylla_writer, keyspace, rows=240)
    file = _pipeline(tmp_path, scylla_writer, table)
    before = _caught_up(file, set(keys))
    assert cdcflow_main(["snapshot", str(file), table]) == 0
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.integration.live_snapshot_helpers", str(file), "--after-chunks", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    out = tmp_path / "out" / "changes.jsonl"
    before_restart = written(out)[before:]
    assert {e.op for e in before_restart} == {"r"}
    tokens = dict(cassandra_session.execute(f"SELECT id, token(id) FROM {table}"))
    committed = {pid: s for pid, s in _live_states(file).items() if s is not None and s["chunks"] >= 2}
    assert committed, _live_states(file)

    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: _snapshot_done(runner), 180, "the rest of the snapshot")
    assert not pipeline.failure, pipeline.failure
    after_restart = written(out)[before + len(before_restart) :]
    # A group restarted from its committed chunks: none of its rows up to there again.
    for group, state in committed.items():
        again = [e for e in after_restart if e.source["partition"] == group]
        assert again and all(tokens[e.id] > state["after"] for e in again), (group, state)
    assert {e.id for e in before_restart} | {e.id for e in after_restart if e.op == "r"} == set(keys)


def test_where_limits_the_rows(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    table, keys = _table(scylla_writer, keyspace, rows=100)
    file = _pipeline(tmp_path, scylla_writer, table)
    before = _caught_up(file, set(keys))
    assert cdcflow_main(["snapshot", str(file), table, "--where", "total >= 500"]) == 0
    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: _snapshot_done(runner), 120, "the snapshot")
    assert not pipeline.failure, pipeline.failure
    rows = [e for e in written(tmp_path / "out" / "changes.jsonl")[before:] if e.op == "r"]
    assert sorted(e.id for e in rows) == [i for i in keys if i * 10 >= 500]


def test_when_needed_snapshots_new_groups_and_goes_on_from_the_ttl_horizon_with_a_snapshot(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    """A new pipeline: each group starts with a live snapshot of its keys. Committed positions older
    than the log's TTL: instead of LogExpiredError, the groups go on from what the log keeps, each
    with a live snapshot of its keys again."""
    table, keys = _table(scylla_writer, keyspace, rows=50)  # written a minute ago: older than the TTL
    file = _pipeline(tmp_path, scylla_writer, table, snapshot="when_needed", log_ttl_s=30)
    out = tmp_path / "out" / "changes.jsonl"

    def snapshotted(runner: Any, since: int) -> bool:
        return {e.id for e in written(out)[since:] if e.op == "r"} == set(keys) and _snapshot_done(runner)

    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: snapshotted(runner, 0), 120, "the first snapshot")
    assert not pipeline.failure, pipeline.failure
    first = len(written(out))

    long_ago = scylla_writer.coordinator_now_us() - 100_000_000
    registry = PluginRegistry.from_entry_points()
    groups = sorted(_live_states(file))
    PipelineOffsets(load_pipeline(file, registry), registry).set_offsets({group: {"ts": long_ago} for group in groups})
    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: snapshotted(runner, first), 120, "the snapshot after the TTL passed")
    assert not pipeline.failure, pipeline.failure
    assert all(checkpoint.offset["ts"] > long_ago for checkpoint in runner.store.load().values())


def test_a_new_generation_mid_snapshot_hands_the_unfinished_chunks_to_its_groups(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    """A node joins while the snapshot runs: the old generation's groups end (4 s later) before
    the high watermark of the chunk they are reading; the new generation's groups take the
    requests they left unfinished when they start, and snapshot their own ranges. Rows keep
    changing throughout: still no value goes back, and every row comes."""
    writer = scylla_writer
    table, keys = _table(writer, keyspace, rows=240)
    file = _pipeline(tmp_path, writer, table)
    before = _caught_up(file, set(keys))
    assert cdcflow_main(["snapshot", str(file), table]) == 0
    old_groups = set(_live_states(file))

    hot = keys[::4]
    changing = ChangingRows(hot, lambda key, value: writer.update(table, {"id": key}, {"v": value}), pause_s=0.005)
    runner = runner_for(file)
    out = tmp_path / "out" / "changes.jsonl"
    with running(runner) as pipeline:
        changing.start()
        try:
            pipeline.wait_for(lambda: any(e.op == "r" for e in written(out)[before:]), 60, "the first rows")
            switch_us = writer.join_node(vnodes=4)

            def done() -> bool:
                # An old group ends at the switch, keeping what it left unfinished (its successors took it).
                # A successor that has not committed yet is not in the store at all, so the
                # checkpoints alone can look finished while it still snapshots (seen under load):
                # every row must also have come, as a snapshot row or a change.
                committed = runner.store.load()
                during = written(out)[before:]
                return (
                    set(committed) > old_groups
                    and all(
                        live_snapshot_of(c) is None or (pid in old_groups and c.offset["ts"] >= switch_us - 1)
                        for pid, c in committed.items()
                    )
                    and {e.id for e in during if e.op in ("r", "u")} >= set(keys)
                )

            pipeline.wait_for(done, 180, "the snapshot")
        finally:
            changing.stop()
        pipeline.wait_for(lambda: replayed(written(out)) == _table_state(cassandra_session, table), 60, "the changes")
    assert not pipeline.failure, pipeline.failure

    during = written(out)[before:]
    rows = [e for e in during if e.op == "r"]
    assert older_after_newer(during) == []
    assert {e.id for e in rows} | {e.id for e in during if e.op == "u"} == set(keys)
    # The new generation's groups delivered rows: the requests their predecessors left them.
    assert {e.source["partition"] for e in rows} - old_groups
