#!/usr/bin/env bash
# Install cdcflow into its own virtual environment, .venv (never into the system's Python, which
# Debian and Ubuntu refuse as "externally managed"), and Spark's Kafka connector from Maven Central.
#   bash scripts/setup.sh          cdcflow and the runtime dependencies of every connector and engine
#   bash scripts/setup.sh --dev    also the test tools (pytest, ruff, mypy...), as scripts/test.sh does
# CDCFLOW_VENV names another environment folder (an existing one is reused); PYTHON the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CDCFLOW_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python="${PYTHON:-python3}"  # PYTHON=python3.12 picks another interpreter
  command -v "$python" >/dev/null || { echo "setup: cdcflow needs Python 3.11 or newer ($python) on the PATH" >&2; exit 1; }
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup: cdcflow needs Python 3.11 or newer; $python is $("$python" --version 2>&1)" >&2
    exit 1
  }
  if ! "$python" -m venv "$venv"; then
    rm -rf "$venv"
    echo "setup: '$python -m venv' failed; on Debian or Ubuntu install the venv module: apt install python3-venv" >&2
    exit 1
  fi
fi
# Every extra (cdcflow[all]: the Cassandra, ScyllaDB, TiKV, Spark and worker-group dependencies;
# docs/installation.md), so that everything in the README runs.
extras="[all]"
[ "${1:-}" = "--dev" ] && extras="[all,dev]"
# The compiled core (native/, Rust) is built by this install when cargo is on the PATH (rustup puts
# it in ~/.cargo/bin); crates come from crates.io. Without it, or with CDCFLOW_NATIVE_BUILD=0,
# cdcflow installs and runs on its pure-Python core.
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".$extras"
echo "setup: cdcflow core: $("$venv/bin/python" -c 'from cdcflow.native import core_description; print(core_description())')"
# Spark's Kafka connector for the installed pyspark, from Maven Central (once per Spark version).
PYTHON="$venv/bin/python" bash scripts/spark_jars.sh install > /dev/null
