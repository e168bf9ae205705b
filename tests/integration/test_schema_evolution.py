"""Schema evolution on the real registry (Apicurio, global BACKWARD rule): a Cassandra table gains a
column, then drops one, while the pipeline runs with avro; every schema is registered, every record
reads back through the registry, and the new column is optional with a null default. An
incompatible schema is refused by the registry (409) and becomes cdcflow's IncompatibleSchemaError."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig
from cdcflow.errors import IncompatibleSchemaError
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from tests.consumers import AvroReader
from tests.integration.kafka_helpers import Received, read_topics, start_logged, topics_with_prefix

pytestmark = [pytest.mark.kafka, pytest.mark.registry]


def _wait(condition: Callable[[], bool], what: str, log: list[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {''.join(log)[-2000:]}"
        time.sleep(0.5)


def test_a_column_added_then_dropped_while_running(
    tmp_path: Path,
    kafka_bootstrap: str,
    registry_url: str,
    topic_prefix: str,
    cassandra_session: Any,
    cdc_raw_dir: Path,
    keyspace: str,
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    session = cassandra_session
    session.execute(f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, name text, total decimal) WITH cdc = true")
    file = tmp_path / "evolve.yaml"
    file.write_text(
        f"name: evolve-{topic_prefix}\n"
        f"source: {{type: cassandra_commitlog, cdc_raw: '{cdc_raw_dir}', cluster: {topic_prefix}, node: node1,"
        f" tables: [{keyspace}.orders], processed_segments: keep, error_store: {{type: file, path: errors.jsonl}}}}\n"
        f"sink: {{type: kafka, bootstrap_servers: '{kafka_bootstrap}', linger_ms: 20, converter: avro, "
        f"schema_registry_url: '{registry_url}'}}\n"
        "checkpoint: {type: file, path: ckpt, interval_ms: 300}\n"
    )
    topic = f"{topic_prefix}.{keyspace}.orders"

    def changes() -> list[Received]:
        if topic not in topics_with_prefix(kafka_bootstrap, topic):
            return []
        return [r for r in read_topics(kafka_bootstrap, [topic]) if r.value is not None]

    insert = f"INSERT INTO {keyspace}.orders"
    process, log = start_logged(file)
    try:
        for n in range(1, 4):
            session.execute(f"{insert} (id, name, total) VALUES ({n}, 'n{n}', {n}.50)")
        _wait(lambda: len(changes()) >= 3, "the first rows", log)
        session.execute(f"ALTER TABLE {keyspace}.orders ADD coupon text")
        for n in range(4, 7):
            session.execute(f"{insert} (id, name, total, coupon) VALUES ({n}, 'n{n}', {n}.50, 'c{n}')")
        _wait(lambda: len(changes()) >= 6, "rows with the new column", log)
        session.execute(f"ALTER TABLE {keyspace}.orders DROP name")
        for n in range(7, 10):
            session.execute(f"{insert} (id, total, coupon) VALUES ({n}, {n}.50, 'c{n}')")
        _wait(lambda: len(changes()) >= 9, "rows after the drop", log)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, "".join(log)[-3000:]

    # Every schema registered under the topic's subject, under the registry's BACKWARD rule.
    api = registry_url.rstrip("/")
    assert requests.get(f"{api}/config", timeout=10).json()["compatibilityLevel"] == "BACKWARD"
    versions = requests.get(f"{api}/subjects/{topic}-value/versions", timeout=10).json()
    assert len(versions) == 3
    schemas = [
        json.loads(requests.get(f"{api}/subjects/{topic}-value/versions/{v}", timeout=10).json()["schema"])
        for v in versions
    ]
    value_fields = [[f["name"] for f in s["fields"][1]["type"][1]["fields"]] for s in schemas]
    assert value_fields == [["id", "name", "total"], ["id", "coupon", "name", "total"], ["id", "coupon", "total"]]
    coupon = next(f for f in schemas[1]["fields"][1]["type"][1]["fields"] if f["name"] == "coupon")
    assert coupon == {"name": "coupon", "type": ["null", "string"], "default": None}

    # Every record reads back through the registry, each with its own writer's schema.
    client = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    deserializer = AvroDeserializer(client)
    rows = {}
    for record in changes():
        writer = json.loads(client.get_schema(int.from_bytes((record.value or b"")[1:5], "big")).schema_str)
        datum = deserializer(record.value, SerializationContext(topic, MessageField.VALUE))
        after = AvroReader(writer).read(datum)["after"]
        rows[after["id"]] = after
    total = {n: Decimal(f"{n}.50") for n in range(1, 10)}
    assert rows == {
        **{n: {"id": n, "name": f"n{n}", "total": total[n]} for n in range(1, 4)},
        **{n: {"id": n, "coupon": f"c{n}", "name": f"n{n}", "total": total[n]} for n in range(4, 7)},
        **{n: {"id": n, "coupon": f"c{n}", "total": total[n]} for n in range(7, 10)},
    }


def test_an_incompatible_schema_is_refused_by_the_registry(registry_url: str, topic_prefix: str) -> None:
    converter = AvroConverter(
        AvroConverterConfig(type="avro", schema_registry={"url": registry_url, "timeout": 10}),
        PluginContext("t", Path("t.yaml")),
    )
    source = SourceInfo("cassandra", "c", "ks", "t", "n", {}, 1)
    key = (Column("id", "int", False),)

    def event(kind: str, value: Any) -> ChangeEvent:
        schema = RowSchema("c.ks.t", key, (*key, Column("code", kind)))
        return ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, "code": value}, source, 1, schema)

    topic = f"{topic_prefix}.incompatible"
    assert converter.serialize_value(event("int", 7), topic) is not None
    with pytest.raises(IncompatibleSchemaError, match=r"HTTP 409"):  # int -> string is not BACKWARD
        converter.serialize_value(event("text", "x7"), topic)
