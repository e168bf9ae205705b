"""``cdcflow offsets`` on a stopped pipeline (file checkpoints, no services): it changes what the
next run starts from, refuses partitions the source does not have, and refuses a running pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.config import load_pipeline
from cdcflow.offsets import pipeline_running
from cdcflow.plugins import PluginRegistry


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\n"
        "source: {type: datagen, count: 90, partitions: 3}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ck, fsync: false}\n"
    )
    assert main(["run", str(file)]) == 0
    return file


def shown(file: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    capsys.readouterr()
    assert main(["offsets", "show", str(file)]) == 0
    return {pid: c["offset"]["seq"] for pid, c in json.loads(capsys.readouterr().out)["partitions"].items()}


def test_set_and_reset_change_where_the_next_run_starts(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shown(pipeline, capsys) == {"datagen-0": 30, "datagen-1": 30, "datagen-2": 30}
    offset = json.dumps({"seq": 25, "ts_us": 1, "epoch_us": 1})
    assert main(["offsets", "set", str(pipeline), "--partition", "datagen-1", "--offset", offset]) == 0
    assert main(["offsets", "reset", str(pipeline), "--partition", "datagen-2"]) == 0
    assert shown(pipeline, capsys) == {"datagen-0": 30, "datagen-1": 25}
    assert main(["run", str(pipeline)]) == 0
    lines = [json.loads(line) for line in (pipeline.parent / "out.jsonl").read_text().splitlines()]
    replayed = [line["value"]["source"]["partition"] for line in lines[90:]]
    by_partition = {p: replayed.count(p) for p in ("datagen-0", "datagen-1", "datagen-2")}
    assert by_partition == {"datagen-0": 0, "datagen-1": 5, "datagen-2": 30}


def test_unknown_partitions_are_refused(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offsets", "reset", str(pipeline), "--partition", "datagen-9"]) == 1
    assert "has no partition datagen-9; its partitions: datagen-0, datagen-1, datagen-2" in capsys.readouterr().err
    assert shown(pipeline, capsys) == {"datagen-0": 30, "datagen-1": 30, "datagen-2": 30}


def test_a_running_pipeline_is_refused(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_pipeline(pipeline, PluginRegistry.from_entry_points())
    with pipeline_running(spec):  # as `cdcflow run` holds it
        assert main(["offsets", "reset", str(pipeline)]) == 1
    assert "pipeline p is running" in capsys.readouterr().err
    assert main(["offsets", "reset", str(pipeline)]) == 0
    assert shown(pipeline, capsys) == {}
