"""Live snapshots on the ``cassandra_commitlog`` source, against the real node: a table re-read in
token-range chunks while the node's commit log keeps streaming, with rows changing all the while;
each key's values reach the sink in the order they were written (no snapshot row after a newer
change, no change older than a snapshot row after it), every row is delivered, a SIGKILL mid-way
resumes from the committed chunks, ``--where`` limits the rows, ``snapshot: when_needed``.

The node's cdc_raw is shared with other tests: these pipelines keep its segments and name their table.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow.cli import main as cdcflow_main
from cdcflow.metrics import METRICS_REGISTRY
from tests.integration.conftest import REPO
from tests.integration.group_helpers import Group, group_section
from tests.integration.live_snapshot_helpers import ChangingRows, live_snapshot_of, older_after_newer
from tests.integration.snapshot_helpers import Written, replayed, runner_for, running, written

CHUNK_ROWS = 40


def _table(session: Any, keyspace: str, rows: int) -> dict[int, int]:
    """``keyspace.items (id int PRIMARY KEY, v int, total int)`` with ``rows`` rows (v = 0); each id's token."""
    session.execute(f"CREATE TABLE {keyspace}.items (id int PRIMARY KEY, v int, total int) WITH cdc = true")
    insert = session.prepare(f"INSERT INTO {keyspace}.items (id, v, total) VALUES (?, 0, ?)")
    for i in range(rows):
        session.execute(insert, (i, i * 10))
    return dict(session.execute(f"SELECT id, token(id) FROM {keyspace}.items"))


def _table_state(session: Any, keyspace: str) -> dict[int, dict[str, Any]]:
    rows = session.execute(f"SELECT id, v, total FROM {keyspace}.items")
    return {r.id: {"id": r.id, "v": r.v, "total": r.total} for r in rows}


def _pipeline(folder: Path, cdc_raw: Path, keyspace: str, **source: Any) -> Path:
    section = {
        "type": "cassandra_commitlog",
        "cdc_raw": str(cdc_raw),
        "cluster": "live",
        "node": "node1",
        "tables": [f"{keyspace}.items"],
        "processed_segments": "keep",
        "error_store": {"type": "file", "path": "errors.jsonl"},
        "snapshot_chunk_rows": CHUNK_ROWS,
        **source,
    }
    file = folder / "items.yaml"
    file.write_text(
        f"name: live-{keyspace}\n"
        f"source: {json.dumps(section)}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 50}\n"
        "engine: {poll_interval_ms: 50}\n"
    )
    return file


def _newest_segment(cdc_raw: Path) -> int:
    """The newest segment with CDC data synced (an index): writes from now on go to it or later ones
    (the newest segments may be made ahead of use, without an index yet)."""
    return max(int(p.name.removesuffix("_cdc.idx").rsplit("-", 1)[1]) for p in cdc_raw.glob("CommitLog-*_cdc.idx"))


def _starting_at(file: Path, segment: int) -> Path:
    """The pipeline's stream set to start at ``segment`` (the node's cdc_raw holds other tests' older
    segments: reading them all only makes the test slow)."""
    offset = json.dumps({"segment": segment, "position": 0})
    assert cdcflow_main(["offsets", "set", str(file), "--partition", "node1", "--offset", offset]) == 0
    return file


def _caught_up(file: Path, keys: set[int]) -> list[Written]:
    """Run the pipeline until every insert of ``keys`` is delivered (the stream is past them), then stop."""
    out = file.parent / "out" / "changes.jsonl"
    with running(runner_for(file)) as pipeline:
        pipeline.wait_for(lambda: {e.id for e in written(out) if e.op == "c"} >= keys, 120, "the table's inserts")
    assert not pipeline.failure, pipeline.failure
    return written(out)


def _snapshot(file: Path, table: str, *extra: str) -> None:
    assert cdcflow_main(["snapshot", str(file), table, *extra]) == 0


def _node_checkpoint(runner: Any) -> Any:
    return runner.store.load().get("node1")


