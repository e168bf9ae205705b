#!/usr/bin/env bash
# Regenerate tests/fixtures/commitlog/*: one fresh single node per commit-log format, each running
# tests/commitlog_cases.py. Stops a running test node first and starts it again afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${CDCFLOW_VENV:-.venv}/bin/python"  # the generator needs cassandra-driver: the project's environment
[ -x "$python" ] || { echo "make_commitlog_fixtures: no $python: run scripts/setup.sh first" >&2; exit 1; }
was_running=0
bash scripts/cassandra.sh status >/dev/null 2>&1 && was_running=1
bash scripts/cassandra.sh stop
generate() {
  local name="$1" mode="$2" compression="$3"
  local data; data="$(mktemp -d)"
  export CDCFLOW_DATA="$data" CASSANDRA_STORAGE_COMPATIBILITY_MODE="$mode" CASSANDRA_COMMITLOG_COMPRESSION="$compression"
  bash scripts/cassandra.sh start
  "$python" -m tests.fixtures.commitlog.generate "$name" "$data/cassandra/cdc_raw" || { bash scripts/cassandra.sh stop; exit 1; }
  bash scripts/cassandra.sh stop
  rm -rf "$data"
  unset CDCFLOW_DATA CASSANDRA_STORAGE_COMPATIBILITY_MODE CASSANDRA_COMMITLOG_COMPRESSION
}
generate v7 CASSANDRA_4 ""
generate v8 NONE ""
generate v8-lz4 NONE LZ4Compressor
generate v7-zstd CASSANDRA_4 ZstdCompressor
generate v8-snappy NONE SnappyCompressor
generate v8-deflate NONE DeflateCompressor
if [ "$was_running" = 1 ]; then bash scripts/cassandra.sh start; fi
