#!/usr/bin/env bash
# A ring of N Cassandra nodes on 127.0.0.11, 127.0.0.12, ... (CQL 9042 on each address), for
# replication tests: bash scripts/cassandra_ring.sh start|stop|status|reset [N]
#                    bash scripts/cassandra_ring.sh start-node|stop-node I   (one node, 1-based)
# Separate from the single test node on 127.0.0.1 (its own cluster name and data); node 1 is the
# seed, and nodes join one after another, as Cassandra requires.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"
action="${1:?usage: $0 start|stop|status|reset [nodes] | start-node|stop-node I}"
nodes="${2:-${CASSANDRA_RING_NODES:-2}}"
ring="$CDCFLOW_DATA/cassandra-ring"

node() {
  local i="$1"; shift
  CASSANDRA_HOST="127.0.0.$((10 + i))" CASSANDRA_SEEDS="127.0.0.11" CASSANDRA_CLUSTER_NAME="cdcflow-ring" \
    CASSANDRA_JMX_PORT="$((7300 + i))" CASSANDRA_DATA_DIR="$ring/node$i" CASSANDRA_HEAP="${CASSANDRA_HEAP:-512m}" \
    bash "$here/cassandra.sh" "$@"
}

case "$action" in
  start) for i in $(seq 1 "$nodes"); do node "$i" start; done ;;
  stop) for i in $(seq "$nodes" -1 1); do node "$i" stop || true; done ;;
  status) for i in $(seq 1 "$nodes"); do node "$i" status || exit 1; done ;;
  start-node) node "$2" start ;;
  stop-node) node "$2" stop ;;
  reset) for i in $(seq "$nodes" -1 1); do node "$i" stop || true; done; rm -rf "$ring" ;;
  *) die "usage: $0 start|stop|status|reset [nodes]" ;;
esac
