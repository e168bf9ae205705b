#!/usr/bin/env bash
# install|start|stop|status for the services tests and demos use.
#   bash scripts/services.sh start|stop|install [SERVICE...]   (default: kafka registry cassandra)
#   bash scripts/services.sh status [SERVICE...]               (default: every service below)
# status prints one line per service, running or stopped, and exits non-zero if a named service
# (or, with none named, one of the default three) is stopped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
action="${1:?usage: $0 install|start|stop|status [SERVICE...]}"
shift
defaults=(kafka registry cassandra)
everything=(kafka registry cassandra kafka-secure spark-cluster cassandra-ring)

script_of() {
  case "$1" in
    kafka) echo "$here/kafka.sh" ;;
    registry) echo "$here/schema_registry.sh" ;;
    cassandra) echo "$here/cassandra.sh" ;;
    kafka-secure) echo "$here/kafka_secure.sh" ;;
    spark-cluster) echo "$here/spark_cluster.sh" ;;
    cassandra-ring) echo "$here/cassandra_ring.sh" ;;
    *) echo "unknown service $1 (${everything[*]})" >&2; return 2 ;;
  esac
}

where_of() {
  case "$1" in
    kafka) echo "127.0.0.1:${KAFKA_PORT:-9092}" ;;
    registry) echo "http://127.0.0.1:${REGISTRY_PORT:-8081}/apis/ccompat/v7 (Apicurio Registry)" ;;
    cassandra) echo "${CASSANDRA_HOST:-127.0.0.1}:${CASSANDRA_PORT:-9042}" ;;
    kafka-secure) echo "127.0.0.1:${KAFKA_SECURE_PORT:-19092}, SASL_SSL 127.0.0.1:${KAFKA_SECURE_SASL_SSL_PORT:-19094}" ;;
    spark-cluster) echo "spark://127.0.0.1:7077" ;;
    cassandra-ring) echo "127.0.0.11, 127.0.0.12" ;;
  esac
}

services=("$@")
status=0
if [ "$action" = status ]; then
  [ "${#services[@]}" -gt 0 ] || services=("${everything[@]}")
  for service in "${services[@]}"; do
    script="$(script_of "$service")" || exit 2
    if bash "$script" status >/dev/null 2>&1; then
      printf '%-15s running  %s\n' "$service" "$(where_of "$service")"
    else
      printf '%-15s stopped\n' "$service"
      if [ "$#" -gt 0 ] || [[ " ${defaults[*]} " == *" $service "* ]]; then status=1; fi
    fi
  done
  exit "$status"
fi

[ "${#services[@]}" -gt 0 ] || services=("${defaults[@]}")
for service in "${services[@]}"; do
  script="$(script_of "$service")" || exit 2
  bash "$script" "$action" || status=$?
done
exit "$status"
