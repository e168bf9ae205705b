"""The pipeline watermark: one rule (cdcflow.watermarks), which both engines apply to their partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import parse_pipeline
from cdcflow.contract import Partition, PluginContext
from cdcflow.pipeline import _PartitionState, build_runner
from cdcflow.plugins import PluginRegistry
from cdcflow.sources.datagen.source import DatagenConfig, DatagenSource
from cdcflow.watermarks import pipeline_watermark

# (watermark_us, finished) per partition, and the pipeline's watermark the rule gives: the lowest
# running partition holds it back; finished ones do not; all finished: the last of them.
CASES = [
    ([], None),
    ([(None, False), (None, True)], None),
    ([(300, False), (500, True), (400, False)], 300),
    ([(700, True), (200, False)], 200),
    ([(700, True), (900, True)], 900),
    ([(None, False), (900, True)], 900),  # a running partition with no watermark yet holds nothing back
    ([(600, False), (None, False)], 600),
]


@pytest.mark.parametrize(("partitions", "expected"), CASES)
def test_the_pipeline_watermark_rule(partitions: list[tuple[int | None, bool]], expected: int | None) -> None:
    assert pipeline_watermark(partitions) == expected


@pytest.fixture
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def datagen_at(tmp_path: Path) -> tuple[DatagenSource, dict[str, Partition]]:
    """A bounded datagen of 3 partitions with 10 events each."""
    source = DatagenSource(
        DatagenConfig(type="datagen", count=30, partitions=3), PluginContext("p", tmp_path / "p.yaml")
    )
    return source, {p.id: p for p in source.partitions()}


def ends(partitions: dict[str, Partition], seq_and_ts: list[tuple[int, int]]) -> dict[str, dict[str, int]]:
    return {
        pid: {"epoch_us": 0, "seq": seq, "ts_us": ts} for pid, (seq, ts) in zip(partitions, seq_and_ts, strict=True)
    }


# Per datagen partition (10 events each): how far read (seq) and the time of the last event read.
POSITIONS = [
    ([(10, 900), (4, 300), (7, 400)], 300),  # the first finished: the slowest running one counts
    ([(10, 900), (10, 500), (2, 100)], 100),
    ([(10, 900), (10, 500), (10, 700)], 900),  # drained: the last finished one
]


@pytest.mark.parametrize(("positions", "expected"), POSITIONS)
def test_both_engines_give_the_same_pipeline_watermark(
    tmp_path: Path, registry: PluginRegistry, positions: list[tuple[int, int]], expected: int
) -> None:
    from cdcflow.spark_engine.runner import _DriverView

    source, partitions = datagen_at(tmp_path)
    end = ends(partitions, positions)
    spark = _DriverView(source).watermark(end)

    runner = build_runner(
        parse_pipeline(
            {
                "name": "p",
                "source": {"type": "datagen", "count": 30, "partitions": 3},
                "sink": {"type": "file", "path": str(tmp_path / "out.jsonl")},
                "checkpoint": {"type": "file", "path": str(tmp_path / "ckpt")},
            },
            tmp_path / "p.yaml",
            registry,
        ),
        registry,
    )
    runner._states = {
        pid: _PartitionState(
            partitions[pid],
            offset,
            None,
            watermark_us=source.watermark(partitions[pid], offset),
            finished=source.is_finished(partitions[pid], offset),
        )
        for pid, offset in end.items()
    }
    assert spark == runner._pipeline_watermark() == expected
