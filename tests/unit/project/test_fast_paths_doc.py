"""docs/fast-paths.md is the one table of cdcflow's fast paths: every code name in it exists, every
test it cites exists, and every place the code asks for the compiled core is a "chosen in" entry of it."""

from __future__ import annotations

import ast
import importlib
import re
from typing import Any

from tests.paths import REPO

PAGE = REPO / "docs" / "fast-paths.md"
# The packages of the cdcflow distribution and the module names they install as.
PACKAGES = {
    "connector_core": "cdcflow",
    "sources": "cdcflow.sources",
    "sinks": "cdcflow.sinks",
    "plugins": "cdcflow.plugins",
}
# Callers of native_module() that choose no path.
NOT_A_CHOICE = {
    "cdcflow.native": "the switch itself (and the core's description)",
    "cdcflow.batches": "the compiled core's marker for an absent column, read once at import",
}
_CODE = re.compile(r"`([^`]+)`")
_TEST_FILE = re.compile(r"^(tests|benchmarks)/[\w/]+\.py$")


def _table() -> list[dict[str, str]]:
    lines = PAGE.read_text(encoding="utf-8").split("## The table", 1)[1].splitlines()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    header, body = rows[0], [row for row in rows[2:]]
    return [dict(zip(header, row, strict=True)) for row in body]


def _code_names(cell: str) -> list[str]:
    return [name for name in _CODE.findall(cell) if re.fullmatch(r"cdcflow(\.\w+)+", name)]


def _resolve(dotted: str) -> Any:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def _native_module_callers() -> set[str]:
    """The qualified names of the functions (or modules, at module level) that call native_module()."""
    callers: set[str] = set()
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            module = ".".join([package, *parts])

            def visit(node: ast.AST, scope: list[str], module: str = module) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        visit(child, [*scope, child.name])
                        continue
                    if isinstance(child, ast.Call):
                        function = child.func
                        name = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
                        if name == "native_module":
                            callers.add(".".join([module, *scope]))
                    visit(child, scope)

            visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return callers


def _within(qualified: str, name: str) -> bool:
    """Whether ``qualified`` is ``name`` or inside it (a method of a named class, a function of a module)."""
    return qualified == name or qualified.startswith(f"{name}.")


def test_every_code_name_in_the_table_exists() -> None:
    rows = _table()
    assert len(rows) >= 8
    names = [name for row in rows for cell in row.values() for name in _code_names(cell)]
    assert len(names) >= 20
    for name in names:
        _resolve(name)  # raises, naming what is missing


def test_every_test_the_table_cites_exists() -> None:
    for row in _table():
        cited = row["compared by"]
        files = [REPO / name for name in _CODE.findall(cited) if _TEST_FILE.match(name)]
        assert files, f"{row['hot path']}: no test named"
        text = "".join(path.read_text(encoding="utf-8") for path in files)
        for name in _CODE.findall(cited):
            if name.startswith("test_"):
                assert f"def {name}(" in text, f"{row['hot path']}: {name} is in none of {files}"


def test_every_place_that_asks_for_the_compiled_core_is_in_the_table() -> None:
    chosen_in = [name for row in _table() for name in _code_names(row["chosen in"])]
    callers = {c for c in _native_module_callers() if not any(_within(c, n) for n in NOT_A_CHOICE)}
    assert len(callers) >= 5  # the scan finds the known places (commit log, Avro, JSON, datagen, kafka)
    missing = [c for c in sorted(callers) if not any(_within(c, n) for n in chosen_in)]
    assert missing == [], "choices of the compiled core docs/fast-paths.md does not list"
