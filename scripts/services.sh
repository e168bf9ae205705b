#!/usr/bin/env bash
# install|start|stop|status for the test services: kafka, registry, cassandra (all when none is named).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
action="${1:?usage: $0 install|start|stop|status [kafka] [registry] [cassandra]}"
shift
services=("$@")
[ "${#services[@]}" -gt 0 ] || services=(kafka registry cassandra)
status=0
for service in "${services[@]}"; do
  case "$service" in
    kafka) script="$here/kafka.sh" ;;
    registry) script="$here/schema_registry.sh" ;;
    cassandra) script="$here/cassandra.sh" ;;
    *) echo "unknown service $service (kafka, registry, cassandra)" >&2; exit 2 ;;
  esac
  bash "$script" "$action" || status=$?
done
exit "$status"
