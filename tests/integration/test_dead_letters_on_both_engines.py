"""errors.tolerance and the dead letters behave the same on both engines (cdcflow.record_errors is
the one place for them): the same records go aside with the same headers, the rest is delivered."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_helpers import run_cdcflow

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COUNT = 1500


def pipeline(tmp_path: Path, engine: str, tolerance: str) -> Path:
    """datagen through a mask that cannot drop table_2's key column: each table_2 event fails at
    the transform."""
    file = tmp_path / f"{engine}-{tolerance}.yaml"
    file.write_text(
        f"name: dead-letters-{engine}-{tolerance}\n"
        f"source: {{type: datagen, count: {COUNT}, partitions: 3, tables: 3}}\n"
        "transforms: [{type: mask, columns: [table_2.id], mode: drop}]\n"
        f"sink: {{type: file, path: {engine}-{tolerance}.jsonl}}\n"
        f"checkpoint: {{type: file, path: {engine}-{tolerance}-ckpt}}\n"
        f"errors: {{tolerance: {tolerance}, dead_letter: {{type: file, path: {engine}-{tolerance}-dead.jsonl}}}}\n"
        + (
            "engine: {type: spark, master: 'local[2]', batch_size: 100}\n"
            if engine == "spark"
            else "engine: {type: worker, batch_size: 100}\n"
        )
    )
    return file


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def changes(found: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """Change events (not schema changes) by destination, key and op."""
    return Counter(
        (line["destination"], json.dumps(line["key"]), line["value"]["op"]) for line in found if "op" in line["value"]
    )


def test_tolerance_all_sends_the_same_records_aside_on_both_engines(tmp_path: Path) -> None:
    for engine in ("worker", "spark"):
        result = run_cdcflow("run", str(pipeline(tmp_path, engine, "all")))
        assert result.returncode == 0, result.stderr[-3000:]

    delivered = {e: changes(lines(tmp_path / f"{e}-all.jsonl")) for e in ("worker", "spark")}
    dead = {e: lines(tmp_path / f"{e}-all-dead.jsonl") for e in ("worker", "spark")}
    aside = {e: changes(dead[e]) for e in dead}
    assert delivered["spark"] == delivered["worker"]
    assert aside["spark"] == aside["worker"]
    assert sum(delivered["worker"].values()) + sum(aside["worker"].values()) == COUNT
    assert aside["worker"] and {d for d, _, _ in aside["worker"]} == {"datagen.shop.table_2"}
    for engine, letters in dead.items():
        headers = [line["headers"] for line in letters if "op" in line["value"]]
        assert {h["cdcflow.error.stage"] for h in headers} == {"transform:mask"}, engine
        assert {h["cdcflow.error.pipeline"] for h in headers} == {f"dead-letters-{engine}-all"}


def test_tolerance_none_stops_both_engines_at_the_first_failed_record(tmp_path: Path) -> None:
    for engine in ("worker", "spark"):
        result = run_cdcflow("run", str(pipeline(tmp_path, engine, "none")))
        assert result.returncode != 0, engine
        assert "a record failed at transform:mask" in result.stderr, result.stderr[-3000:]
        assert not lines(tmp_path / f"{engine}-none-dead.jsonl")
