#!/usr/bin/env bash
# Apache Cassandra 5.0 on 127.0.0.1 with CDC on, from Maven Central artifacts (Java 17).
#   bash scripts/cassandra.sh install|start|stop|status|reset
# Small commit-log segments (1 MiB) so tests see many segments; periodic sync every second.
# Data survives stop/start; `reset` wipes it.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

CASSANDRA_VERSION="$(sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$here/maven/cassandra/pom.xml")"
CASSANDRA_HOST="${CASSANDRA_HOST:-127.0.0.1}"
CASSANDRA_PORT="${CASSANDRA_PORT:-9042}"
CASSANDRA_HEAP="${CASSANDRA_HEAP:-768m}"
# CASSANDRA_4 (the 5.0 default) writes commit-log version 7; NONE writes version 8.
CASSANDRA_STORAGE_COMPATIBILITY_MODE="${CASSANDRA_STORAGE_COMPATIBILITY_MODE:-CASSANDRA_4}"
# Empty for plain segments, or LZ4Compressor, SnappyCompressor, DeflateCompressor, ZstdCompressor.
CASSANDRA_COMMITLOG_COMPRESSION="${CASSANDRA_COMMITLOG_COMPRESSION:-}"
libs="$CDCFLOW_CACHE/cassandra-$CASSANDRA_VERSION/libs"
# A ring of nodes (scripts/cassandra_ring.sh) runs this script once per node with its own address,
# data folder, JMX port and the ring's seed and name.
data="${CASSANDRA_DATA_DIR:-$CDCFLOW_DATA/cassandra}"
CASSANDRA_SEEDS="${CASSANDRA_SEEDS:-$CASSANDRA_HOST}"
CASSANDRA_CLUSTER_NAME="${CASSANDRA_CLUSTER_NAME:-cdcflow-test}"
CASSANDRA_JMX_PORT="${CASSANDRA_JMX_PORT:-7199}"
# A node with client TLS and passwords (scripts/cassandra_secure.sh) sets these; the test node keeps
# the defaults: no authentication, plain CQL.
CASSANDRA_AUTHENTICATOR="${CASSANDRA_AUTHENTICATOR:-AllowAllAuthenticator}"
# A folder holding node.pem (private key, then certificate) and ca.pem: CQL only over TLS, and
# clients must present a certificate the CA signed.
CASSANDRA_CLIENT_TLS_DIR="${CASSANDRA_CLIENT_TLS_DIR:-}"
# Extra cassandra.yaml lines (guardrails...) and JVM options.
CASSANDRA_EXTRA_YAML="${CASSANDRA_EXTRA_YAML:-}"
CASSANDRA_JVM_EXTRA="${CASSANDRA_JVM_EXTRA:-}"
pidfile="$data/cassandra.pid"
log="$data/cassandra.out"

install() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  echo "cassandra: resolving Cassandra $CASSANDRA_VERSION from Maven Central into $libs"
  rm -rf "$libs" && mkdir -p "$libs"
  mvn -q -B -Dstyle.color=never -f "$here/maven/cassandra/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$libs"
  touch "$libs/.complete"
}

write_config() {
  mkdir -p "$data"/{data,commitlog,cdc_raw,saved_caches,hints,triggers}
  cat >"$data/cassandra.yaml" <<EOF
cluster_name: $CASSANDRA_CLUSTER_NAME
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$CASSANDRA_SEEDS:7000"
listen_address: $CASSANDRA_HOST
rpc_address: $CASSANDRA_HOST
native_transport_port: $CASSANDRA_PORT
storage_port: 7000
endpoint_snitch: SimpleSnitch
data_file_directories: [$data/data]
commitlog_directory: $data/commitlog
saved_caches_directory: $data/saved_caches
hints_directory: $data/hints
cdc_raw_directory: $data/cdc_raw
cdc_enabled: true
cdc_total_space: 1024MiB
commitlog_sync: periodic
commitlog_sync_period: 1000ms
commitlog_segment_size: 1MiB
authenticator: $CASSANDRA_AUTHENTICATOR
authorizer: AllowAllAuthorizer
auto_snapshot: false
concurrent_compactors: 1
compaction_throughput: 0MiB/s
storage_compatibility_mode: $CASSANDRA_STORAGE_COMPATIBILITY_MODE
EOF
  if [ -n "$CASSANDRA_CLIENT_TLS_DIR" ]; then
    # PEM files straight from openssl (Cassandra 5.0's PEMBasedSslContextFactory): no keytool stores.
    cat >>"$data/cassandra.yaml" <<EOF
client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: $CASSANDRA_CLIENT_TLS_DIR/node.pem
  truststore: $CASSANDRA_CLIENT_TLS_DIR/ca.pem
EOF
  fi
  if [ -n "$CASSANDRA_EXTRA_YAML" ]; then printf '%s\n' "$CASSANDRA_EXTRA_YAML" >>"$data/cassandra.yaml"; fi
  if [ -n "$CASSANDRA_COMMITLOG_COMPRESSION" ]; then
    printf 'commitlog_compression:\n  - class_name: %s\n' "$CASSANDRA_COMMITLOG_COMPRESSION" >>"$data/cassandra.yaml"
  fi
  cat >"$data/logback.xml" <<EOF
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$data/system.log</file>
    <encoder><pattern>%d %-5level [%thread] %logger{20}: %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
  <logger name="org.apache.cassandra.service.CassandraDaemon" level="INFO"/>
  <logger name="org.apache.cassandra.transport.Server" level="INFO"/>
</configuration>
EOF
}

