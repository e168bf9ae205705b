#!/usr/bin/env bash
# install|start|stop|status for the test services: kafka, registry (both when none is named).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
action="${1:?usage: $0 install|start|stop|status [kafka] [registry]}"
shift
services=("$@")
[ "${#services[@]}" -gt 0 ] || services=(kafka registry)
status=0
for service in "${services[@]}"; do
  case "$service" in
    kafka) script="$here/kafka.sh" ;;
    registry) script="$here/schema_registry.sh" ;;
    *) echo "unknown service $service (kafka, registry)" >&2; exit 2 ;;
  esac
  bash "$script" "$action" || status=$?
done
exit "$status"
