"""``snapshot`` modes on the ``scylla_cdc`` source: the base table read by token slices from the
real node (ScyllaCdcWriter writes base rows and ScyllaDB's CDC log into it), then the log from a
position recorded before the snapshot; and the hand-off refused when the log's TTL has expired
what the stream still needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cdcflow.events import ChangeEvent
from cdcflow.sources.cql.snapshot import SnapshotOutlivedLogError
from tests.integration.scylla_helpers import scylla_writer, source_section
from tests.integration.snapshot_helpers import (
    assert_snapshot_first,
    hook_first_snapshot_write,
    replayed,
    runner_for,
    running,
    slice_of,
    written,
)
from tests.standins.scylla.writer import ScyllaCdcWriter

__all__ = ["scylla_writer"]  # the fixture, for pytest

SLICES = 8


def _pipeline(folder: Path, writer: ScyllaCdcWriter, table: str, **source: Any) -> Path:
    section = source_section(writer, [table], snapshot_slices=SLICES, snapshot_page_size=16, **source)
    file = folder / "scylla.yaml"
    file.write_text(
        f"name: scylla-{table.replace('.', '-')}\n"
        f"source: {json.dumps(section)}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 50}\n"
        "engine: {poll_interval_ms: 50}\n"
    )
    return file


def _with_rows(writer: ScyllaCdcWriter, keyspace: str, session: Any, rows: int) -> tuple[str, dict[int, int]]:
    """``orders`` with ``rows`` rows written a minute ago (in a generation two minutes old), so the
    log holds them well outside the confidence window: a stream from ``earliest`` has them at once."""
    now_us = writer.coordinator_now_us()
    writer.bootstrap(vnodes=4, timestamp_us=now_us - 120_000_000)
    writer.create_table(keyspace, "orders", [("id", "int")], [], [("total", "int")])
    table = f"{keyspace}.orders"
    writer.insert_many(table, [{"id": i, "total": i * 10} for i in range(rows)], timestamp_us=now_us - 60_000_000)
    return table, dict(session.execute(f"SELECT id, token(id) FROM {table}"))


def test_initial_rows_first_then_the_log_with_the_changes_made_during_it(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    writer = scylla_writer
    table, tokens = _with_rows(writer, keyspace, cassandra_session, 240)
    # From earliest: the log's 240 inserts are there to read at once, and must wait for the snapshot.
    runner = runner_for(_pipeline(tmp_path, writer, table, snapshot="initial", start="earliest"))
    changed: dict[str, int] = {}

    def change(rows: list[ChangeEvent]) -> None:
        last_slice = sorted(i for i, t in tokens.items() if slice_of(t, SLICES) == SLICES - 1)
        changed.update(read_already=rows[0].key["id"], not_read_yet=last_slice[0], deleted=last_slice[1])
        writer.update(table, {"id": changed["read_already"]}, {"total": -1})
        writer.update(table, {"id": changed["not_read_yet"]}, {"total": -2})
        writer.insert(table, {"id": 10000, "total": 7})
        writer.delete_row(table, {"id": changed["deleted"]})

    hook_first_snapshot_write(runner, change)
    out = tmp_path / "out" / "changes.jsonl"
    with running(runner) as pipeline:
        # Each stream group is its own partition, read independently: the delete may be written
        # before the log's history and the changes made just ahead of it in other groups, so wait
        # for each of them.
        def made() -> set[tuple[str, int | None]]:  # once the hook has changed the rows
            history = {("c", i) for i in tokens} | {("c", 10000)}
            return history | {("u", changed.get("read_already")), ("d", changed.get("deleted"))}

        pipeline.wait_for(
            lambda: made() <= {(e.op, e.id) for e in written(out)}, 90, "the changes made during the snapshot"
        )
    assert not pipeline.failure, pipeline.failure

    events = written(out)
    assert_snapshot_first(events)
    rows = {e.id: e for e in events if e.op == "r"}
    assert all(e.source["snapshot"] and e.source["connector"] == "scylla" for e in rows.values())
    assert rows[changed["read_already"]].after == {"id": changed["read_already"], "total": changed["read_already"] * 10}
    assert rows[changed["not_read_yet"]].after == {"id": changed["not_read_yet"], "total": -2}
    assert changed["deleted"] not in rows
    assert set(rows) - {10000} == set(tokens) - {changed["deleted"]}
    streamed = [e for e in events if e.op != "r"]
    assert {e.id for e in streamed if e.op == "c"} >= set(tokens)  # the log's history, after the snapshot
    assert {"id": changed["read_already"], "total": -1} in [e.after for e in streamed if e.op == "u"]
    assert any(e.op == "c" and e.id == 10000 for e in streamed)
    state = {r.id: {"id": r.id, "total": r.total} for r in cassandra_session.execute(f"SELECT id, total FROM {table}")}
    assert replayed(events) == state


def test_initial_only_ends_after_the_rows(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    table, tokens = _with_rows(scylla_writer, keyspace, cassandra_session, 50)
    runner = runner_for(_pipeline(tmp_path, scylla_writer, table, snapshot="initial_only"))
    with running(runner) as pipeline:
        pipeline.thread.join(timeout=60)
        assert not pipeline.alive(), "initial_only did not end"
    assert not pipeline.failure, pipeline.failure
    events = written(tmp_path / "out" / "changes.jsonl")
    assert {e.op for e in events} == {"r"} and sorted(e.id for e in events) == sorted(tokens)


def test_the_hand_off_fails_when_the_log_expired_changes_the_stream_needs(
    tmp_path: Path, cassandra_session: Any, keyspace: str, scylla_writer: ScyllaCdcWriter
) -> None:
    """A log that keeps rows 1 s, under a 3 s confidence window: by the time the snapshot is
    delivered, changes from within the window before its start have expired."""
    table, _ = _with_rows(scylla_writer, keyspace, cassandra_session, 20)
    runner = runner_for(_pipeline(tmp_path, scylla_writer, table, snapshot="initial", log_ttl_s=1))
    with running(runner) as pipeline:
        pipeline.thread.join(timeout=60)
    [failure] = pipeline.failure
    assert isinstance(failure, SnapshotOutlivedLogError), failure
    assert f"{table} stream group" in str(failure) and "have expired before the stream could read them" in str(failure)
    # The snapshot itself was delivered; nothing of the stream was.
    assert {e.op for e in written(tmp_path / "out" / "changes.jsonl")} == {"r"}
