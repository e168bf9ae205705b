"""``snapshot: initial | never | initial_only`` on the ``cassandra_commitlog`` source, against the
real node: existing rows as ``op: r`` first, then the stream from a position recorded before the
snapshot, so a change made while the snapshot runs is neither lost nor overwritten by an older
snapshot row; resume after SIGKILL; two worker processes; progress on a terminal and in metrics.

A change "during the snapshot" is made from a hook in the sink, at the first write of snapshot
rows: the first slice is read, the last is not. The node's cdc_raw is shared with other tests:
these pipelines keep its segments (``processed_segments: keep``) and name their table.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from cdcflow.contract import Partition
from cdcflow.events import ChangeEvent
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.sources.cql.snapshot import SnapshotOutlivedLogError
from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import read_topics, start_logged
from tests.integration.snapshot_helpers import (
    Written,
    assert_snapshot_first,
    hook_first_snapshot_write,
    replayed,
    runner_for,
    running,
    slice_of,
    wait_for_process,
    written,
)

SLICES = 8


def _orders(session: Any, keyspace: str, rows: int = 240) -> dict[int, int]:
    """``keyspace.orders`` with ``rows`` rows; each id's token."""
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int, note text) WITH cdc = true")
    insert = session.prepare(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (?, ?, ?)")
    for i in range(rows):
        session.execute(insert, (i, i * 10, f"order {i}"))
    return dict(session.execute(f"SELECT id, token(id) FROM {keyspace}.orders"))


def _table_state(session: Any, keyspace: str) -> dict[int, dict[str, Any]]:
    rows = session.execute(f"SELECT id, total, note FROM {keyspace}.orders")
    return {r.id: {"id": r.id, "total": r.total, "note": r.note} for r in rows}


def _pipeline(folder: Path, cdc_raw: Path, keyspace: str, snapshot: str, **extra: Any) -> Path:
    source = {
        "type": "cassandra_commitlog",
        "cdc_raw": str(cdc_raw),
        "cluster": "snap",
        "node": "node1",
        "tables": [f"{keyspace}.orders"],
        "processed_segments": "keep",
        "error_store": {"type": "file", "path": "errors.jsonl"},
        "snapshot": snapshot,
        "snapshot_slices": SLICES,
        "snapshot_page_size": 16,
        **extra.pop("source", {}),
    }
    file = folder / "orders.yaml"
    file.write_text(
        f"name: {extra.pop('name', 'orders-' + keyspace)}\n"
        f"source: {json.dumps(source)}\n"
        f"sink: {json.dumps(extra.pop('sink', {'type': 'file', 'path': 'out/changes.jsonl'}))}\n"
        f"checkpoint: {{type: file, path: ckpt, interval_ms: {extra.pop('interval_ms', 50)}}}\n"
        f"engine: {{poll_interval_ms: 50{extra.pop('engine', '')}}}\n"
    )
    assert not extra, extra
    return file


def _changed_during_the_snapshot(
    session: Any, keyspace: str, tokens: dict[int, int], first_rows: list[ChangeEvent]
) -> dict[str, int]:
    """Update a row of the slice being written and one of the last slice, insert a row, delete
    another of the last slice."""
    read_already = first_rows[0].key["id"]
    last_slice = sorted(i for i, t in tokens.items() if slice_of(t, SLICES) == SLICES - 1)
    not_read_yet, deleted = last_slice[0], last_slice[1]
    session.execute(f"UPDATE {keyspace}.orders SET total = -1 WHERE id = {read_already}")
    session.execute(f"UPDATE {keyspace}.orders SET total = -2 WHERE id = {not_read_yet}")
    session.execute(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (10000, 7, 'new')")
    session.execute(f"DELETE FROM {keyspace}.orders WHERE id = {deleted}")
    return {"read_already": read_already, "not_read_yet": not_read_yet, "deleted": deleted}


def _sample(name: str, pipeline: str, table: str) -> float | None:
    return METRICS_REGISTRY.get_sample_value(name, {"pipeline": pipeline, "table": table})


def test_initial_rows_first_then_every_change_including_those_made_during_it(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    tokens = _orders(session, keyspace)
    runner = runner_for(_pipeline(tmp_path, cdc_raw_dir, keyspace, "initial"))
    changed: dict[str, int] = {}
    stream = Partition("node1")
    waiting: list[bool | None] = []

    def change(rows: list[ChangeEvent]) -> None:
        changed.update(_changed_during_the_snapshot(session, keyspace, tokens, rows))
        waiting.append(runner.source.caught_up(stream, {"segment": 0, "position": 0}))

    hook_first_snapshot_write(runner, change)
    out = tmp_path / "out" / "changes.jsonl"

    def delivered_the_delete() -> bool:
        return any(e.op == "d" and e.id == changed.get("deleted") for e in written(out))

    with running(runner) as pipeline:
        pipeline.wait_for(delivered_the_delete, 90, "the delete made during the snapshot")
    assert not pipeline.failure, pipeline.failure
    # While it waited for the snapshot the stream was not caught up (its lag grew); now it may be.
    assert waiting == [False] and runner.source.caught_up(stream, {"segment": 0, "position": 0}) is None

    events = written(out)
    assert_snapshot_first(events)
    rows = {e.id: e for e in events if e.op == "r"}
    assert all(e.source["snapshot"] and e.source["partition"].startswith("node1/snapshot/") for e in rows.values())
    # The first slice was read before the changes, the last one after them.
    assert rows[changed["read_already"]].after == {
        "id": changed["read_already"],
        "total": changed["read_already"] * 10,
        "note": f"order {changed['read_already']}",
    }
    assert rows[changed["not_read_yet"]].after["total"] == -2
    assert changed["deleted"] not in rows
    assert set(rows) - {10000} == set(tokens) - {changed["deleted"]}
    streamed = [e for e in events if e.op != "r"]
    assert {"id": changed["read_already"], "total": -1} in [e.after for e in streamed if e.op == "u"]
    assert any(e.op == "c" and e.id == 10000 for e in streamed)
    # ... and what a consumer applying the events in order ends with is the table.
    assert replayed(events) == _table_state(session, keyspace)

    pipeline_name, table = runner.spec.name, f"{keyspace}.orders"
    assert _sample("cdcflow_snapshot_slices", pipeline_name, table) == SLICES
    assert _sample("cdcflow_snapshot_slices_finished", pipeline_name, table) == SLICES
    assert _sample("cdcflow_snapshot_rows_total", pipeline_name, table) == len([e for e in events if e.op == "r"])
    exposed = generate_latest(METRICS_REGISTRY).decode()
    assert f'cdcflow_snapshot_slices_finished{{pipeline="{pipeline_name}",table="{table}"}} {SLICES}.0' in exposed


def test_never_streams_only(tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str) -> None:
    tokens = _orders(cassandra_session, keyspace, rows=20)
    runner = runner_for(_pipeline(tmp_path, cdc_raw_dir, keyspace, "never"))
    out = tmp_path / "out" / "changes.jsonl"
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: {e.id for e in written(out)} >= set(tokens), 60, "every insert")
    assert {e.op for e in written(out)} == {"c"}
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["node1.checkpoint.json"]


def test_initial_only_reads_the_rows_and_ends_with_a_progress_bar_on_a_terminal(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    tokens = _orders(cassandra_session, keyspace, rows=100)
    file = _pipeline(tmp_path, cdc_raw_dir, keyspace, "initial_only")
    terminal, stderr = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr
    )
    os.close(stderr)
    shown = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # the process ended: the terminal is closed
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        assert process.wait(timeout=120) == 0, shown.decode(errors="replace")[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=10)
    os.close(terminal)

    events = written(tmp_path / "out" / "changes.jsonl")
    assert {e.op for e in events} == {"r"}
    assert sorted(e.id for e in events) == sorted(tokens)
    # Only slices were partitions: no stream position recorded, cdc_raw not held.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == sorted(
        f"node1%2Fsnapshot%2F{keyspace}.orders%2F{i:05d}-of-{SLICES:05d}.checkpoint.json" for i in range(SLICES)
    )
    text = shown.decode(errors="replace")
    assert "\rsnapshot [" in text and f"] {SLICES}/{SLICES} slices of 1 table, 100 rows read by this process" in text


def test_resumes_after_sigkill_mid_snapshot_without_rereading_finished_slices(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    tokens = _orders(session, keyspace)
    last_slice = sorted(i for i, t in tokens.items() if slice_of(t, SLICES) == SLICES - 1)
    file = _pipeline(tmp_path, cdc_raw_dir, keyspace, "initial", interval_ms=1)  # a checkpoint after each slice
    during = f"UPDATE {keyspace}.orders SET total = -3 WHERE id = {last_slice[0]}"
    crashed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.snapshot_helpers",
            str(file),
            "--after-slices",
            "3",
            "--during",
            during,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    out = tmp_path / "out" / "changes.jsonl"
    checkpoints = {
        urllib.parse.unquote(p.name.removesuffix(".checkpoint.json")): json.loads(p.read_text())["offset"]
        for p in (tmp_path / "ckpt").glob("*.checkpoint.json")
    }
    finished = {pid for pid, offset in checkpoints.items() if offset.get("done")}
    assert 3 <= len(finished) < SLICES, checkpoints
    assert "node1" in checkpoints  # the stream's start was recorded before any slice was read
    before_restart = written(out)
    assert {e.op for e in before_restart} == {"r"}
    rows_of_finished = [e for e in before_restart if e.source["partition"] in finished]

    # While it is down: more changes.
    session.execute(f"UPDATE {keyspace}.orders SET total = -4 WHERE id = {last_slice[1]}")
    session.execute(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (20000, 1, 'while down')")
    session.execute(f"DELETE FROM {keyspace}.orders WHERE id = {last_slice[2]}")

    process, log = start_logged(file)
    try:
        wait_for_process(
            lambda: any(e.id == 20000 and e.op == "c" for e in written(out)),
            120,
            "the insert made while the pipeline was down",
            process,
            log,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, "".join(log)[-3000:]

    events = written(out)
    assert_snapshot_first(events)
    # Slices finished before the kill were not read again; every row has a snapshot row.
    assert [e for e in events if e.op == "r" and e.source["partition"] in finished] == rows_of_finished
    assert {e.id for e in events if e.op == "r"} >= set(tokens) - {last_slice[2]}
    streamed = [e.after for e in events if e.op == "u"]
    assert {"id": last_slice[0], "total": -3} in streamed and {"id": last_slice[1], "total": -4} in streamed
    assert replayed(events) == _table_state(session, keyspace)


def test_two_workers_hold_the_stream_until_every_slice_of_both_is_committed(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    session = cassandra_session
    tokens = _orders(session, keyspace, rows=160)
    topic = f"{topic_prefix}.{keyspace}.orders"
    # One Kafka partition: its offsets are the order in which both workers' events arrived.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # held: its futures die with it
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    file = _pipeline(
        tmp_path,
        cdc_raw_dir,
        keyspace,
        "initial",
        name=f"orders-{topic_prefix}",
        source={"cluster": topic_prefix},
        sink={"type": "kafka", "bootstrap_servers": kafka_bootstrap, "linger_ms": 5},
        engine=", workers: 2",
    )
    process, log = start_logged(file)

    def payloads() -> list[dict[str, Any]]:
        return [json.loads(r.value)["payload"] for r in read_topics(kafka_bootstrap, [topic]) if r.value]

    try:
        wait_for_process(lambda: sum(" running: " in line for line in log) >= 2, 90, "both workers", process, log)
        session.execute(f"INSERT INTO {keyspace}.orders (id, total, note) VALUES (30000, 3, 'after start')")
        wait_for_process(
            lambda: any(p["op"] == "c" and p["after"]["id"] == 30000 for p in payloads()),
            120,
            "the insert made after the start",
            process,
            log,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, "".join(log)[-3000:]

    arrived = [Written(p["after"] or {}, p["op"], p["after"], p["source"]) for p in payloads()]
    assert_snapshot_first(arrived)  # in the one partition's order, whichever worker sent them
    rows = [e for e in arrived if e.op == "r"]
    assert {e.id for e in rows} >= set(tokens)
    assert len({e.source["partition"] for e in rows}) == SLICES
    assert replayed(arrived) == _table_state(session, keyspace)  # (no deletes here: keys from after)


def test_fails_at_the_hand_off_when_the_recorded_segment_is_gone(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    """As with cdc_block_writes: false and a full cdc_raw, where Cassandra deletes the oldest
    segments: here a copy of cdc_raw loses the segment the stream was recorded to start from."""
    _orders(cassandra_session, keyspace, rows=20)
    copy = tmp_path / "cdc_raw"
    copy.mkdir()
    for path in cdc_raw_dir.iterdir():
        shutil.copy2(path, copy / path.name)
    indexed = sorted((int(p.name.split("-")[-1].split("_")[0]), p) for p in copy.glob("CommitLog-*_cdc.idx"))
    assert indexed, "no segment with CDC data in cdc_raw"
    oldest = indexed[0][1].name.replace("_cdc.idx", ".log")
    runner = runner_for(_pipeline(tmp_path, copy, keyspace, "initial"))
    hook_first_snapshot_write(runner, lambda rows: (copy / oldest).unlink())
    with running(runner) as pipeline:
        pipeline.thread.join(timeout=60)
    [failure] = pipeline.failure
    assert isinstance(failure, SnapshotOutlivedLogError), failure
    assert "is no longer in" in str(failure)
