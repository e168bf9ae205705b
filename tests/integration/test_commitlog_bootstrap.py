"""``cdcflow bootstrap``: a table's existing rows, read by token slices from the real node, as ``op: r``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.commitlog_cases import CASES, normalized
from tests.integration.conftest import REPO


def _pipeline(folder: Path, cdc_raw: Path) -> Path:
    file = folder / "orders.yaml"
    file.write_text(
        "name: orders\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{cdc_raw}', cluster: snap,"
        " error_store: {type: file, path: errors.jsonl}}\n"
        "sink: {type: file, path: out/changes.jsonl}\n"
        "checkpoint: {type: file, path: ckpt}\n"
    )
    return file


def _bootstrap(file: Path, table: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", "bootstrap", str(file), "--table", table, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _events(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "out" / "changes.jsonl").read_text().splitlines()
    return [json.loads(line)["value"] for line in lines]


def test_every_row_once_with_the_values_the_commit_log_gives(
    tmp_path: Path, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    session = cassandra_session
    [expected_every_type] = CASES["every_type"](session, keyspace)
    session.execute(
        f"CREATE TABLE {keyspace}.lines (tenant text, id int, seq int, qty int, tags set<text>,"
        " PRIMARY KEY ((tenant, id), seq)) WITH cdc = true"
    )
    insert = session.prepare(f"INSERT INTO {keyspace}.lines (tenant, id, seq, qty, tags) VALUES (?, ?, ?, ?, ?)")
    rows = {(f"t{i % 7}", i, i % 3): (i * 2, {f"tag{i % 5}"}) for i in range(1500)}
    for (tenant, id_, seq), (qty, tags) in rows.items():
        session.execute(insert, (tenant, id_, seq, qty, tags))
    file = _pipeline(tmp_path, cdc_raw_dir)

    first = _bootstrap(file, f"{keyspace}.lines", "--ranges", "16", "--workers", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    events = _events(tmp_path)
    assert all(e["op"] == "r" and e["source"]["snapshot"] for e in events)
    got = {(e["after"]["tenant"], e["after"]["id"], e["after"]["seq"]): e for e in events}
    assert len(events) == len(rows) == len(got)
    assert {k: (e["after"]["qty"], set(e["after"]["tags"])) for k, e in got.items()} == rows

    again = _bootstrap(file, f"{keyspace}.lines", "--ranges", "16")
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(_events(tmp_path)) == len(rows), "every slice was checkpointed: a second run reads nothing"

    every_type = _bootstrap(file, f"{keyspace}.every_type", "--ranges", "4")
    assert every_type.returncode == 0, every_type.stderr[-3000:]
    [row] = [e for e in _events(tmp_path) if e["source"]["table"] == "every_type"]
    # The same values, types and encodings as the commit-log path decodes from storage.
    after = normalized(row["after"])
    assert {k: v for k, v in after.items() if k != "k"} == expected_every_type["after"]