def test_a_live_snapshot_delivers_every_row_and_never_one_older_than_a_streamed_change(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    newest = _newest_segment(cdc_raw_dir)
    tokens = _table(session, keyspace, rows=300)
    file = _starting_at(_pipeline(tmp_path, cdc_raw_dir, keyspace), newest)
    before = len(_caught_up(file, set(tokens)))
    _snapshot(file, f"{keyspace}.items")
    # Queued in the stream partition's committed offset, for the next run.
    assert live_snapshot_of(runner_for(file).store.load()["node1"])["queue"][0]["table"] == f"{keyspace}.items"

    update = session.prepare(f"UPDATE {keyspace}.items SET v = ? WHERE id = ?")
    changing = ChangingRows(sorted(tokens), lambda key, value: session.execute(update, (value, key)))
    runner = runner_for(file)
    out = tmp_path / "out" / "changes.jsonl"
    with running(runner) as pipeline:
        changing.start()
        try:
            pipeline.wait_for(
                lambda: (c := _node_checkpoint(runner)) is not None and live_snapshot_of(c) is None, 180, "the snapshot"
            )
        finally:
            changing.stop()
        pipeline.wait_for(lambda: replayed(written(out)) == _table_state(session, keyspace), 60, "the last changes")
    assert not pipeline.failure, pipeline.failure

    during = written(out)[before:]
    rows = [e for e in during if e.op == "r"]
    assert rows and all(e.source["snapshot"] and e.source["partition"] == "node1" for e in rows)
    # No key's value ever goes back: never a row after a newer change, nor a change older than a row after it.
    assert older_after_newer(during) == []
    # The stream flowed while the snapshot ran (changes were delivered between its first and last
    # rows), and rows were read after some of their keys had changed: the hazard was there.
    ops = [e.op for e in during]
    first_row, last_row = ops.index("r"), len(ops) - 1 - ops[::-1].index("r")
    assert "u" in ops[first_row:last_row]
    assert any(e.after["v"] > 0 for e in rows)
    # Every row of the table came: as a snapshot row, or (changed between a chunk's watermarks) as its change.
    assert {e.id for e in rows} | {e.id for e in during if e.op == "u"} == set(tokens)
    assert len({e.id for e in rows}) == len(rows)  # once each, without a crash
    assert replayed(written(out)) == _table_state(session, keyspace)
    table = f"{keyspace}.items"
    delivered = METRICS_REGISTRY.get_sample_value(
        "cdcflow_snapshot_live_rows_total", {"pipeline": f"live-{keyspace}", "table": table}
    )
    assert delivered == len(rows)


def test_a_live_snapshot_resumes_from_its_committed_chunks_after_sigkill(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    newest = _newest_segment(cdc_raw_dir)
    tokens = _table(cassandra_session, keyspace, rows=300)
    file = _starting_at(_pipeline(tmp_path, cdc_raw_dir, keyspace), newest)
    before = len(_caught_up(file, set(tokens)))
    _snapshot(file, f"{keyspace}.items")
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.integration.live_snapshot_helpers", str(file), "--after-chunks", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    committed = live_snapshot_of(runner_for(file).store.load()["node1"])
    assert committed is not None and committed["chunks"] >= 2, committed
    done_up_to = committed["after"]
    before_restart = written(tmp_path / "out" / "changes.jsonl")[before:]
    assert {e.op for e in before_restart} == {"r"}
    # Rows of the chunk being delivered at the kill reached the sink, uncommitted.
    assert any(tokens[e.id] > done_up_to for e in before_restart)

    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: live_snapshot_of(_node_checkpoint(runner)) is None, 180, "the rest of the snapshot")
    assert not pipeline.failure, pipeline.failure
    after_restart = written(tmp_path / "out" / "changes.jsonl")[before + len(before_restart) :]
    # The restart read on from the committed chunks: none of theirs again, every other row.
    assert after_restart and all(tokens[e.id] > done_up_to for e in after_restart)
    assert {e.id for e in before_restart} | {e.id for e in after_restart} == set(tokens)


def test_where_limits_the_rows_and_a_bad_condition_is_refused(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = _newest_segment(cdc_raw_dir)
    tokens = _table(cassandra_session, keyspace, rows=120)
    file = _starting_at(_pipeline(tmp_path, cdc_raw_dir, keyspace), newest)
    before = len(_caught_up(file, set(tokens)))
    capsys.readouterr()
    assert cdcflow_main(["snapshot", str(file), f"{keyspace}.items", "--where", "nope > 1"]) == 1
    refused = capsys.readouterr().err
    assert "the database refuses" in refused and "nope > 1" in refused, refused
    assert cdcflow_main(["snapshot", str(file), f"{keyspace}.items", "--where", "v > 1; DROP TABLE x"]) == 1
    assert "give one CQL condition" in capsys.readouterr().err
    assert cdcflow_main(["snapshot", str(file), f"{keyspace}.other"]) == 1
    assert f"does not emit {keyspace}.other" in capsys.readouterr().err
    assert live_snapshot_of(runner_for(file).store.load()["node1"]) is None  # nothing was queued
    _snapshot(file, f"{keyspace}.items", "--where", "total >= 1000")

    runner = runner_for(file)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: live_snapshot_of(_node_checkpoint(runner)) is None, 120, "the snapshot")
    assert not pipeline.failure, pipeline.failure
    rows = [e for e in written(tmp_path / "out" / "changes.jsonl")[before:] if e.op == "r"]
    assert sorted(e.id for e in rows) == [i for i in sorted(tokens) if i * 10 >= 1000]


def _committed_live_states(runner: Any) -> list[Any]:
    """Every live snapshot state ``runner`` commits for the node partition, as it commits it."""
    seen: list[Any] = []
    commit = runner.store.commit

    def recording(checkpoints: Any) -> None:
        commit(checkpoints)
        if "node1" in checkpoints:
            seen.append(live_snapshot_of(checkpoints["node1"]))

    runner.store.commit = recording
    return seen


def test_when_needed_snapshots_a_new_pipeline_and_one_whose_segment_is_gone(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    tokens = _table(cassandra_session, keyspace, rows=60)
    file = _pipeline(tmp_path, cdc_raw_dir, keyspace, snapshot="when_needed")
    out = tmp_path / "out" / "changes.jsonl"
    table = f"{keyspace}.items"

    def snapshotted(runner: Any, since: int) -> bool:
        delivered = {e.id for e in written(out)[since:] if e.op in ("r", "c")}
        return live_snapshot_of(_node_checkpoint(runner)) is None and delivered >= set(tokens)

    # A new pipeline: its stream partition starts with a live snapshot of every table.
    runner = runner_for(file)
    states = _committed_live_states(runner)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: bool(states) and snapshotted(runner, 0), 180, "the first snapshot")
    assert not pipeline.failure, pipeline.failure
    assert states[0] is not None and states[0]["queue"][0]["table"] == table
    first = len(written(out))

    # Committed in a segment cdc_raw no longer has, not read whole: its changes are gone.
    moved = ["offsets", "set", str(file), "--partition", "node1", "--offset", '{"segment": 7, "position": 100}']
    assert cdcflow_main(moved) == 0
    runner = runner_for(file)
    states = _committed_live_states(runner)
    lost = METRICS_REGISTRY.get_sample_value(
        "cdcflow_source_counted_total", {"pipeline": f"live-{keyspace}", "what": "log_lost_snapshot"}
    )
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: bool(states) and snapshotted(runner, first), 180, "the snapshot of a lost position")
    assert not pipeline.failure, pipeline.failure
    assert states[0] is not None and states[0]["queue"][0]["table"] == table
    assert (
        METRICS_REGISTRY.get_sample_value(
            "cdcflow_source_counted_total", {"pipeline": f"live-{keyspace}", "what": "log_lost_snapshot"}
        )
        == (lost or 0) + 1
    )

    # Committed at the end of a segment read whole (and deleted since): nothing is gone, no snapshot.
    moved = ["offsets", "set", str(file), "--partition", "node1", "--offset"]
    assert cdcflow_main([*moved, '{"segment": 7, "position": 100, "segment_read": true}']) == 0
    runner = runner_for(file)
    states = _committed_live_states(runner)
    with running(runner) as pipeline:
        pipeline.wait_for(lambda: len(states) >= 2, 60, "two checkpoints")
    assert not pipeline.failure, pipeline.failure
    assert states == [None] * len(states)


