"""Secrets from files (``${file:PATH}``, ``${file:PATH:KEY}``) and secret values never printed
(issue 27, item 4): not by ``validate``, not in an error, not in a log line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdcflow._secret_files import parse_properties
from cdcflow.cli import main
from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigFieldError, MissingSecretKeyError, SecretFileError
from cdcflow.plugins import PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.from_entry_points()


def write(folder: Path, name: str, text: str) -> Path:
    file = folder / name
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)
    return file


def sasl_sink(password: str) -> str:
    return (
        "sink: {type: kafka, bootstrap_servers: 'b:1', converter: json, kafka: {security_protocol: SASL_SSL, "
        f"sasl_mechanism: PLAIN, sasl_username: cdc, sasl_password: {password}}}}}\n"
    )


def test_a_whole_file_and_keys_of_properties_and_json_files(tmp_path: Path, registry: PluginRegistry) -> None:
    # The whole file without its final line break (as `echo secret > file` writes it); a relative
    # path from the pipeline file's folder; a JSON number converted by the field's type.
    write(tmp_path, "secrets/kafka-password", "Whole-File-Secret-1\n")
    write(tmp_path, "secrets/app.properties", "# comment\nregistry.password = Props-Secret-2\nother=x\n")
    write(tmp_path, "secrets/app.json", json.dumps({"workers": 3, "token": "Json-Secret-3"}))
    file = write(
        tmp_path,
        "pipeline.yaml",
        "name: p\nsource: {type: datagen, count: 10}\n"
        + sasl_sink("'${file:secrets/kafka-password}'")
        + "engine:\n  type: spark\n  batch_size: '${file:"
        + str(tmp_path / "secrets/app.json")
        + ":workers}'\n"
        + "  conf: {spark.hadoop.fs.s3a.secret.key: 'k-${file:secrets/app.properties:registry.password}'}\n",
    )
    spec = load_pipeline(file, registry, environ={})
    assert spec.sink.config.kafka.sasl_password.get_secret_value() == "Whole-File-Secret-1"  # type: ignore[attr-defined]
    assert spec.engine.batch_size == 3
    assert spec.spark_engine.conf == {"spark.hadoop.fs.s3a.secret.key": "k-Props-Secret-2"}


def test_properties_files_are_read_as_java_reads_them() -> None:
    # The format of java.util.Properties.load: comments, three separators, escaped separators in
    # keys, a value continued over lines, unicode escapes, a trailing escaped backslash.
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "equals = value one\n"
        "colon:value two\n"
        "blank value three\n"
        "key\\ with\\ spaces = four\n"
        "escaped\\=key\\:name = five\n"
        "continued = first, \\\n"
        "            second\n"
        "unicode = caf\\u00e9\n"
        "backslash = ends with \\\\\n"
        "empty =\n"
        "repeated = old\n"
        "repeated = new\n"
    )
    assert parse_properties(text) == {
        "equals": "value one",
        "colon": "value two",
        "blank": "value three",
        "key with spaces": "four",
        "escaped=key:name": "five",
        "continued": "first, second",
        "unicode": "café",
        "backslash": "ends with \\",
        "empty": "",
        "repeated": "new",
    }


def test_unusable_secret_files_are_errors_naming_field_line_and_file(
    tmp_path: Path, registry: PluginRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "app.properties", "password=Never-Shown-4\nuser=cdc\n")
    write(tmp_path, "broken.json", '{"password": "Never-Shown-5",')
    write(tmp_path, "list.json", '["Never-Shown-6"]')
    missing_key = write(
        tmp_path,
        "missing_key.yaml",
        "name: p\nsource: {type: datagen, count: 10}\n" + sasl_sink("'${file:app.properties:pasword}'"),
    )
    with pytest.raises(MissingSecretKeyError) as caught:
        load_pipeline(missing_key, registry, environ={})
    assert str(caught.value) == (
        f"{missing_key}: line 3: field sink.kafka.sasl_password: secret file reference: {tmp_path / 'app.properties'} "
        "has no key 'pasword' (its keys: password, user); did you mean 'password'?"
    )
    file = write(
        tmp_path,
        "pipeline.yaml",
        "name: p\n"
        "source: {type: datagen, count: '${file:no-such-file}'}\n"
        + sasl_sink("'${file:broken.json:password}'")
        + "engine: {workers: '${file:list.json:password}', batch_size: '${file:}'}\n",
    )
    with pytest.raises(ConfigFieldError) as every:
        load_pipeline(file, registry, environ={})
    lines = str(every.value).splitlines()
    assert lines[0] == (
        f"{file}: line 2: field source.count: secret file reference: cannot read {tmp_path / 'no-such-file'}: "
        "No such file or directory"
    )
    assert lines[1].startswith(f"{file}: line 3: field sink.kafka.sasl_password: secret file reference: ")
    assert f"{tmp_path / 'broken.json'} is not valid JSON" in lines[1]
    assert lines[2] == (
        f"{file}: line 4: field engine.workers: secret file reference: {tmp_path / 'list.json'} holds a JSON list, "
        "not an object of keys"
    )
    assert lines[3].startswith(f"{file}: line 4: field engine.batch_size: '${{file:}}' is not an environment reference")
    assert len(lines) == 4
    assert "Never-Shown" not in str(every.value)
    only_one = write(
        tmp_path, "one.yaml", "name: p\nsource: {type: datagen, count: '${file:nothing-here}'}\n" + sasl_sink("x")
    )
    with pytest.raises(SecretFileError):
        load_pipeline(only_one, registry, environ={})
    assert main(["validate", str(file)]) == 2
    assert "Never-Shown" not in capsys.readouterr().err


def test_a_bad_value_from_a_secret_file_is_not_echoed_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "workers", "Hunter2-Not-A-Number\n")
    write(tmp_path, "app.json", json.dumps({"size": "Another-Bad-Secret"}))
    file = write(
        tmp_path,
        "pipeline.yaml",
        "name: p\nsource: {type: datagen, count: 10}\nsink: {type: file, path: out.jsonl}\n"
        "engine: {workers: '${file:workers}', batch_size: '${file:app.json:size}'}\n",
    )
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert f"{file}: line 4: field engine.workers: expected a valid integer" in err
    assert f"{file}: line 4: field engine.batch_size: expected a valid integer" in err
    assert "found a secret (not shown)" in err
    assert "Hunter2" not in err and "Another-Bad" not in err


def test_a_bad_value_of_a_field_named_like_a_secret_is_not_echoed(
    tmp_path: Path, registry: PluginRegistry, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written in the file, and from the environment: either way the field's name makes it secret.
    literal = write(
        tmp_path, "literal.yaml", "name: p\nsource: {type: datagen, count: 10}\n" + sasl_sink("[Literal-Pass-7]")
    )
    from_env = write(
        tmp_path, "env.yaml", "name: q\nsource: {type: datagen, count: 10}\n" + sasl_sink("{value: '${KAFKA_PW}'}")
    )
    monkeypatch.setenv("KAFKA_PW", "Env-Pass-8-that-is-long-enough-to-be-cut-in-a-quote-of-sixty-characters")
    assert main(["validate", str(literal), str(from_env)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{literal}: line 3: field sink.kafka.sasl_password: expected a valid string, found a list holding a secret"
        in err
    )
    assert (
        f"{from_env}: line 3: field sink.kafka.sasl_password: expected a valid string, found a dict holding a secret"
        in err
    )
    assert "Literal-Pass" not in err and "Env-Pass" not in err


def test_a_secret_is_hidden_in_the_errors_and_logs_of_a_run(tmp_path: Path) -> None:
    # The broker address comes from a secret file: librdkafka's own log lines, cdcflow's error log
    # and the error the command ends with all quote it, as ***.
    write(tmp_path, "broker", "127.0.0.1:1\n")
    file = write(
        tmp_path,
        "pipeline.yaml",
        "name: p\nsource: {type: datagen, count: 10}\n"
        "sink: {type: kafka, bootstrap_servers: '${file:broker}', converter: json}\n"
        "engine: {startup_timeout_s: 1}\n",
    )
    for log_format in ("text", "json"):
        run = subprocess.run(
            [sys.executable, "-m", "cdcflow.cli", "--log-format", log_format, "run", str(file)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 1, run.stderr
        assert "no Kafka broker at *** answered" in run.stderr
        assert "127.0.0.1:1" not in run.stderr
