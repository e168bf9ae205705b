"""The json converter writes Kafka Connect's schema+payload documents that read back to the same payload."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from cdcflow.contract import PluginContext
from cdcflow.converters import JsonConverter, JsonConverterConfig
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SchemaChangeEvent, SourceInfo

CONTEXT = PluginContext("t", Path("t.yaml"))
SCHEMA = RowSchema(
    "c1.ks.t",
    (Column("id", "int", optional=False),),
    (Column("id", "int", optional=False), Column("blob", "blob"), Column("tags", "set<text>")),
)
SOURCE = SourceInfo(
    "cassandra", "c1", "ks", "t", "node1", {"file": "CommitLog-7-1.log", "pos": 12}, 1_700_000_000_123_456
)


def test_envelope_schema_and_payload() -> None:
    converter = JsonConverter(JsonConverterConfig(type="json"), CONTEXT)
    event = ChangeEvent(Op.CREATE, {"id": 7}, None, {"id": 7, "blob": b"\x00\xff", "tags": ["a"]}, SOURCE, 99, SCHEMA)
    document = json.loads(converter.serialize_value(event, "c1.ks.t") or b"")
    schema, payload = document["schema"], document["payload"]
    assert schema["name"] == "c1.ks.t.Envelope"
    after = next(f for f in schema["fields"] if f["field"] == "after")
    assert [(f["field"], f["type"]) for f in after["fields"]] == [("id", "int32"), ("blob", "bytes"), ("tags", "array")]
    assert payload["op"] == "c" and payload["before"] is None and payload["ts_ms"] == 99
    assert base64.b64decode(payload["after"]["blob"]) == b"\x00\xff"
    assert payload["source"]["ts_ms"] == 1_700_000_000_123 and json.loads(payload["source"]["position"])["pos"] == 12
    # Read back with its schema, the payload has the event's values again (bytes, not base64).
    read_back = converter.deserialize("c1.ks.t", converter.serialize_value(event, "x") or b"")
    assert read_back == {**payload, "after": event.after}
    key = json.loads(converter.serialize_key(event, "c1.ks.t") or b"")
    assert key["payload"] == {"id": 7} and key["schema"]["fields"][0] == {
        "type": "int32",
        "optional": False,
        "field": "id",
    }


def test_unwrapped_delete_is_a_tombstone_and_schema_changes_have_their_own_shape() -> None:
    converter = JsonConverter(JsonConverterConfig(type="json", schemas_enable=False), CONTEXT)
    tombstone = ChangeEvent(Op.DELETE, {"id": 7}, None, None, SOURCE, 0, SCHEMA, envelope=False)
    assert converter.serialize_value(tombstone, "t") is None
    change = SchemaChangeEvent("ks", "t", "ALTER TABLE ks.t ADD c int", SOURCE, 5)
    assert change.destination() == "c1"
    assert json.loads(converter.serialize_key(change, "c1") or b"") == {"keyspace": "ks"}
    assert json.loads(converter.serialize_value(change, "c1") or b"")["ddl"] == "ALTER TABLE ks.t ADD c int"


def test_source_schemas_list_exactly_the_payload_fields() -> None:
    import fastavro

    from cdcflow.schemas import avro_value_schema, connect_value_schema

    event = ChangeEvent(Op.CREATE, {"id": 7}, None, {"id": 7, "blob": None, "tags": None}, SOURCE, 99, SCHEMA)
    payload_fields = list(SOURCE.to_payload())
    connect_source = next(f for f in connect_value_schema(event)["fields"] if f["field"] == "source")
    assert [f["field"] for f in connect_source["fields"]] == payload_fields
    avro_schema = avro_value_schema(event)
    avro_source = next(f for f in avro_schema["fields"] if f["name"] == "source")["type"]
    assert [f["name"] for f in avro_source["fields"]] == payload_fields
    assert fastavro.validate(event.value_payload(), fastavro.parse_schema(avro_schema))


def test_a_schemaless_column_null_in_one_record_is_typed_by_the_next_records_value() -> None:
    # Records read back from Kafka carry no table metadata: their schema is read off the values,
    # and a null says nothing about the column's type.
    converter = JsonConverter(JsonConverterConfig(type="json"), CONTEXT)

    def after_types(row: dict[str, object]) -> dict[str, str]:
        event = ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, **row}, SOURCE, 99)
        schema = json.loads(converter.serialize_value(event, "t") or b"")["schema"]
        after = next(f for f in schema["fields"] if f["field"] == "after")
        return {f["field"]: f["type"] for f in after["fields"]}

    assert after_types({"code": None})["code"] == "string"  # nothing else is known: optional text
    assert after_types({"code": 5})["code"] == "int64"
    assert after_types({"code": 2.5})["code"] == "float64"


def test_a_decimal_whose_plain_text_is_too_long_is_refused_not_spelled_out() -> None:
    # 1E+1308565576 is a valid CQL decimal (its scale is an int32); its plain text, what the string
    # forms write, is 1.3 GB of zeros: the record is refused with its column named, while a long
    # value under the limit is still written exactly.
    from decimal import Decimal

    from cdcflow.errors import ConverterError
    from cdcflow.jsontext import MAX_PLAIN_DECIMAL_CHARS

    schema = RowSchema(
        "c1.ks.t",
        (Column("id", "int", optional=False),),
        (Column("id", "int", optional=False), Column("price", "decimal"), Column("history", "list<decimal>")),
    )
    converter = JsonConverter(JsonConverterConfig(type="json", decimal_handling="string"), CONTEXT)
    long_but_written = Decimal(f"7E+{MAX_PLAIN_DECIMAL_CHARS - 10}")
    for column, value in (
        ("price", Decimal("-2.4E+1308565576")),
        ("history", [Decimal("1.5"), Decimal("1E+1308565576")]),
    ):
        event = ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, column: value}, SOURCE, 1, schema)
        with pytest.raises(ConverterError, match=rf"column '{column}': decimal .* no plain text within 100,000"):
            converter.serialize_value(event, "c1.ks.t")
    event = ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, "price": long_but_written}, SOURCE, 1, schema)
    payload = json.loads(converter.serialize_value(event, "c1.ks.t") or b"")["payload"]
    assert payload["after"]["price"] == "7" + "0" * (MAX_PLAIN_DECIMAL_CHARS - 10)


def test_a_decimal_beyond_a_doubles_range_is_refused_under_double_not_written_as_infinity() -> None:
    # decimal_handling: double rounds to the nearest double; 1E+400 has none (float() gives inf,
    # which json.dumps writes as the non-JSON token Infinity). The largest double is still written.
    from decimal import Decimal

    from cdcflow.errors import ConverterError

    schema = RowSchema(
        "c1.ks.t",
        (Column("id", "int", optional=False),),
        (Column("id", "int", optional=False), Column("price", "decimal"), Column("history", "list<decimal>")),
    )
    converter = JsonConverter(JsonConverterConfig(type="json", decimal_handling="double"), CONTEXT)
    for column, value in (("price", Decimal("-1E+400")), ("history", [Decimal("1.5"), Decimal("2E+308")])):
        event = ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, column: value}, SOURCE, 1, schema)
        with pytest.raises(ConverterError, match=rf"column '{column}': decimal .*beyond a double"):
            converter.serialize_value(event, "c1.ks.t")
    largest = Decimal("1.7976931348623157E+308")
    event = ChangeEvent(Op.CREATE, {"id": 1}, None, {"id": 1, "price": largest}, SOURCE, 1, schema)
    payload = json.loads(converter.serialize_value(event, "c1.ks.t") or b"")["payload"]
    assert payload["after"]["price"] == float(largest) and payload["after"]["price"] != float("inf")
