#!/usr/bin/env bash
# Install cdcflow, its test tools and the example third-party plugin into the current Python.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e ".[dev]"
if [ -d tests/fixtures/example_plugin ]; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore ./tests/fixtures/example_plugin
fi
# Spark's Kafka connector for the installed pyspark, from Maven Central (once per Spark version).
bash scripts/spark_jars.sh install > /dev/null
