#!/usr/bin/env bash
# Install cdcflow, start the local Kafka broker and stream 100,000 synthetic changes into it.
#   bash scripts/demo.sh          as Debezium-style JSON (topics cdc.datagen.shop.table_N)
#   bash scripts/demo.sh --avro   as Avro in the Confluent wire format, schemas registered in the
#                                 local Apicurio Registry (also started; topics cdc-avro.datagen.shop.table_N)
set -euo pipefail
cd "$(dirname "$0")/.."
pipeline=config/datagen-to-kafka.yaml
services=(kafka)
topics="cdc.datagen.shop.table_{0,1,2}"
case "${1:-}" in
  "") ;;
  --avro) pipeline=config/datagen-to-kafka-avro.yaml; services=(kafka registry); topics="cdc-avro.datagen.shop.table_{0,1,2}" ;;
  *) echo "usage: $0 [--avro]" >&2; exit 2 ;;
esac
# The pipelines write to KAFKA_BOOTSTRAP (and REGISTRY_URL): the broker started below, also when
# KAFKA_PORT (REGISTRY_PORT) puts it on another port.
export KAFKA_BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-9092}}"
[ "${services[*]}" = "kafka" ] || export REGISTRY_URL="${REGISTRY_URL:-$(bash scripts/schema_registry.sh url)}"
bash scripts/setup.sh
bash scripts/services.sh install "${services[@]}"
bash scripts/services.sh start "${services[@]}"
cdcflow="${CDCFLOW_VENV:-.venv}/bin/cdcflow"
"$cdcflow" run "$pipeline"
[ "${services[*]}" = "kafka" ] || echo "schemas: $REGISTRY_URL"
echo "done: topics $topics on $KAFKA_BOOTSTRAP; offsets: $cdcflow offsets show $pipeline"