# Cassandra's own Java 17 module flags (conf/jvm17-server.options): it reaches into JDK internals.
java_flags=(
  -Djdk.attach.allowAttachSelf=true
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
  --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
  --add-exports java.sql/java.sql=ALL-UNNAMED
  --add-exports java.base/java.lang.ref=ALL-UNNAMED
  --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
  --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
  --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
  --add-opens java.base/java.lang.module=ALL-UNNAMED
  --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
  --add-opens java.base/jdk.internal.math=ALL-UNNAMED
  --add-opens java.base/jdk.internal.module=ALL-UNNAMED
  --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
  --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.io=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED
  -Dio.netty.tryReflectionSetAccessible=true
)

# CQL's OPTIONS request in a protocol v4 frame (native_protocol_v4.spec, sections 2 and 4.1.3):
# version 4, no flags, stream 1, opcode 0x05, empty body. A node serving CQL answers SUPPORTED
# (version 0x84: a response, stream 1, opcode 0x06); it opens the native transport last, once it
# can serve queries. A node that takes CQL only over TLS is asked for a connection alone.
cql_options_request='\x04\x00\x00\x01\x05\x00\x00\x00\x00'
answers() {
  if [ -n "$CASSANDRA_CLIENT_TLS_DIR" ]; then tcp_accepts "$CASSANDRA_HOST" "$CASSANDRA_PORT"; return; fi
  [ "$(tcp_reply_hex "$CASSANDRA_HOST" "$CASSANDRA_PORT" "$cql_options_request" 5)" = 8400000106 ]
}

start() {
  install
  if is_running "$pidfile"; then
    await_existing cassandra "$pidfile" 240 answers
    echo "cassandra: already running on $CASSANDRA_HOST:$CASSANDRA_PORT (pid $(cat "$pidfile"))"
    return 0
  fi
  refuse_if_answering cassandra "$CASSANDRA_HOST:$CASSANDRA_PORT" answers
  write_config
  nohup java -Xms"$CASSANDRA_HEAP" -Xmx"$CASSANDRA_HEAP" -XX:+UseG1GC -Djava.awt.headless=true "${java_flags[@]}" \
    -Dcassandra.config="file://$data/cassandra.yaml" -Dcassandra.storagedir="$data" -Dcassandra.triggers_dir="$data/triggers" \
    -Dcassandra.jmx.local.port="$CASSANDRA_JMX_PORT" \
    -Dlogback.configurationFile="$data/logback.xml" -Dcassandra-foreground=yes \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 -Dcassandra.ring_delay_ms=1000 $CASSANDRA_JVM_EXTRA \
    -cp "$libs/*" org.apache.cassandra.service.CassandraDaemon >"$log" 2>&1 &
  echo $! >"$pidfile"
  wait_started cassandra "$pidfile" 240 answers || {
    tail -n 40 "$log" "$data/system.log" 2>/dev/null
    abandon_start cassandra "$pidfile" "cassandra: did not answer CQL on $CASSANDRA_HOST:$CASSANDRA_PORT"
  }
  echo "cassandra: running on $CASSANDRA_HOST:$CASSANDRA_PORT (pid $(cat "$pidfile"))"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_pid "cassandra" "$pidfile" 60 ;;
  status) service_status cassandra "$CASSANDRA_HOST:$CASSANDRA_PORT" "$pidfile" answers ;;
  reset) stop_pid "cassandra" "$pidfile" 60; rm -rf "$data" ;;
  *) die "usage: $0 install|start|stop|status|reset" ;;
esac
