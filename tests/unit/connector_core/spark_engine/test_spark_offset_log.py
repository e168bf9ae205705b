"""Spark's offset log (``offsets/<batch>``, ``commits/<batch>`` in a query's checkpoint folder) has
one reader, cdcflow.spark_engine.offsets: the spark engine's start, its micro-batches and
``cdcflow offsets`` read it alike, and refuse a log they cannot read in the same words."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.config import PipelineSpec, load_pipeline
from cdcflow.errors import CheckpointCorruptError
from cdcflow.plugins import PluginRegistry
from cdcflow.spark_engine.offsets import batch_end_offsets, last_committed_batch

VERSION, METADATA = "v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})


def drained_datagen_offsets() -> dict[str, dict[str, int]]:
    """Where a datagen of 30 events over 3 partitions ends: 10 events each."""
    return {f"datagen-{i}": {"epoch_us": 1, "seq": 10, "ts_us": 1000 + i} for i in range(3)}


def log_batch(location: Path, batch: int, *lines: str, committed: bool = True) -> None:
    """Write ``offsets/<batch>`` as Spark does (a version line, the batch metadata, the source's
    offsets) and, once committed, ``commits/<batch>``."""
    (location / "offsets").mkdir(parents=True, exist_ok=True)
    (location / "offsets" / str(batch)).write_text("\n".join(lines))
    if committed:
        (location / "commits").mkdir(parents=True, exist_ok=True)
        (location / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


@pytest.fixture
def spark_pipeline(tmp_path: Path) -> tuple[PipelineSpec, PluginRegistry]:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\n"
        "source: {type: datagen, count: 30, partitions: 3}\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: ck}\n"
        "engine: {type: spark, master: 'local[1]'}\n"
    )
    registry = PluginRegistry.from_entry_points()
    return load_pipeline(file, registry), registry


def test_the_reader_gives_the_newest_committed_batch_and_any_batchs_end_offsets(tmp_path: Path) -> None:
    ends = drained_datagen_offsets()
    log_batch(tmp_path, 0, VERSION, METADATA, json.dumps({"datagen-0": {"seq": 0}}))
    log_batch(tmp_path, 1, VERSION, METADATA, json.dumps(ends))
    log_batch(tmp_path, 2, VERSION, METADATA, json.dumps({"datagen-0": {"seq": 99}}), committed=False)
    assert last_committed_batch(tmp_path) == (1, ends)
    assert batch_end_offsets(tmp_path, 2) == {"datagen-0": {"seq": 99}}  # planned, running: its end is logged
    assert last_committed_batch(tmp_path / "nothing-yet") is None


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ((VERSION, METADATA, json.dumps(drained_datagen_offsets()), json.dumps({"other": 1})), "found 4 lines"),
        ((VERSION, METADATA), "found 2 lines"),
        ((VERSION, METADATA, "{not json"), "are not JSON"),
    ],
)
def test_the_engine_and_the_offsets_command_refuse_an_unreadable_log_alike(
    spark_pipeline: tuple[PipelineSpec, PluginRegistry],
    capsys: pytest.CaptureFixture[str],
    lines: tuple[str, ...],
    why: str,
) -> None:
    spec, registry = spark_pipeline
    location = spec.file.parent / "ck"
    log_batch(location, 0, *lines)
    from cdcflow.spark_engine.runner import run_spark_pipeline

    # The engine reads the log before it starts Spark: a log it cannot read stops it there.
    with pytest.raises(CheckpointCorruptError, match=why) as refused:
        run_spark_pipeline(spec, registry, threading.Event())
    assert f"{location}/offsets/0" in str(refused.value)
    assert main(["offsets", "show", str(spec.file)]) == 1
    assert f"{location}/offsets/0" in capsys.readouterr().err
