"""A third-party plugin package, pip-installed, is listed and runs in a pipeline like a built-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

distribution("cdcflow-example-plugin")  # tests/conftest.py installs it for the test run


def cdcflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdcflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_listed_with_its_package() -> None:
    listing = cdcflow("plugins", "list").stdout.splitlines()
    assert any(line.split()[:2] == ["source", "countdown"] and "cdcflow-example-plugin" in line for line in listing)
    assert any(line.split()[:2] == ["transform", "uppercase"] for line in listing)


def test_the_listing_says_which_core_runs() -> None:
    from cdcflow.native import native_module

    core = [line for line in cdcflow("plugins", "list").stdout.splitlines() if line.startswith("core ")]
    assert len(core) == 1 and ("compiled (cdcflow._native" in core[0]) == (native_module() is not None)
    pure = cdcflow("plugins", "list", env={**os.environ, "CDCFLOW_PURE_PYTHON": "1"}).stdout
    assert "core        pure Python (CDCFLOW_PURE_PYTHON is set)" in pure


def test_autoload_switch_keeps_only_builtins() -> None:
    listing = cdcflow("plugins", "list", env={**os.environ, "CDCFLOW_DISABLE_PLUGIN_AUTOLOAD": "1"}).stdout
    assert "countdown" not in listing and "datagen" in listing


def test_runs_in_a_pipeline(tmp_path: Path) -> None:
    file = tmp_path / "countdown.yaml"
    file.write_text(
        "name: countdown\n"
        "source: {type: countdown, partitions: 3, per_partition: 7}\n"
        "transforms: [{type: uppercase, column: word}]\n"
        "sink: {type: file, path: out.jsonl}\n"
    )
    result = cdcflow("run", str(file))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["key"]["id"] for r in rows) == sorted(f"{p}-{n}" for p in range(3) for n in range(1, 8))
    assert all(r["value"]["after"]["word"] == r["value"]["after"]["word"].upper() for r in rows)
    assert {r["value"]["after"]["word"] for r in rows} == {f"COUNT {k}" for k in range(1, 8)}
    offsets = json.loads(cdcflow("offsets", "show", str(file)).stdout)["partitions"]
    assert {pid: o["offset"]["n"] for pid, o in offsets.items()} == {f"countdown-{p}": 7 for p in range(3)}


def test_its_capabilities_are_found_by_protocol(tmp_path: Path) -> None:
    from cdcflow_example_plugin import CountdownConfig, CountdownSource

    from cdcflow.capabilities import FinitePartitions, ReadsEventBatches, ReportsWatermarks, is_finished, watermark_of
    from cdcflow.contract import Partition, PluginContext

    source = CountdownSource(
        CountdownConfig(type="countdown", per_partition=3), PluginContext("t", tmp_path / "t.yaml")
    )
    assert isinstance(source, FinitePartitions) and isinstance(source, ReportsWatermarks)
    assert not isinstance(source, ReadsEventBatches)
    partition = Partition("countdown-0", {"index": 0})
    assert watermark_of(source, partition, {"n": 2}) == 2
    assert [is_finished(source, partition, {"n": n}) for n in (2, 3)] == [False, True]
