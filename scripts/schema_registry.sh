#!/usr/bin/env bash
# A Confluent-compatible schema registry on 127.0.0.1 for the avro tests and demos:
#   bash scripts/schema_registry.sh install|start|stop|status
# No such registry can be run from Maven Central or PyPI on these machines (README, Limits), so
# this starts the stand-in in tests/standins/schema_registry.py (the REST subset cdcflow uses).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

REGISTRY_PORT="${REGISTRY_PORT:-8081}"
data="$CDCFLOW_DATA/schema-registry"
pidfile="$data/registry.pid"

answers() {
  python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$REGISTRY_PORT/subjects', timeout=2)" 2>/dev/null
}

start() {
  if is_running "$pidfile" && answers; then echo "registry: already running on 127.0.0.1:$REGISTRY_PORT"; return 0; fi
  mkdir -p "$data"
  # `cd` on its own line: `cd && cmd &` would background a subshell, and its pid is not the server's.
  cd "$here/.."
  nohup python3 -m tests.standins.schema_registry --port "$REGISTRY_PORT" >"$data/registry.out" 2>&1 &
  echo $! >"$pidfile"
  wait_until "registry" 30 answers || { cat "$data/registry.out"; die "registry: did not answer"; }
  echo "registry: http://127.0.0.1:$REGISTRY_PORT (pid $(cat "$pidfile"))"
}

case "${1:-}" in
  install) : ;;  # nothing to fetch: it is part of the repo
  start) start ;;
  stop) stop_pid "registry" "$pidfile" 10 ;;
  status) is_running "$pidfile" && answers ;;
  *) die "usage: $0 install|start|stop|status" ;;
esac
