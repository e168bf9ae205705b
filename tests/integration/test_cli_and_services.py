"""Small things that add up: `cdcflow offsets show X | head` ends quietly, and
`scripts/services.sh status` prints each service's state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow.checkpoints import FileCheckpointConfig, FileCheckpointStore
from cdcflow.contract import Checkpoint, PluginContext
from tests.integration.conftest import REPO


def test_offsets_show_into_head_ends_quietly(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: many\nsource: {type: datagen, count: 1}\nsink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ckpt, fsync: false}\n"
    )
    store = FileCheckpointStore(
        FileCheckpointConfig(type="file", path=tmp_path / "ckpt", fsync=False), PluginContext("many", file)
    )
    store.open()
    # Far more than a pipe holds (64 KiB), so the reader is gone while cdcflow still writes.
    store.commit({f"partition-{i}": Checkpoint({"seq": i}, 1_000_000 * i, 2_000_000 * i) for i in range(3000)})
    result = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m cdcflow.cli offsets show "{file}" | head -n 3'],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout.splitlines() == ["{", '  "pipeline": "many",', '  "partitions": {']
    assert result.stderr == ""  # no BrokenPipeError, no traceback


@pytest.mark.kafka
def test_services_status_prints_each_services_state(tmp_path: Path, kafka_bootstrap: str) -> None:
    script = REPO / "scripts" / "services.sh"
    running = subprocess.run(
        ["bash", str(script), "status", "kafka"], capture_output=True, text=True, timeout=120, check=False
    )
    assert running.returncode == 0
    assert running.stdout.split() == ["kafka", "running", "127.0.0.1:9092"]

    # Nothing runs from an empty data folder: every service says so, and status fails.
    nothing = subprocess.run(
        ["bash", str(script), "status"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "CDCFLOW_DATA": str(tmp_path)},
    )
    assert nothing.returncode == 1
    assert [line.split() for line in nothing.stdout.splitlines()] == [
        [service, "stopped"]
        for service in ("kafka", "registry", "cassandra", "kafka-secure", "spark-cluster", "cassandra-ring")
    ]
