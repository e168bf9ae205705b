#!/usr/bin/env bash
# A Spark standalone cluster on this machine, from the installed pyspark's own spark-class: a
# master on spark://127.0.0.1:7077 and two workers (1 core, 1 GiB each), every daemon and every
# executor a JVM of its own, as on a real cluster (the tests run the spark engine against it).
#   bash scripts/spark_cluster.sh start|stop|status
# SPARK_CLUSTER_WORKERS, SPARK_WORKER_CORES, SPARK_WORKER_MEMORY and SPARK_MASTER_PORT change the
# shape; the master's web UI (and its JSON at /json/) is on SPARK_MASTER_WEBUI_PORT (18080).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

# pyspark (and its spark-class) is in the project's virtual environment, never the system's python3.
python="${PYTHON:-$(project_python)}"
command -v "$python" >/dev/null || die "spark-cluster: no $python (pyspark lives in the project's virtual environment): run scripts/setup.sh first"
SPARK_HOME="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
MASTER_PORT="${SPARK_MASTER_PORT:-7077}"
WEBUI_PORT="${SPARK_MASTER_WEBUI_PORT:-18080}"
WORKERS="${SPARK_CLUSTER_WORKERS:-2}"
WORKER_CORES="${SPARK_WORKER_CORES:-1}"
WORKER_MEMORY="${SPARK_WORKER_MEMORY:-1g}"
MASTER_URL="spark://127.0.0.1:$MASTER_PORT"
data="$CDCFLOW_DATA/spark-cluster"
# The daemons need little: the executors they start are where the work runs.
export SPARK_DAEMON_MEMORY="${SPARK_DAEMON_MEMORY:-256m}"
export SPARK_LOCAL_IP=127.0.0.1  # the daemons; a driver binds and advertises as Spark does by default

alive_workers() {
  "$python" - "$WEBUI_PORT" <<'EOF'
import json, sys, urllib.request
try:
    state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=3))
except Exception:
    print(-1)
else:
    print(sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE"))
EOF
}

master_up() { [ "$(alive_workers)" -ge 0 ]; }
all_up() { [ "$(alive_workers)" -ge "$WORKERS" ]; }

launched=()  # the daemons this start launched: what a failed start stops (not ones that ran before)
daemon() {  # name, class, arguments...
  local name="$1"; shift
  if is_running "$data/$name.pid"; then return 0; fi
  nohup "$SPARK_HOME/bin/spark-class" "$@" >"$data/$name.out" 2>&1 &
  echo $! >"$data/$name.pid"
  launched+=("$name")
}

abandon_launched() {
  local name
  for name in ${launched[@]+"${launched[@]}"}; do stop_pid "spark-$name" "$data/$name.pid" 30 >&2; done
  die "$@"
}

start() {
  mkdir -p "$data"
  if all_up; then echo "spark-cluster: already running at $MASTER_URL"; return 0; fi
  daemon master org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$MASTER_PORT" \
    --webui-port "$WEBUI_PORT"
  wait_until spark-master 90 master_up \
    || { tail -n 30 "$data/master.out"; abandon_launched "spark-cluster: the master did not start"; }
  for i in $(seq 1 "$WORKERS"); do
    mkdir -p "$data/worker$i"
    daemon "worker$i" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores "$WORKER_CORES" \
      --memory "$WORKER_MEMORY" --webui-port "$((WEBUI_PORT + i))" --work-dir "$data/worker$i" "$MASTER_URL"
  done
  wait_until spark-workers 120 all_up \
    || { tail -n 30 "$data"/worker*.out; abandon_launched "spark-cluster: $WORKERS workers did not register"; }
  echo "spark-cluster: $MASTER_URL, $WORKERS workers of $WORKER_CORES core(s) and $WORKER_MEMORY"
}

stop() {
  for pidfile in "$data"/worker*.pid "$data/master.pid"; do
    [ -e "$pidfile" ] || continue
    stop_pid "spark-$(basename "$pidfile" .pid)" "$pidfile" 30
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) is_running "$data/master.pid" && all_up ;;
  master-url) echo "$MASTER_URL" ;;
  *) die "usage: $0 start|stop|status|master-url" ;;
esac
