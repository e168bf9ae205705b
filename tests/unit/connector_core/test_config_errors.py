"""Every kind of bad pipeline file gives an error naming the file, line, field, expectation and finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.config import SparkEngineConfig, WorkerEngineConfig, load_pipeline
from cdcflow.errors import ConfigFieldError, ConfigFileError, EngineUnsupportedError, MissingEnvironmentVariableError
from cdcflow.group.config import GroupConfig
from cdcflow.plugins import PluginRegistry
from tests.paths import REPO


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def write(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "pipeline.yaml"
    file.write_text(text)
    return file


GOOD_SOURCE = "source: {type: datagen, count: 10}\n"
GOOD_SINK = "sink: {type: file, path: out.jsonl}\n"


def problem_lines(error: ConfigFieldError) -> list[str]:
    return str(error).splitlines()


def test_unknown_sink_type_names_field_line_and_installed_types(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: kafak}\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [line] = problem_lines(caught.value)
    assert line.startswith(f"{file}: line 3: field sink.type:")
    assert "kafka" in line and "file" in line  # the installed choices
    assert line.endswith("found 'kafak'; did you mean 'kafka'?")


def test_unknown_field_inside_a_plugin_section(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\nsource:\n  type: datagen\n  cuont: 5\n" + GOOD_SINK)
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [line] = problem_lines(caught.value)
    assert line.startswith(f"{file}: line 4: field source.cuont: expected one of the known fields (")
    assert "count" in line and line.endswith("found an unrecognized field; did you mean count?")


def test_unknown_top_level_field(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + GOOD_SINK + "sinks: {}\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    assert "line 4: field sinks: expected one of the known fields" in str(caught.value)


def test_missing_required_field_of_a_plugin(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: kafka, converter: json}\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    assert str(caught.value) == (
        f"{file}: line 3: field sink.bootstrap_servers: expected a value (the field is required), found nothing"
    )


def test_wrong_type_says_what_was_found(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + GOOD_SINK + "engine:\n  workers: two\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    message = str(caught.value)
    assert message.startswith(f"{file}: line 5: field engine.workers: expected a valid integer")
    assert message.endswith("found 'two'")


def test_unreadable_yaml_gives_the_line(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\nsource: {type: datagen\n" + GOOD_SINK)
    with pytest.raises(ConfigFileError) as caught:
        load_pipeline(file, registry)
    assert str(caught.value).startswith(f"{file}: line 3: not valid YAML")


def test_missing_file(tmp_path: Path, registry: PluginRegistry) -> None:
    with pytest.raises(ConfigFileError, match="cannot read the file"):
        load_pipeline(tmp_path / "absent.yaml", registry)


def test_duplicate_key(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + GOOD_SINK + "name: q\n")
    with pytest.raises(ConfigFileError, match="line 4: field name appears twice"):
        load_pipeline(file, registry)


def test_missing_environment_variable(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: kafka, bootstrap_servers: '${NO_SUCH_VAR}'}\n")
    with pytest.raises(MissingEnvironmentVariableError) as caught:
        load_pipeline(file, registry, environ={})
    assert "line 3: field sink.bootstrap_servers: environment variable NO_SUCH_VAR is not set" in str(caught.value)


def test_environment_defaults_and_numbers(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        (
            "name: p\nsource: {type: datagen, count: '${COUNT}'}\n"
            "sink: {type: kafka, bootstrap_servers: '${BROKER:-localhost:1}', converter: json}\n"
        ),
    )
    spec = load_pipeline(file, registry, environ={"COUNT": "42"})
    assert spec.source.config.count == 42  # type: ignore[attr-defined]
    assert spec.sink.config.bootstrap_servers == "localhost:1"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "value",
    [
        "${KAFKA BOOTSTRAP:-x}",  # a space in the name
        "${KAFKA_BOOTSTRAP:127.0.0.1:9092}",  # ':' instead of ':-'
        "$KAFKA_BOOTSTRAP",  # shell style, no braces
        "${KAFKA_BOOTSTRAP",  # not closed
        "${}",
        "${1ST}",
        "127.0.0.1:${PORT:=9092}",
    ],
)
def test_malformed_environment_references_are_errors_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    file = write(
        tmp_path,
        "name: p\n" + GOOD_SOURCE + "sink:\n  type: kafka\n  bootstrap_servers: '" + value + "'\n",
    )
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert f"{file}: line 5: field sink.bootstrap_servers: " in err
    assert "is not an environment reference cdcflow reads" in err
    assert "${NAME} or ${NAME:-default}" in err


def test_dollar_escapes_and_environment_values_keep_their_text(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: p\n"
        "source: {type: datagen, count: '${COUNT}'}\n"
        "transforms: [{type: route, regex: '(.*)$', replacement: 'x.$1'}]\n"
        "sink: {type: kafka, bootstrap_servers: 'b:1', kafka: {security_protocol: SASL_PLAINTEXT, "
        "sasl_mechanism: PLAIN, sasl_username: '${USER_NAME}', sasl_password: 'pa$$${SECRET}'}}\n"
        "checkpoint: {type: file, path: '$$HOME/state'}\n"
        "engine: {type: spark, batch_size: '${WORKERS}', conf: {spark.executor.cores: '${CORES}'}}\n",
    )
    environ = {"COUNT": "42", "USER_NAME": "007", "SECRET": "1.10", "WORKERS": "3", "CORES": "2"}
    spec = load_pipeline(file, registry, environ=environ)
    assert spec.source.config.count == 42  # type: ignore[attr-defined]
    assert spec.transforms[0].config.regex == "(.*)$"  # type: ignore[attr-defined]
    assert spec.transforms[0].config.replacement == "x.$1"  # type: ignore[attr-defined]
    kafka = spec.sink.config.kafka  # type: ignore[attr-defined]
    assert kafka.sasl_username == "007"  # not the integer 7
    assert kafka.sasl_password.get_secret_value() == "pa$1.10"  # not the float 1.1
    assert spec.checkpoint.config.path == tmp_path / "$HOME" / "state"  # type: ignore[attr-defined]
    assert spec.engine.batch_size == 3
    assert spec.spark_engine.conf == {"spark.executor.cores": "2"}


def test_relative_paths_resolve_against_the_pipeline_folder(tmp_path: Path, registry: PluginRegistry) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    file = folder / "p.yaml"
    file.write_text("name: p\n" + GOOD_SOURCE + GOOD_SINK + "checkpoint: {type: file, path: ../state}\n")
    spec = load_pipeline(file, registry)
    assert spec.sink.config.path == folder / "out.jsonl"  # type: ignore[attr-defined]
    assert spec.checkpoint.config.path == tmp_path / "state"  # type: ignore[attr-defined]


def test_default_checkpoint_is_a_file_store_under_state(tmp_path: Path, registry: PluginRegistry) -> None:
    spec = load_pipeline(write(tmp_path, "name: orders\n" + GOOD_SOURCE + GOOD_SINK), registry)
    assert spec.checkpoint.config.type == "file"
    assert spec.checkpoint.config.path == tmp_path / "state" / "orders"  # type: ignore[attr-defined]


def test_several_problems_are_reported_together(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\nsource: {type: datagen, cuont: 1}\nsink: {type: nope}\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    assert [p.path for p in caught.value.problems] == ["source.cuont", "sink.type"]


def test_validate_command_exits_2_and_prints_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: kafak}\n")
    assert main(["validate", str(file)]) == 2
    assert f"{file}: line 3: field sink.type" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # nothing started


def test_validate_checks_nested_converter_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write(
        tmp_path,
        "name: p\n"
        + GOOD_SOURCE
        + "sink: {type: kafka, bootstrap_servers: 'x:1', converter: {type: json, schema: 1}}\n",
    )
    assert main(["validate", str(file)]) == 2
    assert "line 3: field sink.converter.schema: expected one of the known fields" in capsys.readouterr().err


def test_a_nested_converter_error_names_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write(
        tmp_path,
        "name: p\n"
        + GOOD_SOURCE
        + "sink:\n  type: kafka\n  bootstrap_servers: 'x:1'\n"
        + "errors:\n  tolerance: all\n  dead_letter:\n    type: kafka\n    bootstrap_servers: 'x:1'\n"
        + "    converter:\n      type: avro\n      schema_registry_url: 7\n",
    )
    assert main(["validate", str(file)]) == 2
    assert "line 13: field errors.dead_letter.converter.schema_registry_url: expected a valid string" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("file", sorted((REPO / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_pipelines_validate(file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(file)]) == 0, capsys.readouterr().err


def test_a_shipped_pipeline_for_every_source_with_state_in_one_place(registry: PluginRegistry) -> None:
    files = sorted((REPO / "config").glob("*.yaml"))
    specs = [load_pipeline(file, registry, environ={}) for file in files]
    builtin_sources = {"datagen", "kafka", "cassandra_commitlog", "scylla_cdc", "tikv_rawkv"}
    assert builtin_sources <= {spec.source.config.type for spec in specs}
    for spec in specs:
        state = REPO / "config" / "state"
        if spec.checkpoint.config.type == "file":
            assert spec.checkpoint.config.path == state / spec.name, spec.file  # type: ignore[attr-defined]
        state_files = []  # dead letters and the commit-log error store, where they are files
        if spec.dead_letter is not None and spec.dead_letter.config.type == "file":
            state_files.append(spec.dead_letter.config.path)  # type: ignore[attr-defined]
        error_store = getattr(spec.source.config, "error_store", None)
        if error_store is not None and error_store.type == "file":
            state_files.append(error_store.path)
        for path in state_files:
            assert path.parent == state and path.name.startswith(f"{spec.name}."), (spec.file, path)
        if spec.sink.config.type == "parquet":
            assert spec.sink.config.path == str(REPO / "config" / "out" / spec.name)  # type: ignore[attr-defined]


def test_shipped_json_schema_is_current(capsys: pytest.CaptureFixture[str], registry: PluginRegistry) -> None:
    """config/pipeline.schema.json is what `cdcflow schema` prints for the built-in plugins (regenerate:
    `cdcflow schema > config/pipeline.schema.json` with no third-party plugin installed)."""
    import json

    assert main(["schema"]) == 0
    generated = json.loads(capsys.readouterr().out)
    shipped = json.loads((REPO / "config" / "pipeline.schema.json").read_text())
    # Third-party plugins installed in the test run add choices; the shipped file has the built-ins.
    for kind, section in (
        ("source", "source"),
        ("sink", "sink"),
        ("checkpoint", "checkpoint"),
        ("transform", "transforms"),
    ):
        builtin = {p.type_name for p in registry.registered(kind) if p.builtin}
        holder = generated["properties"][section]
        holder = holder["items"] if section == "transforms" else holder
        holder["oneOf"] = [c for c in holder["oneOf"] if c["properties"]["type"]["const"] in builtin]
    third_party = set(generated["$defs"]) - set(shipped["$defs"])
    for name in third_party:
        del generated["$defs"][name]
    assert shipped == generated


def test_pipeline_and_plugin_problems_are_reported_in_one_pass(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\nsource: {type: datagen, cuont: 5}\nsink: {type: kafak}\nengine: {workers: two}\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    assert [(p.line, p.path) for p in caught.value.problems] == [
        (2, "source.cuont"),
        (3, "sink.type"),
        (4, "engine.workers"),
    ]


@pytest.mark.parametrize(
    ("engine", "line", "expected"),
    [
        # A setting of the other engine, whether engine.type says worker or leaves it to the default.
        (
            "engine: {type: worker, master: 'local[2]'}\n",
            4,
            "field engine.master: master is a setting of engine.type spark, not of engine.type worker "
            "(found 'local[2]')",
        ),
        (
            "engine:\n  workers: 2\n  trigger_interval_ms: 500\n",
            6,
            "field engine.trigger_interval_ms: trigger_interval_ms is a setting of engine.type spark, "
            "not of engine.type worker (found int 500)",
        ),
        (
            "engine: {type: spark, poll_interval_ms: 50}\n",
            4,
            "field engine.poll_interval_ms: poll_interval_ms is a setting of engine.type worker, "
            "not of engine.type spark (found int 50)",
        ),
        (
            "engine: {type: spark, group: {bootstrap_servers: 'b:1'}}\n",
            4,
            "field engine.group: group is a setting of engine.type worker, not of engine.type spark",
        ),
        # Neither engine's: the engine's own fields and "did you mean".
        ("engine: {type: spark, mastre: x}\n", 4, "field engine.mastre: expected one of the known fields ("),
        (
            "engine: {type: sprak}\n",
            4,
            "field engine.type: expected 'worker' or 'spark', found 'sprak'; did you mean 'spark'?",
        ),
    ],
)
def test_an_engine_takes_only_its_own_settings(
    tmp_path: Path, registry: PluginRegistry, engine: str, line: int, expected: str
) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + GOOD_SINK + engine)
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [problem] = problem_lines(caught.value)
    assert problem.startswith(f"{file}: line {line}: {expected}")
    if "mastre" in engine:
        assert "master" in problem and "workers" not in problem and problem.endswith("did you mean master?")


def test_each_engine_has_its_own_model(tmp_path: Path, registry: PluginRegistry) -> None:
    worker = load_pipeline(write(tmp_path, "name: p\n" + GOOD_SOURCE + GOOD_SINK + "engine: {workers: 2}\n"), registry)
    assert isinstance(worker.engine, WorkerEngineConfig) and worker.worker_engine.workers == 2
    spark = load_pipeline(
        write(
            tmp_path,
            "name: p\n" + GOOD_SOURCE + GOOD_SINK + "engine: {type: spark, master: 'local[1]', batch_size: 7}\n",
        ),
        registry,
    )
    assert isinstance(spark.engine, SparkEngineConfig) and spark.spark_engine.master == "local[1]"
    with pytest.raises(EngineUnsupportedError, match="set for the spark engine"):
        _ = spark.worker_engine
    # `cdcflow run --engine worker` of it: the shared settings carry over, the worker's are defaults.
    on_worker = spark.on_engine("worker")
    assert on_worker.worker_engine == WorkerEngineConfig(batch_size=7)
    assert worker.on_engine("spark").spark_engine == SparkEngineConfig(type="spark")


def test_the_group_is_typed_and_named_after_the_pipeline(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: orders\n"
        + GOOD_SOURCE
        + GOOD_SINK
        + "checkpoint: {type: kafka, bootstrap_servers: 'b:1'}\n"
        + "engine: {group: {bootstrap_servers: 'b:1', buckets: 8}}\n",
    )
    spec = load_pipeline(file, registry)
    group = spec.worker_engine.group
    assert isinstance(group, GroupConfig) and spec.group is group
    assert (group.id, group.buckets) == ("cdcflow-orders", 8)


def test_a_spark_only_sink_on_the_worker_engine_is_a_field_error(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink:\n  type: parquet\n  path: out\n")
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [line] = problem_lines(caught.value)
    assert line.startswith(f"{file}: line 4: field sink.type: expected a sink type that runs on the worker engine")
    assert "'parquet', which runs on the spark engine only" in line


def test_the_spark_engine_needs_a_file_checkpoint(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: p\n"
        + GOOD_SOURCE
        + "sink: {type: parquet, path: out}\n"
        + "checkpoint: {type: kafka, bootstrap_servers: 'h:1'}\n"
        + "engine: {type: spark}\n",
    )
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry)
    [line] = problem_lines(caught.value)
    assert line.startswith(f"{file}: line 4: field checkpoint.type: expected file")
    assert line.endswith("found 'kafka'")


def test_parquet_paths_resolve_against_the_file_and_uris_stay(tmp_path: Path, registry: PluginRegistry) -> None:
    local = write(tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: parquet, path: out}\nengine: {type: spark}\n")
    assert load_pipeline(local, registry).sink.config.path == str(tmp_path / "out")
    remote = write(
        tmp_path, "name: p\n" + GOOD_SOURCE + "sink: {type: parquet, path: 's3a://lake/cdc'}\nengine: {type: spark}\n"
    )
    assert load_pipeline(remote, registry).sink.config.path == "s3a://lake/cdc"
