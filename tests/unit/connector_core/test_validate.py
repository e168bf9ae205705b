"""`cdcflow validate` reports every mistake of a file in one run, in plain words, with "did you mean".

Issue 21, items 5 and 7: mistakes used to come in stages (a sink's converter was checked only once
the rest of the file was right), pydantic's phrasing leaked through ("expected not a valid regular
expression", "found dict {'type': 'avro'}"), and `tolerance: all` without a dead letter validated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdcflow.cli import main
from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigFieldError
from cdcflow.plugins import PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def write(tmp_path: Path, text: str, name: str = "pipeline.yaml") -> Path:
    file = tmp_path / name
    file.write_text(text)
    return file


def problems_of(file: Path, registry: PluginRegistry, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(file, registry, environ=environ if environ is not None else {})
    return str(caught.value).splitlines()


def validate(file: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(file)])
    return code, capsys.readouterr().err


MANY_MISTAKES = """\
name: orders to kafka
sorce: {type: datagen}
source:
  type: datgen
  count: 10
transforms:
  - {type: route, regex: '(orders', replacement: x}
  - {type: filter, expresion: 'op == "c"'}
sink:
  type: kafka
  bootstrap_server: 'b:9092'
  converter: avro
  compression: brotli
checkpoint: {type: file, path: ck, intervall_ms: 100}
engine:
  workers: 0
errors:
  tolerance: all