def test_a_group_member_takes_a_live_snapshot_through_its_rest_api_from_an_operator(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """POST /pipelines/{name}/snapshots (cdcflow snapshot NAME TABLE --url): 401 without credentials,
    403 for a viewer, queued and committed by the partition's owner for an operator; its progress in
    the pipeline's status while it runs; a bad condition refused with the database's reason."""
    newest = _newest_segment(cdc_raw_dir)
    tokens = _table(cassandra_session, keyspace, rows=100)
    table, name = f"{keyspace}.items", f"live-{keyspace}"
    operator, viewer = "Operator-Token-live-0123456789", "Viewer-Password-live"
    (tmp_path / "rest-secrets.properties").write_text(f"ann = {viewer}\nci-token = {operator}\n")
    group = group_section(kafka_bootstrap, f"grp-{topic_prefix}", "kafka", 2).replace(
        'rest: {port: "${REST_PORT:-8083}"}',
        'rest: {port: "${REST_PORT:-8083}", '
        "auth: {users: {ann: {password: '${file:rest-secrets.properties:ann}', role: viewer}}, "
        "tokens: {ci: {token: '${file:rest-secrets.properties:ci-token}', role: operator}}}}",
    )
    source = {
        "type": "cassandra_commitlog",
        "cdc_raw": str(cdc_raw_dir),
        "cluster": "live",
        "node": "node1",
        "tables": [table],
        "processed_segments": "keep",
        "error_store": {"type": "file", "path": "errors.jsonl"},
        "snapshot_chunk_rows": 10,
    }
    file = tmp_path / "group.yaml"
    file.write_text(
        f"name: {name}\n"
        f"source: {json.dumps(source)}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        f"checkpoint: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', topic: {topic_prefix}-offsets, "
        "interval_ms: 200}\n"
        f"engine:\n  poll_interval_ms: 50\n  group: {group}\n"
    )
    _starting_at(file, newest)
    members = Group(file, tmp_path)
    member = members.start("w0")
    url = f"http://127.0.0.1:{member.port}"
    out = tmp_path / "out" / "changes.jsonl"
    bearer = {"Authorization": f"Bearer {operator}"}

    def status() -> dict[str, Any]:
        answer: dict[str, Any] = requests.get(f"{url}/pipelines/{name}/status", headers=bearer, timeout=10).json()
        return answer

    def cdcflow(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cdcflow.cli", "snapshot", name, table, *args, "--url", url]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    try:
        members.wait_until(lambda: {e.id for e in written(out) if e.op == "c"} >= set(tokens), 120, "the inserts")
        before = len(written(out))
        body = {"table": table}
        assert requests.post(f"{url}/pipelines/{name}/snapshots", json=body, timeout=30).status_code == 401
        as_viewer = requests.post(f"{url}/pipelines/{name}/snapshots", json=body, auth=("ann", viewer), timeout=30)
        assert as_viewer.status_code == 403, as_viewer.text
        refused = cdcflow("--where", "nope = 1", "--token", operator)
        assert refused.returncode == 1 and "400" in refused.stderr and "refuses" in refused.stderr, refused.stderr

        asked = cdcflow("--token", operator)
        assert asked.returncode == 0, asked.stderr + member.log_text()[-3000:]
        assert f"of {table} queued in 1 partitions" in asked.stdout
        # Committed before the answer: the partition's checkpoint holds the request.
        progress: list[Any] = []

        def reading() -> bool:
            shown = status()["partitions"].get("node1", {}).get("live_snapshots", [])
            progress.extend(shown)
            return bool(shown)

        members.wait_until(reading, 30, "the snapshot's progress in the status")
        assert progress[0]["table"] == table and progress[0]["state"] == "READING"
        members.wait_until(
            lambda: (
                {e.id for e in written(out)[before:] if e.op == "r"} == set(tokens)
                and "live_snapshots" not in status()["partitions"]["node1"]
            ),
            120,
            "every row of the snapshot",
        )
        assert max(p["done"] for p in progress) < 1
    finally:
        members.kill_all()
