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
bash scripts/setup.sh
bash scripts/services.sh install "${services[@]}"
bash scripts/services.sh start "${services[@]}"
"${CDCFLOW_VENV:-.venv}/bin/cdcflow" run "$pipeline"
echo "done: topics $topics on 127.0.0.1:9092; offsets: .venv/bin/cdcflow offsets show $pipeline"
[ "${services[*]}" = "kafka" ] || echo "schemas: $(bash scripts/schema_registry.sh url)"
