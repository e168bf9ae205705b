#!/usr/bin/env bash
# mypy over the `cdcflow` package as it is installed: the repository's top-level folders are mapped
# into one namespace (pyproject's package-dir), which mypy cannot follow by itself, so it checks a
# tree of links that mirrors the installed layout. Rebuilt on every run: new modules are never missed.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${CDCFLOW_VENV:-.venv}/bin/python"  # mypy is a test tool of the project's environment
[ -x "$python" ] || { echo "typecheck: no $python: run scripts/setup.sh --dev first" >&2; exit 1; }
tree=build/typecheck
rm -rf "$tree"
mkdir -p "$tree/cdcflow"
for entry in connector_core/*; do
  case "$(basename "$entry")" in __pycache__) continue ;; esac
  ln -s "$PWD/$entry" "$tree/cdcflow/$(basename "$entry")"
done
for package in sources sinks plugins; do
  ln -s "$PWD/$package" "$tree/cdcflow/$package"
done
MYPYPATH="$tree" exec "$python" -m mypy -p cdcflow "$@"
