#!/usr/bin/env bash
# The whole test suite on a fresh machine: install (into .venv, with the test tools), start the real
# Kafka, schema registry and Cassandra (from Maven Central, into ~/.cache/cdcflow), lint, type-check,
# run pytest, stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
venv="${CDCFLOW_VENV:-.venv}"
export PATH="$PWD/$venv/bin:$PATH"
started=()
services=(kafka registry cassandra)
bash scripts/services.sh install "${services[@]}"
for service in "${services[@]}"; do
  if ! bash scripts/services.sh status "$service" >/dev/null 2>&1; then
    bash scripts/services.sh start "$service"
    started+=("$service")
  fi
done
# The tests start these themselves when they need them (the secure broker's certificates are made
# by the tests); stopped afterwards unless they were running before.
for service in kafka-secure spark-cluster; do
  bash scripts/services.sh status "$service" >/dev/null 2>&1 || started+=("$service")
done
stop_started() { if [ "${#started[@]}" -gt 0 ]; then bash scripts/services.sh stop "${started[@]}" || true; fi; }
trap stop_started EXIT
python -m ruff check .
bash scripts/typecheck.sh
# The compiled core's own Rust tests (framing, values, Avro, JSON, decimals; native/src/**, under
# #[cfg(test)]) with the whole suite. Its test binary links libpython and embeds the venv's Python.
# The compiled core is optional, so without cargo they are skipped, saying so.
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"
if [ "$#" -eq 0 ]; then
  if command -v cargo >/dev/null 2>&1; then
    PYO3_PYTHON="$(command -v python)" cargo test --quiet --manifest-path native/Cargo.toml
  else
    echo "test: cargo is not on the PATH: the compiled core's Rust tests (native/) are skipped"
  fi
fi
python -m pytest -q -p no:cacheprovider --durations=20 "$@"
# The run above used the compiled core when it is built (its equivalence tests compare it with the
# pure-Python reference); the reference is what runs without a Rust toolchain, so its unit tests
# run again on it alone (about half a minute).
if [ "$#" -eq 0 ] && python -c 'import sys; from cdcflow.native import native_module; sys.exit(native_module() is None)'; then
  CDCFLOW_PURE_PYTHON=1 python -m pytest -q -p no:cacheprovider tests/unit
fi
