"""``cdcflow commitlog dump``: a segment's mutations as JSON lines, decoded with a saved schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cdcflow.cli import main
from tests.commitlog_cases import by_case, in_order
from tests.paths import COMMITLOG_FIXTURES

FIXTURE = COMMITLOG_FIXTURES / "v8-lz4"


def _segment() -> Path:
    [segment] = sorted(FIXTURE.glob("CommitLog-*.log"))
    return segment


def test_dump_prints_every_change_of_the_segment(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["commitlog", "dump", str(_segment()), "--schema-from", str(FIXTURE / "schema.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    changes = [change for line in lines for change in line["changes"]]
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert by_case(changes) == {case: in_order(case, found) for case, found in expected.items()}
    positions = [line["position"] for line in lines]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert "0 faults" in err


def test_dump_of_a_damaged_segment_reports_the_fault_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(_segment().read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the compressed data of some section
    damaged = tmp_path / _segment().name
    damaged.write_bytes(bytes(data))
    code = main(["commitlog", "dump", str(damaged), "--schema-from", str(FIXTURE / "schema.json")])
    out, err = capsys.readouterr()
    assert code == 1
    assert any("error" in json.loads(line) for line in out.splitlines())
    faults = re.search(r"(\d+) faults", err)
    assert faults is not None and int(faults.group(1)) >= 1
