#!/usr/bin/env bash
# Apache Kafka 4 (KRaft, one combined broker+controller) on 127.0.0.1, from Maven Central artifacts.
#   bash scripts/kafka.sh install|start|stop|status
# Data survives stop/start (the broker-outage test relies on it); `reset` wipes it.
# Another instance runs beside it with its own KAFKA_NAME (data folder) and ports; with
# KAFKA_SASL_SSL_PORT it also listens for SASL_SSL clients (scripts/kafka_secure.sh).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/_service_lib.sh
source "$here/_service_lib.sh"

KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/maven/kafka/pom.xml")"
KAFKA_NAME="${KAFKA_NAME:-kafka}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_NUM_PARTITIONS="${KAFKA_NUM_PARTITIONS:-3}"
# A broker opens every partition's log before it serves: with thousands of partitions kept from
# earlier runs, and a machine busy installing, that took over 120 s here. It is waited for as long
# as its process lives, up to this bound.
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-600}"
libs="$CDCFLOW_CACHE/kafka-$KAFKA_VERSION/libs"
data="$CDCFLOW_DATA/$KAFKA_NAME"
pidfile="$data/kafka.pid"
log="$data/kafka.out"
# SASL_SSL listener (off when empty): SCRAM-SHA-256 and -512 over TLS, client certificates required.
# KAFKA_TLS_DIR holds broker.pem (the broker's PKCS#8 key and certificate chain) and ca.pem (the CA
# that signed the clients' certificates); KAFKA_SCRAM_USERS lists the users created when the storage
# is formatted, ';'-separated: 'SCRAM-SHA-512=[name=alice,password=secret]'.
KAFKA_SASL_SSL_PORT="${KAFKA_SASL_SSL_PORT:-}"
KAFKA_TLS_DIR="${KAFKA_TLS_DIR:-$data/tls}"
KAFKA_SCRAM_USERS="${KAFKA_SCRAM_USERS:-}"

install() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  echo "kafka: resolving Kafka $KAFKA_VERSION from Maven Central into $libs"
  rm -rf "$libs" && mkdir -p "$libs"
  mvn -q -B -Dstyle.color=never -f "$here/maven/kafka/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$libs"
  touch "$libs/.complete"
}

write_config() {
  mkdir -p "$data/logs"
  local listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT" protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [ -n "$KAFKA_SASL_SSL_PORT" ]; then
    for file in broker.pem ca.pem; do
      [ -f "$KAFKA_TLS_DIR/$file" ] || die "$KAFKA_NAME: $KAFKA_TLS_DIR/$file is missing (KAFKA_TLS_DIR needs broker.pem and ca.pem)"
    done
    listeners="$listeners,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT"
    protocols="$protocols,SASL_SSL:SASL_SSL"
  fi
  cat >"$data/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=$listeners
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$data/logs
num.partitions=$KAFKA_NUM_PARTITIONS
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=67108864
log.cleaner.dedupe.buffer.size=8388608
EOF
  if [ -n "$KAFKA_SASL_SSL_PORT" ]; then
    local scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
    cat >>"$data/server.properties" <<EOF
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_TLS_DIR/broker.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$KAFKA_TLS_DIR/ca.pem
listener.name.sasl_ssl.ssl.client.auth=required
EOF
  fi
  cat >"$data/log4j2.yaml" <<EOF
Configuration:
  Appenders:
    File: {name: file, fileName: "$data/server.log", PatternLayout: {pattern: "[%d] %p %m (%c)%n"}}
  Loggers:
    Root: {level: WARN, AppenderRef: [{ref: file}]}
    Logger: [{name: kafka.server.KafkaServer, level: INFO}, {name: kafka.server.KafkaRaftServer, level: INFO}]
EOF
}

# Small heap: tests need a broker that answers, not a fast one; two cores are shared with Spark.
java_cmd=(java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$data/log4j2.yaml" -cp "$libs/*")

format_storage() {
  if [ -f "$data/logs/meta.properties" ]; then return 0; fi
  local cluster_id scram=() user users
  cluster_id="$("${java_cmd[@]}" kafka.tools.StorageTool random-uuid)"
  # SCRAM credentials live in the KRaft metadata log: written once, when the storage is formatted.
  IFS=';' read -ra users <<<"$KAFKA_SCRAM_USERS"
  for user in "${users[@]}"; do [ -z "$user" ] || scram+=(--add-scram "$user"); done
  "${java_cmd[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$data/server.properties" ${scram[@]+"${scram[@]}"} \
    >"$data/format.out" 2>&1 \
    || { cat "$data/format.out"; die "kafka: storage format failed"; }
}

# Kafka's ApiVersions request, version 0 (clients/src/main/resources/common/message/
# ApiVersionsRequest.json; the framing in the protocol guide, kafka.apache.org/protocol): size 17,
# api key 18, version 0, correlation id "cdcf", client id "cdcflow". The broker's reply echoes the
# correlation id and error code 0; a KRaft broker processes requests only once the controller has
# unfenced it (core/.../server/BrokerServer.scala, startup), so an answer means it serves clients.
api_versions_request='\x00\x00\x00\x11\x00\x12\x00\x00cdcf\x00\x07cdcflow'
answers() {
  [[ "$(tcp_reply_hex 127.0.0.1 "$KAFKA_PORT" "$api_versions_request" 10)" =~ ^[0-9a-f]{8}636463660000$ ]]
}

start() {
  install
  if is_running "$pidfile"; then
    await_existing "$KAFKA_NAME" "$pidfile" "$KAFKA_START_TIMEOUT" answers
    echo "$KAFKA_NAME: already running on 127.0.0.1:$KAFKA_PORT (pid $(cat "$pidfile"))"
    return 0
  fi
  refuse_if_answering "$KAFKA_NAME" "127.0.0.1:$KAFKA_PORT" answers
  write_config
  format_storage
  nohup "${java_cmd[@]}" kafka.Kafka "$data/server.properties" >"$log" 2>&1 &
  echo $! >"$pidfile"
  wait_started "$KAFKA_NAME" "$pidfile" "$KAFKA_START_TIMEOUT" answers || {
    tail -n 40 "$log" "$data/server.log" 2>/dev/null
    abandon_start "$KAFKA_NAME" "$pidfile" "$KAFKA_NAME: did not answer on 127.0.0.1:$KAFKA_PORT"
  }
  echo "$KAFKA_NAME: running on 127.0.0.1:$KAFKA_PORT${KAFKA_SASL_SSL_PORT:+, SASL_SSL on 127.0.0.1:$KAFKA_SASL_SSL_PORT} (pid $(cat "$pidfile"))"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_pid "$KAFKA_NAME" "$pidfile" 60 ;;
  status) service_status "$KAFKA_NAME" "127.0.0.1:$KAFKA_PORT" "$pidfile" answers ;;
  reset) stop_pid "$KAFKA_NAME" "$pidfile" 60; rm -rf "$data" ;;
  *) die "usage: $0 install|start|stop|status|reset" ;;
esac
