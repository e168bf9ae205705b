#!/usr/bin/env bash
# Debezium's Cassandra 5 connector (the standalone agent that runs beside a node) and what it needs
# at run time, from Maven Central into the cache, for `python benchmarks/peers.py debezium`.
#   bash scripts/debezium.sh install   resolve (once per version) and print the folder of jars
#   bash scripts/debezium.sh path      print the folder (empty if not installed)
# scripts/maven/debezium/pom.xml says why its two jars are copied apart from the rest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"
pom="$here/maven/debezium/pom.xml"
DEBEZIUM_VERSION="$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$pom")"
libs="$CDCFLOW_CACHE/debezium-cassandra-$DEBEZIUM_VERSION/libs"

install() {
  if [ ! -f "$libs/.complete" ]; then
    echo "debezium: resolving Debezium's Cassandra 5 connector $DEBEZIUM_VERSION from Maven Central into $libs" >&2
    rm -rf "$libs" && mkdir -p "$libs"
    # The connector's dependencies, then its own two jars (their POMs cannot be read: see the POM).
    mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies dependency:copy \
      -DincludeScope=runtime -DoutputDirectory="$libs" >&2
    touch "$libs/.complete"
  fi
  echo "$libs"
}

case "${1:-install}" in
  install) install ;;
  path) if [ -f "$libs/.complete" ]; then echo "$libs"; fi ;;
  *) die "usage: $0 install|path" ;;
esac
