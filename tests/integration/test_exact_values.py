"""Every CQL value survives source -> converter -> consumer unchanged, json and avro.

Values of random CQL types (nested collections, tuples, user types; decimals of any scale, varints
of any size) are serialised by cassandra-driver as Cassandra stores them, decoded by cdcflow's
CQL codec (the sources' path) and by the driver plus ``from_driver`` (bootstrap's path), written
by the json converter and by the avro converter against the real registry, then read back by a
consumer that knows only the wire formats (``tests/consumers.py``) and compared exactly.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from cdcflow.contract import PluginContext
from cdcflow.converters import AvroConverter, AvroConverterConfig, JsonConverter, JsonConverterConfig
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.sources.cql import build_type, from_driver
from tests.consumers import AvroReader, connect_value, same
from tests.cql_values import CqlCase, cql_rows

CONTEXT = PluginContext("t", Path("t.yaml"))
SOURCE = SourceInfo("cassandra", "c1", "ks", "t", "node1", {"segment": 1, "position": 2}, 1_700_000_000_000_000)


def _row(cases: list[CqlCase]) -> tuple[ChangeEvent, dict[str, Any]]:
    """An event carrying each case's value as decoded from the driver's bytes, checked on the way
    against what the event must hold; and the values it must hold."""
    user_types = {t.name: t for case in cases for t in case.user_types}
    definitions = {name: ([f for f, _ in t.fields], [k for _, k in t.fields]) for name, t in user_types.items()}
    after: dict[str, Any] = {"id": 1}
    for index, case in enumerate(cases):
        raw = case.driver.serialize(case.driver_value, 4)
        codec = build_type(case.text, definitions)
        from_storage = codec.decode(raw)
        assert same(from_storage, case.event_value), (case.text, from_storage, case.event_value)
        from_bootstrap = from_driver(case.driver.deserialize(raw, 4), codec)
        assert same(from_bootstrap, case.event_value), (case.text, from_bootstrap, case.event_value)
        after[f"c{index}"] = from_storage
    key = (Column("id", "bigint", optional=False),)
    columns = key + tuple(Column(f"c{i}", case.text) for i, case in enumerate(cases))
    schema = RowSchema("c1.ks.t", key, columns, user_types=tuple(user_types.values()))
    event = ChangeEvent(Op.CREATE, {"id": 1}, None, after, SOURCE, 99, schema)
    return event, {"id": 1, **{f"c{i}": case.event_value for i, case in enumerate(cases)}}


_ROWS = cql_rows()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ROWS)
def test_every_cql_value_survives_the_json_converter_exactly(cases: list[CqlCase]) -> None:
    event, expected = _row(cases)
    converter = JsonConverter(JsonConverterConfig(type="json"), CONTEXT)
    document = json.loads(converter.serialize_value(event, "c1.ks.t") or b"")
    after_schema = next(f for f in document["schema"]["fields"] if f["field"] == "after")
    consumed = connect_value(after_schema, document["payload"]["after"])
    assert same(consumed, expected), (consumed, expected)
    # cdcflow's own reader (the kafka source) gets the event's values back too.
    read_back = converter.deserialize("c1.ks.t", converter.serialize_value(event, "c1.ks.t") or b"")
    assert same(read_back["after"], expected)


@pytest.mark.registry
def test_every_cql_value_survives_the_avro_converter_and_the_registry_exactly(registry_url: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    deserializer = AvroDeserializer(client)
    converter = AvroConverter(AvroConverterConfig(type="avro", schema_registry_url=registry_url), CONTEXT)

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_ROWS)
    def survives(cases: list[CqlCase]) -> None:
        event, expected = _row(cases)
        topic = f"exact-{uuid.uuid4().hex[:12]}"  # a subject per shape: each is its own table
        data = converter.serialize_value(event, topic)
        assert data is not None
        datum = deserializer(data, SerializationContext(topic, MessageField.VALUE))
        schema_id = int.from_bytes(data[1:5], "big")
        writer_schema = json.loads(client.get_schema(schema_id).schema_str)
        consumed = AvroReader(writer_schema).read(datum)["after"]
        # Avro records have every field: a frozen user type's null fields are null either way.
        assert same(consumed, expected), (consumed, expected)
        assert same(converter.deserialize(topic, data)["after"], expected)

    survives()


def test_debezium_variable_scale_decimal_and_connect_decimal_bytes() -> None:
    """The exact bytes Debezium and Kafka Connect write (Kafka 4.1's connect-json, from a Java
    BigDecimal of -12345.678901234567890, gave scale 15 and value ff54ab567314e0f52e)."""
    schema = RowSchema(
        "c1.ks.t",
        (Column("id", "int", False),),
        (Column("id", "int", False), Column("amount", "decimal"), Column("big", "varint")),
    )
    event = ChangeEvent(
        Op.CREATE,
        {"id": 1},
        None,
        {"id": 1, "amount": Decimal("-12345.678901234567890"), "big": 2**70},
        SOURCE,
        9,
        schema,
    )
    precise = json.loads(JsonConverter(JsonConverterConfig(type="json"), CONTEXT).serialize_value(event, "t") or b"")
    after = precise["payload"]["after"]
    assert after["amount"] == {"scale": 15, "value": "/1SrVnMU4PUu"}  # base64 of ff54ab567314e0f52e
    assert after["big"] == "QAAAAAAAAAAA"  # 2^70: 0x40 and eight zero bytes
    amount_schema = next(
        f
        for f in next(f for f in precise["schema"]["fields"] if f["field"] == "after")["fields"]
        if f["field"] == "amount"
    )
    assert amount_schema["name"] == "io.debezium.data.VariableScaleDecimal" and amount_schema["version"] == 1
    as_text = JsonConverter(JsonConverterConfig(type="json", decimal_handling="string"), CONTEXT)
    text_after = json.loads(as_text.serialize_value(event, "t") or b"")["payload"]["after"]
    assert text_after == {"id": 1, "amount": "-12345.678901234567890", "big": str(2**70)}
    as_double = JsonConverter(JsonConverterConfig(type="json", decimal_handling="double"), CONTEXT)
    double_after = json.loads(as_double.serialize_value(event, "t") or b"")["payload"]["after"]
    assert double_after["amount"] == -12345.678901234567 and double_after["big"] == "QAAAAAAAAAAA"
