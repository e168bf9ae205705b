"""The file checkpoint store: round trips, resets, and atomic replacement under a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdcflow.checkpoints import FileCheckpointConfig, FileCheckpointStore
from cdcflow.contract import Checkpoint, PluginContext
from cdcflow.errors import CheckpointCorruptError


def store(folder: Path) -> FileCheckpointStore:
    s = FileCheckpointStore(FileCheckpointConfig(type="file", path=folder), PluginContext("p", folder / "p.yaml"))
    s.open()
    return s


def checkpoint(n: int) -> Checkpoint:
    return Checkpoint({"seq": n, "ts_us": n * 10}, n * 10, 1000 + n)


def test_round_trip_with_awkward_partition_ids(tmp_path: Path) -> None:
    ids = ["a/b", "host:9042", "with space", "ünïcode", "%41"]
    store(tmp_path).commit({pid: checkpoint(i) for i, pid in enumerate(ids)})
    assert store(tmp_path).load() == {pid: checkpoint(i) for i, pid in enumerate(ids)}


def test_commit_replaces_only_the_given_partitions(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.commit({"p0": checkpoint(1), "p1": checkpoint(2)})
    s.commit({"p1": checkpoint(3)})
    assert s.load() == {"p0": checkpoint(1), "p1": checkpoint(3)}


def test_reset_one_and_all(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.commit({"p0": checkpoint(1), "p1": checkpoint(2)})
    s.reset(["p0"])
    assert s.load() == {"p1": checkpoint(2)}
    s.reset()
    assert s.load() == {}


@pytest.mark.parametrize("failing", ["os.replace", "os.fsync"])
def test_a_crash_mid_write_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    s = store(tmp_path)
    s.commit({"p0": checkpoint(1)})

    def crash(*args: object) -> None:
        raise OSError("simulated power cut")

    monkeypatch.setattr(failing, crash)
    with pytest.raises(Exception, match="simulated power cut"):
        s.commit({"p0": checkpoint(2)})
    monkeypatch.undo()
    assert store(tmp_path).load() == {"p0": checkpoint(1)}


def test_a_corrupt_file_is_named(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.commit({"p0": checkpoint(1)})
    [file] = list(tmp_path.glob("*.checkpoint.json"))
    file.write_text('{"offset": ')
    with pytest.raises(CheckpointCorruptError) as caught:
        s.load()
    assert str(file) in str(caught.value)
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))
