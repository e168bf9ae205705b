#!/usr/bin/env bash
# A second Kafka broker for the security and shutdown tests, beside the shared one:
# PLAINTEXT on 127.0.0.1:19092 and SASL_SSL on 127.0.0.1:19094 (SCRAM-SHA-256 and -512 over TLS,
# client certificates required).
#   KAFKA_TLS_DIR=DIR KAFKA_SCRAM_USERS='SCRAM-SHA-512=[name=u,password=p]' bash scripts/kafka_secure.sh start
#   bash scripts/kafka_secure.sh stop|status|reset
# The certificates are the caller's (tests/integration/secure_kafka.py creates them): DIR holds
# broker.pem (PKCS#8 key + certificate chain) and ca.pem; SCRAM users are created when the storage is
# first formatted (`reset` to change them). Same Kafka as scripts/kafka.sh, data in its own folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export KAFKA_NAME=kafka-secure
export KAFKA_PORT="${KAFKA_SECURE_PORT:-19092}"
export KAFKA_CONTROLLER_PORT="${KAFKA_SECURE_CONTROLLER_PORT:-19093}"
export KAFKA_SASL_SSL_PORT="${KAFKA_SECURE_SASL_SSL_PORT:-19094}"
exec bash "$here/kafka.sh" "$@"
