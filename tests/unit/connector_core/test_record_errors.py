"""errors.tolerance and errors.dead_letter are one rule (cdcflow.record_errors) for the worker loop
and for the spark engine's tasks: the source side's (records read and transformed in a Spark task)
and a generic sink's (records written from a Spark task)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cdcflow.config import PipelineSpec, parse_pipeline
from cdcflow.contract import PluginContext, Rejected
from cdcflow.errors import SourceDataError
from cdcflow.events import Record
from cdcflow.plugins import PluginRegistry
from cdcflow.record_errors import (
    DEAD_LETTER_STAGE_HEADER,
    SOURCE_STAGE,
    RecordFailedError,
    task_rejections,
)
from cdcflow.sinks.file.sink import FileSink, FileSinkConfig
from cdcflow.sources.datagen.source import DatagenConfig, DatagenSource


def events(tmp_path: Path, count: int) -> list[Record]:
    source = DatagenSource(DatagenConfig(type="datagen", count=count, partitions=1), PluginContext("p", tmp_path))
    [partition] = source.partitions()
    start = source.initial_offset(partition)
    return list(source.read(partition, start, source.latest_offset(partition, start, None)))


def unreadable(records: list[Record]) -> list[Rejected]:
    return [Rejected(r, SourceDataError(f"record {i} unreadable"), SOURCE_STAGE) for i, r in enumerate(records)]


def spec(tmp_path: Path, errors: dict[str, object], batch_size: int = 2000) -> PipelineSpec:
    return parse_pipeline(
        {
            "name": "p",
            "source": {"type": "datagen", "count": 10},
            "sink": {"type": "file", "path": str(tmp_path / "out.jsonl")},
            "checkpoint": {"type": "file", "path": str(tmp_path / "ck")},
            "errors": errors,
            "engine": {"type": "spark", "batch_size": batch_size},
        },
        tmp_path / "p.yaml",
        PluginRegistry.from_entry_points(),
    )


def dead_letter_file(tmp_path: Path) -> FileSink:
    return FileSink(FileSinkConfig(type="file", path=tmp_path / "dead.jsonl"), PluginContext("p", tmp_path))


def test_a_tasks_dead_letters_are_durable_when_the_task_ends_and_name_their_stage(tmp_path: Path) -> None:
    rejected = unreadable(events(tmp_path, 5))
    with task_rejections("p", "all", lambda: dead_letter_file(tmp_path)) as router:
        router.route(rejected[:2])
        router.route(rejected[2:])
    lines = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert len(lines) == 5
    assert {line["headers"][DEAD_LETTER_STAGE_HEADER] for line in lines} == {SOURCE_STAGE}
    assert router.dead_lettered == 5


def test_tolerance_none_fails_the_task_at_the_first_rejected_record(tmp_path: Path) -> None:
    rejected = unreadable(events(tmp_path, 3))
    with (
        pytest.raises(RecordFailedError, match="record 0 unreadable"),
        task_rejections("p", "none", lambda: dead_letter_file(tmp_path)) as router,
    ):
        router.route(rejected)
    assert not (tmp_path / "dead.jsonl").exists()  # nothing went aside


def test_a_spark_sink_task_without_rejected_records_never_opens_the_dead_letter_sink(tmp_path: Path) -> None:
    """A dead-letter sink is opened at a task's first rejected record on both sides of a Spark
    query: one per task (a Kafka producer...) for nothing is what it must not cost."""
    from cdcflow.spark_engine.runner import _deliver

    pipeline = spec(
        tmp_path, {"tolerance": "all", "dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")}}
    )
    assert pipeline.dead_letter is not None
    records = events(tmp_path, 7)
    _deliver(records, "p", pipeline.file, pipeline.sink, pipeline.dead_letter, "all", 3)
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 7
    assert not (tmp_path / "dead.jsonl").exists()


def test_a_spark_source_task_routes_rejected_records_per_engine_batch_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As the worker loop does: each chunk of engine.batch_size records is transformed and its
    rejected records routed before the next is read (one warning per chunk)."""
    from cdcflow.spark_engine.datasource import SourceJob, _transformed_rows

    pipeline = spec(tmp_path, {"tolerance": "all", "dead_letter": "none"}, batch_size=3)
    job = SourceJob.of(pipeline, with_record=True)
    readable = events(tmp_path, 4)
    read = [*unreadable(events(tmp_path, 7)), *readable]
    with caplog.at_level(logging.WARNING, logger="cdcflow.errors"):
        rows = list(_transformed_rows(job, [], iter(read)))
    assert len(rows) == len(readable)
    per_chunk = [r.args for r in caplog.records if "record(s) rejected" in r.msg]  # type: ignore[operator]
    assert [args[1] for args in per_chunk] == [3, 3, 1]  # type: ignore[index]
    assert "this task 0 sent to the dead letters, 7 dropped" in caplog.text
