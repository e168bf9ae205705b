"""``cdcflow doctor`` and the start-up checks of the ``cassandra_commitlog`` source on the real node
(issue 27, item 1), and its data-loss headroom: cdc_raw's room at the node's write rate (item 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cdcflow.contract import PluginContext
from cdcflow.sources.cassandra_commitlog.cdc_space import cdc_raw_bytes, parse_data_storage
from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSource, CassandraCommitLogSourceConfig
from tests.integration.doctor_helpers import cdcflow, doctor


def _pipeline(folder: Path, cdc_raw: Path, tables: list[str], **source: Any) -> Path:
    file = folder / "pipeline.yaml"
    section = {"type": "cassandra_commitlog", "cdc_raw": str(cdc_raw), "tables": tables, **source}
    file.write_text(
        f"name: doctor-{folder.name[-20:].replace('_', '-')}\n"
        f"source: {json.dumps(section)}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, fsync: false}\n"
    )
    return file


def test_doctor_refuses_a_commitlog_pipeline_for_a_table_with_cdc_off(
    cassandra_session: Any, keyspace: str, cdc_raw_dir: Path, tmp_path: Path
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, total int) WITH cdc = true")
    session.execute(f"CREATE TABLE {keyspace}.lines (id int PRIMARY KEY, sku text)")  # cdc off
    file = _pipeline(tmp_path, cdc_raw_dir, [f"{keyspace}.orders", f"{keyspace}.lines"])

    table = cdcflow("doctor", str(file), cwd=tmp_path)
    assert table.returncode == 1, table.stdout + table.stderr
    failed = [line for line in table.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert len(failed) == 1 and f"CDC on for {keyspace}.lines" in failed[0], table.stdout
    assert "cdc = false" in table.stdout and f"ALTER TABLE {keyspace}.lines WITH cdc = true" in table.stdout

    _, checks, _ = doctor(file)
    assert checks[f"CDC on for {keyspace}.orders"]["status"] == "ok"
    assert checks[f"CDC on for {keyspace}.lines"]["status"] == "fail"
    # The node's own settings, read back by the test: CDC on, this very cdc_raw, room left.
    assert checks["the node's cdc_enabled"]["status"] == "ok"
    assert checks["cdc_raw readable"]["status"] == "ok"
    assert checks["cdc_raw on node 127.0.0.1"]["status"] == "ok"
    total = parse_data_storage(
        session.execute("SELECT value FROM system_views.settings WHERE name = 'cdc_total_space'").one()[0]
    )
    assert total is not None
    assert f"of cdc_total_space {total >> 20} MiB" in checks["cdc_raw's room under cdc_total_space"]["detail"]

    session.execute(f"ALTER TABLE {keyspace}.lines WITH cdc = true")
    fixed = cdcflow("doctor", str(file), cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "FAIL" not in fixed.stdout


def test_run_refuses_at_start_a_table_with_cdc_off_naming_it(
    cassandra_session: Any, keyspace: str, cdc_raw_dir: Path, tmp_path: Path
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.lines (id int PRIMARY KEY, sku text)")  # cdc off
    file = _pipeline(tmp_path, cdc_raw_dir, [f"{keyspace}.lines"], processed_segments="keep")

    refused = cdcflow("run", str(file), cwd=tmp_path)
    assert refused.returncode != 0
    assert "PrerequisiteFailedError" in refused.stderr
    assert f"CDC on for {keyspace}.lines" in refused.stderr and "cdc = false" in refused.stderr
    out = tmp_path / "out.jsonl"
    assert _changes(out) == []

    # The same file once CDC is on: it runs, and delivers the table's changes.
    session.execute(f"ALTER TABLE {keyspace}.lines WITH cdc = true")
    running = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        session.execute(f"INSERT INTO {keyspace}.lines (id, sku) VALUES (1, 'a')")
        deadline = time.monotonic() + 60
        while not _changes(out) and running.poll() is None:
            assert time.monotonic() < deadline, "the insert was not delivered within 60 s"
            time.sleep(0.5)
    finally:
        running.terminate()
        _, errors = running.communicate(timeout=60)
    assert running.returncode == 0, errors
    assert _changes(out) == [("c", {"id": 1, "sku": "a"})]


def _changes(out: Path) -> list[tuple[str, Any]]:
    """The row changes the file sink wrote (schema changes left out), as (op, after)."""
    if not out.exists():
        return []
    records = [json.loads(line)["value"] for line in out.read_text().splitlines()]
    return [(r["op"], r["after"]) for r in records if "op" in r]


def test_doctor_says_when_cdc_raw_cannot_be_read(cassandra_session: Any, keyspace: str, tmp_path: Path) -> None:
    cassandra_session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY) WITH cdc = true")
    file = _pipeline(tmp_path, tmp_path / "no-such-dir", [f"{keyspace}.orders"])
    code, checks, _ = doctor(file)
    assert code == 1
    check = checks["cdc_raw readable"]
    assert check["status"] == "fail" and "does not exist" in check["detail"], check


def test_the_headroom_is_cdc_raw_room_at_the_nodes_write_rate(
    cassandra_session: Any, keyspace: str, cdc_raw_dir: Path, tmp_path: Path
) -> None:
    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.blobs (id int PRIMARY KEY, payload blob) WITH cdc = true")
    config = CassandraCommitLogSourceConfig.model_validate(
        {
            "type": "cassandra_commitlog",
            "cdc_raw": str(cdc_raw_dir),
            "tables": [f"{keyspace}.blobs"],
            "node": "node1",
            "processed_segments": "keep",
            "error_store": {"type": "file", "path": str(tmp_path / "errors.jsonl")},
        }
    )
    source = CassandraCommitLogSource(config, PluginContext("headroom", tmp_path / "p.yaml"))
    began = time.monotonic()
    source.open()  # reads cdc_total_space and takes the first sample of cdc_raw
    try:
        (node,) = source.partitions()
        assert source.data_loss_headroom(node, {"segment": 0, "position": 0}) is None  # one sample: no rate yet
        insert = session.prepare(f"INSERT INTO {keyspace}.blobs (id, payload) VALUES (?, ?)")
        written = 0
        for i in range(400):
            session.execute(insert, (i, bytes(2048)))
            written += 2048
        # The node syncs its commit log (and the _cdc.idx offsets) every second; the rate needs
        # three sync periods of samples.
        time.sleep(3.5)
        headroom = source.data_loss_headroom(node, {"segment": 0, "position": 0})
        elapsed = time.monotonic() - began
    finally:
        source.close()
    assert headroom is not None and headroom.reason == "cdc_raw_full"
    total = parse_data_storage(
        session.execute("SELECT value FROM system_views.settings WHERE name = 'cdc_total_space'").one()[0]
    )
    assert total is not None
    # The node wrote at least our payloads into cdc_raw meanwhile: the headroom is at most the
    # room left at that rate, and the room is what cdc_raw's segments leave of cdc_total_space.
    room = total - cdc_raw_bytes(cdc_raw_dir)
    assert 0 < headroom.seconds < math.inf
    assert headroom.seconds <= max(room, 0) / (written / elapsed) * 1.05, (headroom, room, written, elapsed)
    assert f"of {total >> 20} MiB" in headroom.detail
