"""The installed layout: one ``cdcflow`` namespace over the repository's folders, a core that
imports no plugin, and engines that do not import each other."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.paths import REPO

FOLDERS = {
    "cdcflow": "connector_core",
    "cdcflow.sources": "sources",
    "cdcflow.sinks": "sinks",
    "cdcflow.plugins": "plugins",
}


def _pyproject() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _imports(file: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_every_package_folder_is_installed_under_cdcflow() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]  # type: ignore[index]
    assert setuptools["package-dir"] == FOLDERS
    expected = set()
    for package, folder in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            expected.add(".".join([package, *relative.parts]))
    assert set(setuptools["packages"]) == expected


def test_the_core_imports_no_plugin() -> None:
    offenders = {
        f"{file.relative_to(REPO)}: {module}"
        for file in (REPO / "connector_core").rglob("*.py")
        for module in _imports(file)
        if module.startswith(("cdcflow.sources", "cdcflow.sinks"))
    }
    assert not offenders


def test_the_worker_and_spark_engines_do_not_import_each_other() -> None:
    spark_files = list((REPO / "connector_core" / "spark_engine").rglob("*.py"))
    assert not {m for f in spark_files for m in _imports(f) if m == "cdcflow.worker"}
    assert not {m for m in _imports(REPO / "connector_core" / "worker.py") if m.startswith("cdcflow.spark_engine")}


def test_a_plugin_package_imports_no_other_plugins_internals() -> None:
    # Code two plugins share has a package of its own (cdcflow.sources.cql, cdcflow.sources.tikv_client,
    # cdcflow.sinks.spark_columns).
    shared = ("cdcflow.sources.cql", "cdcflow.sources.tikv_client", "cdcflow.sinks.spark_columns")
    plugins = [p for root in ("sources", "sinks") for p in (REPO / root).iterdir() if (p / "__init__.py").exists()]
    offenders = set()
    for package in plugins:
        own = f"cdcflow.{package.parent.name}.{package.name}"
        for file in package.rglob("*.py"):
            for module in _imports(file):
                other_plugin = module.startswith(("cdcflow.sources.", "cdcflow.sinks.")) and not module.startswith(own)
                if other_plugin and not module.startswith(shared):
                    offenders.add(f"{file.relative_to(REPO)}: {module}")
    assert not offenders


def test_no_plugin_imports_an_engines_internals() -> None:
    # A plugin sees the engines only through the contract, the capability protocols
    # (cdcflow.capabilities), the error policy (cdcflow.record_errors) and the public module for
    # Spark plugins (cdcflow.spark_rows): an engine's modules (the worker's loop, its process and
    # group runner, the Spark engine) may change with the engine.
    engines = ("cdcflow.spark_engine", "cdcflow.pipeline", "cdcflow.worker", "cdcflow.group")
    offenders = {
        f"{file.relative_to(REPO)}: {module}"
        for root in ("sources", "sinks", "plugins")
        for file in (REPO / root).rglob("*.py")
        for module in _imports(file)
        if any(module == engine or module.startswith(f"{engine}.") for engine in engines)
    }
    assert not offenders


def test_the_product_neither_imports_nor_loads_test_stand_ins() -> None:
    # Stand-ins of servers (tests/standins/: the ScyllaDB writer, the TiKV cluster) are test
    # machinery: the installed package must not ship them nor load them when a plugin starts.
    offenders = {
        f"{file.relative_to(REPO)}: {module}"
        for folder in FOLDERS.values()
        for file in (REPO / folder).rglob("*.py")
        for module in _imports(file)
        if module == "tests" or module.startswith("tests.")
    }
    assert not offenders
    probe = (
        "import sys, cdcflow.sources.scylla_cdc, cdcflow.sources.scylla_cdc.plugin\n"
        "print(sorted(n for n, m in list(sys.modules.items())"
        " if n.startswith('tests') or hasattr(m, 'ScyllaCdcWriter')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    assert loaded.stdout.strip() == "[]"


def test_listing_plugins_and_validating_a_worker_pipeline_import_no_pyspark() -> None:
    # pyspark (and the JVM bridge it brings) is for running a Spark pipeline or planning its query:
    # `cdcflow plugins list` and `cdcflow validate` of a worker pipeline load every built-in plugin,
    # the Spark-only sinks among them, and still must not import it.
    probe = (
        "import sys\n"
        "from cdcflow.cli import main\n"
        "for argv in (['plugins', 'list'], ['validate', sys.argv[1]]):\n"
        "    assert main(argv) == 0, argv\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('pyspark', 'py4j')))"
    )
    pipeline = REPO / "config" / "datagen-to-kafka.yaml"
    loaded = subprocess.run(
        [sys.executable, "-c", probe, str(pipeline)], capture_output=True, text=True, check=True, cwd="/"
    )
    assert loaded.stdout.strip().splitlines()[-1] == "[]"
