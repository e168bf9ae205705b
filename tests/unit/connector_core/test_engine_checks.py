"""What each engine can run is one rule (cdcflow.engine_checks): loading a file reports a mismatch as
a field problem, and each engine refuses the same mismatch at its start in the same words, which
matters once ``cdcflow run --engine`` has moved a pipeline to an engine its file was not checked for."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.config import ConfigFieldError, load_pipeline
from cdcflow.errors import EngineUnsupportedError
from cdcflow.pipeline import build_runner
from cdcflow.plugins import PluginRegistry

SOURCE = "source: {type: datagen, count: 10}\n"


@pytest.fixture
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def write(tmp_path: Path, name: str, text: str) -> Path:
    file = tmp_path / f"{name}.yaml"
    file.write_text(f"name: {name}\n" + text)
    return file


def field_problem(file: Path, registry: PluginRegistry) -> str:
    """What loading ``file`` says is wrong, without the file and line it names."""
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [line] = str(caught.value).splitlines()
    return line[line.index("field ") :]


def test_the_worker_refuses_a_spark_only_dead_letter_sink_as_validation_does(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    errors = "errors: {tolerance: all, dead_letter: {type: parquet, path: dead}}\n"
    on_spark = write(
        tmp_path, "p", SOURCE + "sink: {type: file, path: out.jsonl}\n" + errors + "engine: {type: spark}\n"
    )
    on_worker = write(tmp_path, "q", SOURCE + "sink: {type: file, path: out.jsonl}\n" + errors)
    expected = field_problem(on_worker, registry)
    assert expected.startswith("field errors.dead_letter.type: expected a sink type that runs on the worker engine")

    moved = load_pipeline(on_spark, registry).on_engine("worker")  # cdcflow run --engine worker
    with pytest.raises(EngineUnsupportedError) as refused:
        build_runner(moved, registry)
    assert str(refused.value).endswith(expected)
    assert str(refused.value).startswith(f"{on_spark}: pipeline p on the worker engine")


def test_the_spark_engine_refuses_a_checkpoint_store_it_cannot_keep_offsets_in_as_validation_does(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    checkpoint = "checkpoint: {type: kafka, bootstrap_servers: '127.0.0.1:1'}\n"
    on_worker = write(tmp_path, "p", SOURCE + "sink: {type: file, path: out.jsonl}\n" + checkpoint)
    on_spark = write(
        tmp_path, "q", SOURCE + "sink: {type: file, path: out.jsonl}\n" + checkpoint + "engine: {type: spark}\n"
    )
    expected = field_problem(on_spark, registry)
    assert expected.startswith("field checkpoint.type: expected file")

    from cdcflow.spark_engine.runner import run_spark_pipeline

    moved = load_pipeline(on_worker, registry).on_engine("spark")  # cdcflow run --engine spark
    with pytest.raises(EngineUnsupportedError) as refused:
        run_spark_pipeline(moved, registry, threading.Event())
    assert str(refused.value).endswith(expected)


def test_the_spark_engine_refuses_exactly_once_delivery_as_validation_does(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    kafka = "bootstrap_servers: '127.0.0.1:1'"
    sink = f"sink: {{type: kafka, {kafka}, delivery: exactly_once}}\n"
    on_worker = write(tmp_path, "p", SOURCE + sink + f"checkpoint: {{type: kafka, {kafka}}}\n")
    on_spark = write(tmp_path, "q", SOURCE + sink + "checkpoint: {type: file, path: ck}\nengine: {type: spark}\n")
    expected = field_problem(on_spark, registry)
    assert expected.startswith("field sink.delivery: expected at_least_once with engine.type spark")

    from cdcflow.spark_engine.runner import run_spark_pipeline

    moved = load_pipeline(on_worker, registry).on_engine("spark")  # cdcflow run --engine spark
    with pytest.raises(EngineUnsupportedError) as refused:
        run_spark_pipeline(moved, registry, threading.Event())
    assert expected in str(refused.value)


def test_a_spark_only_sink_moved_to_the_worker_is_refused_in_the_words_of_validation(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    on_spark = write(tmp_path, "p", SOURCE + "sink: {type: parquet, path: out}\nengine: {type: spark}\n")
    on_worker = write(tmp_path, "q", SOURCE + "sink: {type: parquet, path: out}\n")
    expected = field_problem(on_worker, registry)
    moved = load_pipeline(on_spark, registry).on_engine("worker")
    with pytest.raises(EngineUnsupportedError) as refused:
        build_runner(moved, registry)
    assert str(refused.value).endswith(expected)


def test_one_run_of_files_for_both_engines_is_refused_with_an_engine_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = write(tmp_path, "p", SOURCE + "sink: {type: file, path: p.jsonl}\n")
    spark = write(tmp_path, "q", SOURCE + "sink: {type: file, path: q.jsonl}\nengine: {type: spark}\n")
    assert main(["run", str(worker), str(spark)]) == 1
    err = capsys.readouterr().err
    assert f"these files mix engine types (spark: {spark}; worker: {worker})" in err
    assert not (tmp_path / "p.jsonl").exists()  # refused before anything ran
