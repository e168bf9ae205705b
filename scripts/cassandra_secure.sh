#!/usr/bin/env bash
# A second Cassandra 5.0 node as production clusters run it: CQL only over TLS (clients present a
# certificate), PasswordAuthenticator, and the guardrail partition_keys_in_select_fail_threshold
# at 100 (ScyllaDB's max_partition_key_restrictions_per_query). On 127.0.0.21:9042, its own
# cluster name, data and JMX port, apart from the test node on 127.0.0.1.
#   bash scripts/cassandra_secure.sh install|start|stop|status|reset|certs
# Certificates (a CA, the node's, a client's, and a CA that signed nothing here) are made with
# openssl into $CDCFLOW_DATA/cassandra-secure/tls on first start. The default superuser
# cassandra/cassandra exists once the node is up (no 10 s setup delay); tests create their roles.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

host="${CASSANDRA_SECURE_HOST:-127.0.0.21}"
data="$CDCFLOW_DATA/cassandra-secure"
tls="$data/tls"

certs() {
  if [ -f "$tls/.complete" ]; then return 0; fi
  rm -rf "$tls" && mkdir -p "$tls"
  (
    cd "$tls"
    subject() { openssl req -newkey rsa:2048 -nodes -keyout "$1-key.pem" -out "$1.csr" -subj "/CN=$2" 2>/dev/null; }
    sign() {
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out "$1-cert.pem" \
        -days 3650 -extfile <(printf '%s\n' "$2") 2>/dev/null
    }
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 3650 \
      -subj "/CN=cdcflow test CA" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout stranger-ca-key.pem -out stranger-ca.pem -days 3650 \
      -subj "/CN=a CA that signed nothing here" 2>/dev/null
    subject node "$host"
    sign node "subjectAltName=IP:$host"$'\n'"extendedKeyUsage=serverAuth"
    cat node-key.pem node-cert.pem >node.pem
    subject client "cdcflow client"
    sign client "extendedKeyUsage=clientAuth"
    rm -f ./*.csr ./*.srl
  )
  touch "$tls/.complete"
  echo "cassandra-secure: certificates in $tls"
}

node() {
  CASSANDRA_HOST="$host" CASSANDRA_CLUSTER_NAME="cdcflow-secure" CASSANDRA_JMX_PORT="${CASSANDRA_SECURE_JMX_PORT:-7321}" \
    CASSANDRA_DATA_DIR="$data/node" CASSANDRA_HEAP="${CASSANDRA_SECURE_HEAP:-512m}" \
    CASSANDRA_AUTHENTICATOR=PasswordAuthenticator CASSANDRA_CLIENT_TLS_DIR="$tls" \
    CASSANDRA_EXTRA_YAML="partition_keys_in_select_fail_threshold: 100" \
    CASSANDRA_JVM_EXTRA="-Dcassandra.superuser_setup_delay_ms=0" \
    bash "$here/cassandra.sh" "$@"
}

case "${1:-}" in
  install) node install ;;
  certs) certs ;;
  start) certs; node start ;;
  stop) node stop ;;
  status) node status ;;
  reset) node stop; rm -rf "$data" ;;
  *) die "usage: $0 install|start|stop|status|reset|certs" ;;
esac
