"""A third-party transform that adds, renames and drops columns (``reshape`` from the example plugin):
json, avro (real registry) and parquet, on the worker and the spark engine, describe exactly the
columns the events carry, with their values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.consumers import AvroReader, connect_value
from tests.integration.conftest import REPO
from tests.integration.kafka_helpers import datagen, read_topics, topics_with_prefix
from tests.integration.parquet_helpers import read_parquet

pytestmark = [pytest.mark.kafka]

DATAGEN = {"count": 240, "partitions": 2, "tables": 1, "keys": 60, "event_size": 16, "seed": 11}
LIMIT = 50_000.0
COLUMNS = ["id", "seq", "customer", "amount", "updated_at_us", "amount_bucket"]
RESHAPE = f"{{type: reshape, bucket: amount, bucket_limit: {LIMIT}, rename: {{name: customer}}, drop: [payload]}}"


Started = tuple[subprocess.Popen[bytes], Path]  # a run and its log


def _start(folder: Path, name: str, sink: str, engine: str, registry_url: str = "") -> Started:
    """``cdcflow run`` of datagen -> reshape -> route -> ``sink``, started (it ends when datagen does)."""
    fields = ", ".join(f"{k}: {v}" for k, v in DATAGEN.items())
    file = folder / f"{name}.yaml"
    file.write_text(
        f"name: {name}\n"
        f"source: {{type: datagen, {fields}}}\n"
        f'transforms: [{RESHAPE}, {{type: route, regex: "datagen\\\\.shop\\\\.(.*)", replacement: "{name}.$1"}}]\n'
        f"sink: {sink}\n"
        f"checkpoint: {{type: file, path: ckpt-{name}}}\n"
        f"engine: {engine}\n"
    )
    # Its log in a file: runs side by side must not block on a full pipe nobody reads yet.
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cdcflow.cli", "run", str(file)],
            stdout=subprocess.DEVNULL,
            stderr=out,
            cwd=REPO,
            env={**os.environ, "REGISTRY_URL": registry_url},
        )
    return process, log


def _finish(*runs: Started) -> None:
    """Waits for every run; each must end by itself with status 0."""
    try:
        for process, log in runs:
            process.wait(timeout=600)
            assert process.returncode == 0, log.read_text(errors="replace")[-3000:]
    finally:
        for process, _ in runs:
            if process.poll() is None:
                process.kill()


def _run(folder: Path, name: str, sink: str, engine: str, registry_url: str = "") -> None:
    _finish(_start(folder, name, sink, engine, registry_url))


def _expected() -> dict[int, dict[str, Any]]:
    """seq -> the row image reshape makes of datagen's event (after, or before for a delete)."""
    source = datagen(DATAGEN)
    rows = {}
    for partition in source.partitions():
        start = source.initial_offset(partition)
        for event in source.read(partition, start, source.latest_offset(partition, start, None)):
            row = dict(event.after or event.before or {})
            row["customer"] = row.pop("name")
            del row["payload"]
            row["amount_bucket"] = "small" if row["amount"] < LIMIT else "large"
            rows[row["seq"]] = row
    return rows


def _check(rows: list[dict[str, Any]], fields: list[str]) -> None:
    assert fields == COLUMNS  # the schema lists exactly the transformed columns, in order
    expected = _expected()
    assert {"small", "large"} <= {r["amount_bucket"] for r in expected.values()}
    got = {r["seq"]: {k: v for k, v in r.items() if k != "updated_at_us"} for r in rows}
    assert got == {seq: {k: v for k, v in r.items() if k != "updated_at_us"} for seq, r in expected.items()}


def _kafka_rows(bootstrap: str, prefix: str, decode: Any) -> tuple[list[dict[str, Any]], list[str]]:
    rows, fields = [], []
    for record in read_topics(bootstrap, topics_with_prefix(bootstrap, prefix)):
        if record.value is None:
            continue  # the tombstone after a delete
        payload, fields = decode(record.value)
        rows.append(payload["after"] or payload["before"])
    return rows, fields


def _json(value: bytes) -> tuple[dict[str, Any], list[str]]:
    document = json.loads(value)
    after = next(f for f in document["schema"]["fields"] if f["field"] == "after")
    return connect_value(document["schema"], document["payload"]), [f["field"] for f in after["fields"]]


def _avro(registry_url: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    deserializer = AvroDeserializer(client)

    def decode(value: bytes) -> tuple[dict[str, Any], list[str]]:
        schema = json.loads(client.get_schema(int.from_bytes(value[1:5], "big")).schema_str)
        datum = deserializer(value, SerializationContext("t", MessageField.VALUE))
        before = next(f for f in schema["fields"] if f["name"] == "before")["type"][1]
        return AvroReader(schema).read(datum), [f["name"] for f in before["fields"]]

    return decode


SPARK = "{type: spark, master: 'local[1]', trigger_interval_ms: 500}"


@pytest.mark.registry
def test_worker_engine_json_and_avro(
    tmp_path: Path, kafka_bootstrap: str, registry_url: str, topic_prefix: str
) -> None:
    kafka = f"{{type: kafka, bootstrap_servers: '{kafka_bootstrap}'"
    _run(tmp_path, f"{topic_prefix}-wj", kafka + ", converter: json}", "{type: worker}")
    _check(*_kafka_rows(kafka_bootstrap, f"{topic_prefix}-wj", _json))
    _run(
        tmp_path,
        f"{topic_prefix}-wa",
        kafka + ", converter: avro, schema_registry_url: '${REGISTRY_URL}'}",
        "{type: worker}",
        registry_url,
    )
    _check(*_kafka_rows(kafka_bootstrap, f"{topic_prefix}-wa", _avro(registry_url)))


@pytest.mark.spark
@pytest.mark.registry
def test_spark_engine_json_avro_and_parquet(
    tmp_path: Path, kafka_bootstrap: str, registry_url: str, topic_prefix: str
) -> None:
    # Three Spark applications, run side by side: each spends most of its time starting Spark.
    kafka = f"{{type: kafka, bootstrap_servers: '{kafka_bootstrap}'"
    _finish(
        _start(tmp_path, f"{topic_prefix}-sp", "{type: parquet, path: out}", SPARK),
        _start(tmp_path, f"{topic_prefix}-sj", kafka + ", converter: json}", SPARK),
        _start(
            tmp_path,
            f"{topic_prefix}-sa",
            kafka + ", converter: avro, schema_registry_url: '${REGISTRY_URL}'}",
            SPARK,
            registry_url,
        ),
    )
    table = read_parquet(tmp_path / "out")
    envelope = {"op", "ts_ms", "source_ts_us", "source_partition", "source_position", "snapshot", "table", "event_date"}
    columns = [n for n in table.schema.names if n not in envelope]
    _check(table.select(columns).to_pylist(), columns)
    _check(*_kafka_rows(kafka_bootstrap, f"{topic_prefix}-sj", _json))
    _check(*_kafka_rows(kafka_bootstrap, f"{topic_prefix}-sa", _avro(registry_url)))
