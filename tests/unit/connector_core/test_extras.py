"""Extras per connector (issue 25, item 8): ``pip install cdcflow`` is the core; a plugin or engine
whose extra is not installed is listed as unavailable and refused with the extra's name and the pip
command, and the core runs a pipeline with none of the extras.

"Not installed" is made real in a subprocess whose import system refuses the extras' modules (a
meta-path finder raising ModuleNotFoundError, as a missing package does), so the registry, the
CLI and the plugins are the code a user runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.paths import REPO

# Every module an extra brings; blocking them all leaves the core.
ALL_EXTRA_MODULES = ("cassandra", "cramjam", "grpc", "google.protobuf", "pyspark", "pyarrow", "pandas", "faust")

_RUN_WITHOUT = """
import sys

blocked = set(sys.argv[1].split(","))


class RefuseBlockedModules:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, RefuseBlockedModules())
from cdcflow.cli import main

sys.exit(main(sys.argv[2:]))
"""


def cdcflow_without(modules: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT, ",".join(modules), *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def needs(what: str, extra: str, module: str) -> str:
    return f"{what} needs cdcflow[{extra}]: pip install 'cdcflow[{extra}]' (missing module {module})"


def test_plugins_list_shows_each_plugin_without_its_extra_as_unavailable(tmp_path: Path) -> None:
    listed = cdcflow_without(ALL_EXTRA_MODULES, "plugins", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {tuple(line.split()[:2]): line for line in listed.stdout.splitlines()}
    expected_unavailable = {
        ("source", "cassandra_commitlog"): ("cassandra", "cassandra"),
        ("source", "cassandra_snapshot"): ("cassandra", "cassandra"),
        ("source", "scylla_cdc"): ("scylla", "cassandra"),
        ("source", "tikv_rawkv"): ("tikv", "grpc"),
        ("sink", "tikv"): ("tikv", "grpc"),
        ("sink", "parquet"): ("spark", "pyspark"),
        ("sink", "delta"): ("spark", "pyspark"),
    }
    for (kind, name), (extra, module) in expected_unavailable.items():
        assert rows[(kind, name)].endswith(f"unavailable: {needs(f'{kind} {name}', extra, module)}")
    core = [("source", "datagen"), ("source", "kafka"), ("sink", "kafka"), ("sink", "file"), ("checkpoint", "kafka")]
    core += [("converter", "avro"), ("converter", "json"), ("checkpoint", "file"), ("transform", "route")]
    for row in core:
        assert "unavailable" not in rows[row], rows[row]


CASSANDRA_SOURCE = "source: {type: cassandra_commitlog, cdc_raw: cdc_raw, hosts: [127.0.0.1], cluster: c}"
TIKV_SOURCE = "source: {type: tikv_rawkv, pd_endpoints: ['127.0.0.1:2379'], cluster: t}"
DATAGEN = "source: {type: datagen, count: 10}"
FILE_SINK = "sink: {type: file, path: out.jsonl}"
GROUP = "engine: {type: worker, group: {bootstrap_servers: '127.0.0.1:9092'}}"
KAFKA_CHECKPOINT = "checkpoint: {type: kafka, bootstrap_servers: '127.0.0.1:9092', topic: needs-extra.offsets}"


@pytest.mark.parametrize(
    ("blocked", "sections", "message"),
    [
        ("cassandra", [CASSANDRA_SOURCE, FILE_SINK], needs("source cassandra_commitlog", "cassandra", "cassandra")),
        ("cramjam", [CASSANDRA_SOURCE, FILE_SINK], needs("source cassandra_commitlog", "cassandra", "cramjam")),
        ("grpc", [TIKV_SOURCE, FILE_SINK], needs("source tikv_rawkv", "tikv", "grpc")),
        (
            "pyspark",
            [DATAGEN, "sink: {type: parquet, path: out}", "engine: {type: spark}"],
            needs("sink parquet", "spark", "pyspark"),
        ),
        ("pyspark", [DATAGEN, FILE_SINK, "engine: {type: spark}"], needs("engine spark", "spark", "pyspark")),
        ("faust", [DATAGEN, FILE_SINK, GROUP, KAFKA_CHECKPOINT], needs("engine.group", "group", "faust")),
    ],
    ids=["cassandra-driver", "cramjam", "grpc", "parquet-sink", "spark-engine", "group"],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_pipeline_needing_a_missing_extra_is_refused_naming_it(
    tmp_path: Path, blocked: str, sections: list[str], message: str, command: str
) -> None:
    (tmp_path / "cdc_raw").mkdir()
    pipeline = tmp_path / "pipeline.yaml"
    if not any(section.startswith("checkpoint:") for section in sections):
        sections = [*sections, "checkpoint: {type: file, path: state}"]
    pipeline.write_text("\n".join(["name: needs-extra", *sections, ""]))
    refused = cdcflow_without((blocked,), command, str(pipeline), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"error: {message}" in refused.stderr.splitlines()
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_the_core_runs_a_pipeline_with_no_extra_installed(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "name: core-only\n"
        "source: {type: datagen, count: 40, tables: 2}\n"
        "transforms: [{type: route, regex: '(.*)', replacement: 'core.$1'}]\n"
        "sink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: file, path: state}\n"
    )
    ran = cdcflow_without(ALL_EXTRA_MODULES, "run", str(pipeline), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert len(lines) == 40
    assert all(re.search(r'"core\.', line) for line in lines)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_extras_table_matches_pyproject() -> None:
    from cdcflow.extras import EXTRAS

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    distributions_of = {
        module: {name.lower().replace("_", "-") for name in names} for module, names in packages_distributions().items()
    }
    core = {_requirement_name(r) for r in project["dependencies"]}
    for extra in EXTRAS:
        listed = {_requirement_name(r) for r in optional[extra.name]}
        for module in extra.modules:
            providers = distributions_of[module.split(".")[0]]
            # google is a namespace several distributions share: its protobuf part comes from protobuf.
            assert providers & listed, f"cdcflow[{extra.name}] lists {sorted(listed)}; {module} comes from {providers}"
            assert not providers & core, f"{module} is an extra's module but the core installs it"
    everything = {f"cdcflow[{extra.name}]" for extra in EXTRAS}
    assert set(optional["all"]) == everything