"""


def test_every_mistake_of_a_file_is_reported_in_one_run_with_its_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(tmp_path, MANY_MISTAKES)
    code, err = validate(file, capsys)
    assert code == 2
    reported = re.findall(rf"{re.escape(str(file))}: line (\d+): field ([^:]+):", err)
    assert sorted(reported, key=lambda r: (int(r[0]), r[1])) == [
        ("1", "name"),
        ("2", "sorce"),
        ("4", "source.type"),
        ("7", "transforms[0].regex"),
        ("8", "transforms[1].expresion"),
        ("10", "sink.bootstrap_servers"),  # required and absent: the section's first line
        ("11", "sink.bootstrap_server"),
        ("12", "sink.converter"),  # the converter: checked with the rest, not once the rest is right
        ("13", "sink.compression"),
        ("14", "checkpoint.intervall_ms"),
        ("16", "engine.workers"),
        ("18", "errors.dead_letter"),  # tolerance: all and nowhere to put what it lets through
    ]
    assert not (tmp_path / "state").exists()  # nothing started


def test_a_converter_mistake_is_reported_beside_a_mistake_elsewhere(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\n"
        "transforms: [{type: route, regex: '(abc', replacement: x}]\n"
        "sink:\n  type: kafka\n  bootstrap_servers: 'b:1'\n  converter: avro\n"
        "errors: {tolerance: all, dead_letter: {type: kafka, bootstrap_servers: b, converter: {type: json, x: 1}}}\n",
    )
    lines = problems_of(file, registry)
    assert [line.split(": field ")[1].split(":")[0] for line in lines] == [
        "transforms[0].regex",
        "sink.converter",
        "errors.dead_letter.converter.x",
    ]


def test_mistakes_of_every_file_given_are_reported_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write(tmp_path, "name: a\nsource: {type: datagen}\nsink: {type: fille, path: o}\n", "a.yaml")
    # Right as a file; only building the converter finds the registry setting it does not know.
    second = write(
        tmp_path,
        "name: b\nsource: {type: datagen}\nsink:\n  type: kafka\n  bootstrap_servers: b\n  converter: avro\n"
        "  schema_registry: {url: 'http://127.0.0.1:1', bogus.setting: 1}\n",
        "b.yaml",
    )
    assert main(["validate", str(first), str(second)]) == 2
    err = capsys.readouterr().err
    assert f"{first}: line 3: field sink.type" in err
    assert f"{second}: sink.converter.schema_registry: schema registry settings: Unrecognized properties: bogus" in err


def test_unset_environment_variables_are_reported_with_the_other_mistakes(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen, count: '${COUNT}'}\n"
        "sink: {type: kafka, bootstrap_servers: '${BROKER}', lingerms: 5}\n",
    )
    lines = problems_of(file, registry)
    assert lines == [
        f"{file}: line 2: field source.count: environment variable COUNT is not set (set it, or write "
        "${COUNT:-default})",
        f"{file}: line 3: field sink.bootstrap_servers: environment variable BROKER is not set (set it, or write "
        "${BROKER:-default})",
        f"{file}: line 3: field sink.lingerms: expected one of the known fields ("
        + lines[2].split("(", 1)[1].split(")", 1)[0]
        + "), found an unrecognized field; did you mean linger_ms?",
    ]


# --- did you mean --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "suggestion"),
    [
        ("name: p\nsource: {type: datagen, cuont: 5}\nsink: {type: file, path: o}\n", 2, "did you mean count?"),
        ("name: p\nsourc: {type: datagen}\nsink: {type: file, path: o}\n", 2, "did you mean source?"),
        ("name: p\nsource: {type: datgen}\nsink: {type: file, path: o}\n", 2, "did you mean 'datagen'?"),
        ("name: p\nsource: {type: datagen}\nsink: {type: kafak, bootstrap_servers: b}\n", 3, "did you mean 'kafka'?"),
        (
            "name: p\nsource: {type: datagen}\nsink: {type: kafka, bootstrap_servers: 'b:1', converter: avor}\n",
            3,
            "did you mean 'avro'?",
        ),
        (
            "name: p\nsource: {type: datagen}\ntransforms: [{type: rout}]\nsink: {type: file, path: o}\n",
            3,
            "did you mean 'route'?",
        ),
        (
            "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\ncheckpoint: {type: fiel, path: c}\n",
            4,
            "did you mean 'file'?",
        ),
        (
            "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\nerrors: {tolerance: al}\n",
            4,
            "did you mean 'all'?",
        ),
        (
            "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\nengine: {batchsize: 5}\n",
            4,
            "did you mean batch_size?",
        ),
        (
            "name: p\nsource: {type: datagen}\nsink:\n  type: kafka\n  bootstrap_servers: 'b:1'\n"
            "  kafka: {security_protocl: SSL}\n",
            6,
            "did you mean security_protocol?",
        ),
    ],
)
def test_unknown_names_get_a_did_you_mean(
    tmp_path: Path, registry: PluginRegistry, text: str, line: int, suggestion: str
) -> None:
    problems = problems_of(write(tmp_path, text), registry)
    [suggesting] = [p for p in problems if "did you mean" in p]
    assert suggesting.startswith(f"{tmp_path / 'pipeline.yaml'}: line {line}: field ")
    assert suggesting.endswith(suggestion)


# --- plain wording -------------------------------------------------------------------------


def test_a_regular_expression_that_does_not_compile_says_so(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\ntransforms: [{type: route, regex: '(abc', replacement: x}]\n"
        "sink: {type: file, path: o}\n",
    )
    [problem] = problems_of(file, registry)
    assert problem == (
        f"{file}: line 3: field transforms[0].regex: not a valid regular expression: "
        "missing ), unterminated subpattern at position 0 (found '(abc')"
    )


def test_converter_avro_without_a_registry_names_what_is_missing_not_a_dict(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\nsink:\n  type: kafka\n  bootstrap_servers: 'b:1'\n  converter: avro\n",
    )
    [problem] = problems_of(file, registry)
    assert problem == (
        f"{file}: line 6: field sink.converter: the avro converter needs schema_registry_url "
        "(or schema_registry: {url: ...})"
    )


def test_a_value_of_the_wrong_kind_for_a_choice_of_kinds_is_one_problem(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(
        tmp_path, "name: p\nsource: {type: datagen}\nsink: {type: kafka, bootstrap_servers: b, converter: 5}\n"
    )
    [problem] = problems_of(file, registry)
    assert problem == (
        f"{file}: line 3: field sink.converter: expected a valid string or a valid dictionary "
        "(json, avro, or {type: ..., ...}), found int 5"
    )


def test_a_pattern_mismatch_says_what_a_valid_value_looks_like(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: orders to kafka\nsource: {type: datagen}\nsink: {type: kafka, bootstrap_servers: 'b:1', "
        "compression: lz5}\n",
    )
    assert problems_of(file, registry) == [
        f"{file}: line 1: field name: expected letters, digits, '.', '_' and '-', starting with a letter or digit "
        "(like 'orders-to-kafka'), found 'orders to kafka'",
        f"{file}: line 3: field sink.compression: expected one of none, gzip, snappy, lz4, zstd, found 'lz5'; "
        "did you mean 'lz4'?",
    ]  # and no suggestion for the name: nothing known is close to it


def test_a_check_that_explains_itself_is_not_phrased_as_an_expectation(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\ntransforms: [{type: filter, expression: 'after['}]\n"
        "sink:\n  type: kafka\n  bootstrap_servers: 'b:1'\n  kafka: {security_protocol: SASL_SSL}\n",
    )
    lines = problems_of(file, registry)
    assert lines == [
        f"{file}: line 3: field transforms[0].expression: not a valid expression: '[' was never closed "
        "(found 'after[')",
        f"{file}: line 7: field sink.kafka: security_protocol SASL_SSL needs a sasl_mechanism",
    ]
    assert not any("expected not" in line or "found dict" in line for line in lines)


# --- tolerance: all needs somewhere to put what it lets through -----------------------------


def test_tolerance_all_without_a_dead_letter_is_a_mistake_naming_the_field(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(tmp_path, "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\nerrors:\n  tolerance: all\n")
    [problem] = problems_of(file, registry)
    assert problem.startswith(f"{file}: line 5: field errors.dead_letter: expected a sink")
    assert "or none" in problem and problem.endswith("found nothing")


def test_dead_letter_none_validates_with_a_warning_and_drops_are_accepted(
    tmp_path: Path, registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\n"
        "errors:\n  tolerance: all\n  dead_letter: none\n",
    )
    code, err = validate(file, capsys)
    assert code == 0, err
    [warning] = err.splitlines()
    assert warning.startswith(f"warning: {file}: line 6: field errors.dead_letter: none: ")
    assert "dropped" in warning
    spec = load_pipeline(file, registry)
    assert spec.dead_letter is None
    assert spec.errors.drops_accepted
    assert [w.path for w in spec.warnings] == ["errors.dead_letter"]


def test_a_dead_letter_sink_accepts_no_drops_and_warns_of_nothing(
    tmp_path: Path, registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\n"
        "errors: {tolerance: all, dead_letter: {type: file, path: dlq.jsonl}}\n",
    )
    code, err = validate(file, capsys)
    assert (code, err) == (0, "")
    spec = load_pipeline(file, registry)
    assert spec.dead_letter is not None and not spec.errors.drops_accepted and spec.warnings == ()


def test_tolerance_none_needs_no_dead_letter(tmp_path: Path, registry: PluginRegistry) -> None:
    spec = load_pipeline(write(tmp_path, "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\n"), registry)
    assert spec.errors.tolerance == "none" and spec.dead_letter is None and not spec.errors.drops_accepted


def test_dead_letter_takes_a_sink_or_none_only(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(
        tmp_path,
        "name: p\nsource: {type: datagen}\nsink: {type: file, path: o}\nerrors: {tolerance: all, dead_letter: nil}\n",
    )
    [problem] = problems_of(file, registry)
    assert problem.startswith(f"{file}: line 4: field errors.dead_letter: expected a valid dictionary or 'none'")
    assert problem.endswith("found 'nil'")


# --- sink.delivery: exactly_once needs a store in the sink's transactions -------------------

EXACTLY_ONCE = """\
name: p
source: {type: datagen}
sink: {type: kafka, bootstrap_servers: 'a:9092,b:9092', delivery: exactly_once}
"""


def test_exactly_once_needs_the_kafka_checkpoint_store(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, EXACTLY_ONCE + "checkpoint: {type: file, path: ck}\n")
    [problem] = problems_of(file, registry)
    assert problem == (
        f"{file}: line 4: field checkpoint.type: expected a checkpoint store that commits in the sink's "
        "transactions (kafka) with sink.delivery exactly_once, found 'file'"
    )


def test_exactly_once_needs_the_checkpoint_store_on_the_sinks_cluster(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, EXACTLY_ONCE + "checkpoint: {type: kafka, bootstrap_servers: 'c:9092'}\n")
    [problem] = problems_of(file, registry)
    assert problem.startswith(f"{file}: line 4: field checkpoint.bootstrap_servers: expected the sink's cluster")
    assert problem.endswith("a broker of kafka at a:9092, b:9092, found c:9092")
    # One broker in common is the same cluster (the run checks the cluster's id).
    same = write(tmp_path, EXACTLY_ONCE + "checkpoint: {type: kafka, bootstrap_servers: 'b:9092'}\n", "same.yaml")
    assert load_pipeline(same, registry, environ={}).sink.config.delivery == "exactly_once"


def test_exactly_once_dead_letters_into_kafka_join_the_transaction_on_the_same_cluster(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    file = write(
        tmp_path,
        EXACTLY_ONCE + "checkpoint: {type: kafka, bootstrap_servers: 'a:9092'}\n"
        "errors: {tolerance: all, dead_letter: {type: kafka, bootstrap_servers: 'd:9092', topic: dlq}}\n",
    )
    [problem] = problems_of(file, registry)
    assert problem.startswith(f"{file}: line 5: field errors.dead_letter.bootstrap_servers: expected the sink's")
    assert "dead letters join the records' transaction" in problem and problem.endswith("found d:9092")


def test_exactly_once_is_refused_on_spark_with_the_reason(tmp_path: Path, registry: PluginRegistry) -> None:
    file = write(tmp_path, EXACTLY_ONCE + "checkpoint: {type: file, path: ck}\nengine: {type: spark}\n")
    [problem] = problems_of(file, registry)
    assert problem.startswith(f"{file}: line 3: field sink.delivery: expected at_least_once with engine.type spark")
    assert "a batch re-run after a crash writes its records again" in problem and problem.endswith("'exactly_once'")
