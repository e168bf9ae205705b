#!/usr/bin/env bash
# Install cdcflow, start the local Kafka broker and stream 100,000 synthetic changes into it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh install kafka
bash scripts/services.sh start kafka
"${CDCFLOW_VENV:-.venv}/bin/cdcflow" run config/datagen-to-kafka.yaml
echo "done: topics cdc.datagen.shop.table_{0,1,2} on 127.0.0.1:9092; offsets: .venv/bin/cdcflow offsets show config/datagen-to-kafka.yaml"
