"""Schemas for records: CQL column types mapped to Avro and to Kafka Connect's JSON schema.

Seed 001's "Data Type Conversions" table is the base. Where it is silent or lossy, cdcflow
chooses: ``uuid``/``timeuuid`` become Avro strings with the ``uuid`` logical type (readable, and
what Debezium does) rather than the seed's bytes; ``timestamp`` carries ``timestamp-millis``;
maps with non-text keys become arrays of key/value records, since Avro map keys are strings.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from cdcflow.events import ChangeEvent, Column, Record, RowSchema, SchemaChangeEvent

__all__ = [
    "UNTYPED_NULL",
    "avro_envelope_row",
    "avro_key_schema",
    "avro_value_schema",
    "connect_key_schema",
    "connect_value_schema",
    "infer_row_schema",
    "parse_cql_type",
]

UNTYPED_NULL = "null"
"""The type :func:`infer_row_schema` gives a column whose value is null: nothing says what it
holds. Converters write it as optional text (the only value is null); a sink that merges the
schemas of several events (``parquet``) takes the column's type from the events that have a value."""

_SIMPLE_AVRO: dict[str, Any] = {
    "ascii": "string",
    "text": "string",
    "varchar": "string",
    "inet": "string",
    "duration": "string",
    "bigint": "long",
    "counter": "long",
    "varint": "long",
    "time": "long",
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "date": "int",
    "blob": "bytes",
    "boolean": "boolean",
    "decimal": "double",
    "double": "double",
    "float": "float",
    "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
    "uuid": {"type": "string", "logicalType": "uuid"},
    "timeuuid": {"type": "string", "logicalType": "uuid"},
}
_SIMPLE_CONNECT: dict[str, str] = {
    "ascii": "string",
    "text": "string",
    "varchar": "string",
    "inet": "string",
    "duration": "string",
    "uuid": "string",
    "timeuuid": "string",
    "bigint": "int64",
    "counter": "int64",
    "varint": "int64",
    "time": "int64",
    "timestamp": "int64",
    "int": "int32",
    "date": "int32",
    "smallint": "int16",
    "tinyint": "int8",
    "blob": "bytes",
    "boolean": "boolean",
    "decimal": "float64",
    "double": "float64",
    "float": "float32",
}

_TYPE_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[<>,]|[0-9]+)")


@lru_cache(maxsize=4096)
def parse_cql_type(text: str) -> tuple[str, tuple[Any, ...]]:
    """``map<text, frozen<list<int>>>`` -> ``("map", (("text", ()), ("list", (("int", ()),))))``.

    ``frozen<>`` is dropped: it changes storage, not the value's shape.
    """
    tokens = [m.group(1) for m in _TYPE_TOKEN.finditer(text)]
    position = 0

    def parse() -> tuple[str, tuple[Any, ...]]:
        nonlocal position
        name = tokens[position].lower()
        position += 1
        arguments: list[Any] = []
        if position < len(tokens) and tokens[position] == "<":
            position += 1
            while tokens[position] != ">":
                if tokens[position] == ",":
                    position += 1
                    continue
                if tokens[position].isdigit():  # vector<float, 3>: the dimension
                    arguments.append(int(tokens[position]))
                    position += 1
                else:
                    arguments.append(parse())
            position += 1
        if name == "frozen" and arguments:
            return arguments[0]  # type: ignore[no-any-return]
        return name, tuple(arguments)

    try:
        return parse()
    except IndexError:
        raise ValueError(f"not a CQL type: {text!r}") from None


def _avro_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def _avro_namespace(text: str) -> str:
    return ".".join(_avro_name(part) for part in text.split("."))


def _avro_type(parsed: tuple[str, tuple[Any, ...]], record_name: str) -> Any:
    name, arguments = parsed
    if name in _SIMPLE_AVRO:
        return _SIMPLE_AVRO[name]
    if name in ("list", "set"):
        return {"type": "array", "items": _avro_type(arguments[0], record_name + "_item")}
    if name == "vector":
        return {"type": "array", "items": _avro_type(arguments[0], record_name + "_item")}
    if name == "map":
        key, value = arguments
        if _SIMPLE_AVRO.get(key[0]) == "string":
            return {"type": "map", "values": _avro_type(value, record_name + "_value")}
        return {
            "type": "array",
            "items": {
                "type": "record",
                "name": record_name + "_entry",
                "fields": [
                    {"name": "key", "type": _avro_type(key, record_name + "_key")},
                    {"name": "value", "type": _avro_type(value, record_name + "_value")},
                ],
            },
        }
    if name == "tuple":
        return {
            "type": "record",
            "name": record_name + "_tuple",
            "fields": [
                {"name": f"f{i}", "type": ["null", _avro_type(a, f"{record_name}_f{i}")], "default": None}
                for i, a in enumerate(arguments)
            ],
        }
    # Types cdcflow has no mapping for yet (UDTs by name) travel as their JSON text.
    return "string"


def _avro_fields(columns: tuple[Column, ...], prefix: str) -> list[dict[str, Any]]:
    fields = []
    for column in columns:
        avro = _avro_type(parse_cql_type(column.type), f"{prefix}_{_avro_name(column.name)}")
        if column.optional:
            fields.append({"name": _avro_name(column.name), "type": ["null", avro], "default": None})
        else:
            fields.append({"name": _avro_name(column.name), "type": avro})
    return fields


_UNWRAPPED_EXTRAS = [
    {"name": "__deleted", "type": ["null", "boolean"], "default": None},
    {"name": "__op", "type": ["null", "string"], "default": None},
    {"name": "__table", "type": ["null", "string"], "default": None},
    {"name": "__ts_us", "type": ["null", "long"], "default": None},
]

# The fields of SourceInfo.to_payload(), with their Avro and Kafka Connect types.
_SOURCE_FIELDS: tuple[tuple[str, str, str], ...] = (
    *(
        (name, "string", "string")
        for name in ("version", "connector", "name", "keyspace", "table", "partition", "position")
    ),
    ("ts_us", "long", "int64"),
    ("ts_ms", "long", "int64"),
    ("snapshot", "boolean", "boolean"),
)

_AVRO_SOURCE: dict[str, Any] = {
    "type": "record",
    "name": "Source",
    "namespace": "io.cdcflow",
    "fields": [{"name": name, "type": avro} for name, avro, _ in _SOURCE_FIELDS],
}


_INFERRED_TYPES: dict[type, str] = {bool: "boolean", int: "bigint", float: "double", str: "text", bytes: "blob"}
_inferred_schemas: dict[tuple[Any, ...], RowSchema] = {}
_INFERRED_SCHEMAS_KEPT = 4096


def infer_row_schema(event: ChangeEvent) -> RowSchema:
    """A schema read off the values, for sources that know no table metadata. A null value types
    its column :data:`UNTYPED_NULL`; a value of a type without a CQL name types it ``text``."""
    row = event.after or event.before or {}
    source = event.source
    # Events of one table mostly share a shape: build (and fingerprint) its schema once.
    shape = (
        source.cluster,
        source.keyspace,
        source.table,
        tuple((name, type(value)) for name, value in event.key.items()),
        tuple((name, type(value)) for name, value in row.items() if not name.startswith("__")),
    )
    schema = _inferred_schemas.get(shape)
    if schema is None:
        if len(_inferred_schemas) >= _INFERRED_SCHEMAS_KEPT:
            _inferred_schemas.clear()
        keys = tuple(_inferred_column(name, kind, False) for name, kind in shape[3])
        values = tuple(_inferred_column(name, kind, True) for name, kind in shape[4])
        schema = _inferred_schemas[shape] = RowSchema(
            f"{source.cluster}.{source.keyspace}.{source.table}", keys, values
        )
    return schema


def _inferred_column(name: str, kind: type, optional: bool) -> Column:
    return Column(name, UNTYPED_NULL if kind is type(None) else _INFERRED_TYPES.get(kind, "text"), optional)


def avro_key_schema(record: Record) -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "record",
            "name": "SchemaChangeKey",
            "namespace": "io.cdcflow",
            "fields": [{"name": "keyspace", "type": "string"}],
        }
    schema = record.schema or infer_row_schema(record)
    return {
        "type": "record",
        "name": "Key",
        "namespace": _avro_namespace(schema.namespace),
        "fields": _avro_fields(schema.key_columns, "Key"),
    }


def avro_value_schema(record: Record) -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "record",
            "name": "SchemaChangeValue",
            "namespace": "io.cdcflow",
            "fields": [
                {"name": "keyspace", "type": "string"},
                {"name": "table", "type": "string"},
                {"name": "ddl", "type": "string"},
                {"name": "source", "type": _AVRO_SOURCE},
                {"name": "ts_ms", "type": "long"},
            ],
        }
    schema = record.schema or infer_row_schema(record)
    namespace = _avro_namespace(schema.namespace)
    value: dict[str, Any] = {
        "type": "record",
        "name": "Value",
        "namespace": namespace,
        "fields": _avro_fields(schema.value_columns, "Value"),
    }
    if not record.envelope:
        return {**value, "fields": value["fields"] + _UNWRAPPED_EXTRAS}
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "op", "type": "string"},
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": _AVRO_SOURCE},
            {"name": "ts_ms", "type": "long"},
        ],
    }


def avro_envelope_row(event: ChangeEvent) -> tuple[Any, ...]:
    """The value of an enveloped event as a row of :func:`avro_value_schema`'s Envelope fields, in
    their order (the source block a row of its own): what the compiled Avro writer takes instead of
    the dict ``event.value_payload()`` builds, without the dicts. Same fields, same values."""
    source = event.source
    return (
        event.op.value,
        event.before,
        event.after,
        (
            source.version,
            source.system,
            source.cluster,
            source.keyspace,
            source.table,
            source.partition,
            source.position_text(),
            source.ts_us,
            source.ts_us // 1000,
            source.snapshot,
        ),
        event.ts_ms,
    )


# --- Kafka Connect JSON schemas (seed 001's "schema" section) -------------------------------------


def _connect_type(parsed: tuple[str, tuple[Any, ...]], optional: bool, field: str | None = None) -> dict[str, Any]:
    name, arguments = parsed
    result: dict[str, Any]
    if name in _SIMPLE_CONNECT:
        result = {"type": _SIMPLE_CONNECT[name]}
    elif name in ("list", "set", "vector"):
        result = {"type": "array", "items": _connect_type(arguments[0], True)}
    elif name == "map":
        result = {
            "type": "map",
            "keys": _connect_type(arguments[0], False),
            "values": _connect_type(arguments[1], True),
        }
    elif name == "tuple":
        result = {"type": "struct", "fields": [_connect_type(a, True, f"f{i}") for i, a in enumerate(arguments)]}
    else:
        result = {"type": "string"}
    result["optional"] = optional
    if field is not None:
        result["field"] = field
    return result


def _connect_struct(columns: tuple[Column, ...], name: str, optional: bool, field: str | None = None) -> dict[str, Any]:
    struct: dict[str, Any] = {
        "type": "struct",
        "name": name,
        "optional": optional,
        "fields": [_connect_type(parse_cql_type(c.type), c.optional, c.name) for c in columns],
    }
    if field is not None:
        struct["field"] = field
    return struct


_CONNECT_SOURCE: dict[str, Any] = {
    "type": "struct",
    "name": "io.cdcflow.Source",
    "optional": False,
    "field": "source",
    "fields": [{"field": name, "type": connect, "optional": False} for name, _, connect in _SOURCE_FIELDS],
}


def connect_key_schema(record: Record) -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "struct",
            "name": "io.cdcflow.SchemaChangeKey",
            "optional": False,
            "fields": [{"field": "keyspace", "type": "string", "optional": False}],
        }
    schema = record.schema or infer_row_schema(record)
    return _connect_struct(schema.key_columns, f"{schema.namespace}.Key", False)


def connect_value_schema(record: Record) -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "struct",
            "name": "io.cdcflow.SchemaChangeValue",
            "optional": False,
            "fields": [
                {"field": "keyspace", "type": "string", "optional": False},
                {"field": "table", "type": "string", "optional": False},
                {"field": "ddl", "type": "string", "optional": False},
                _CONNECT_SOURCE,
                {"field": "ts_ms", "type": "int64", "optional": False},
            ],
        }
    schema = record.schema or infer_row_schema(record)
    if not record.envelope:
        struct = _connect_struct(schema.value_columns, f"{schema.namespace}.Value", True)
        struct["fields"] += [
            {"field": "__deleted", "type": "boolean", "optional": True},
            {"field": "__op", "type": "string", "optional": True},
            {"field": "__table", "type": "string", "optional": True},
            {"field": "__ts_us", "type": "int64", "optional": True},
        ]
        return struct
    return {
        "type": "struct",
        "name": f"{schema.namespace}.Envelope",
        "optional": False,
        "version": schema.version,
        "fields": [
            {"field": "op", "type": "string", "optional": False},
            _connect_struct(schema.value_columns, f"{schema.namespace}.Value", True, "before"),
            _connect_struct(schema.value_columns, f"{schema.namespace}.Value", True, "after"),
            _CONNECT_SOURCE,
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }


# --- Spark SQL types (the spark engine's typed Parquet columns) ------------------------------------

_SIMPLE_SPARK: dict[str, str] = {
    "ascii": "string",
    "text": "string",
    "varchar": "string",
    "inet": "string",
    "duration": "string",
    "uuid": "string",
    "timeuuid": "string",
    "bigint": "bigint",
    "counter": "bigint",
    "varint": "bigint",
    "time": "bigint",
    "int": "int",
    "smallint": "smallint",
    "tinyint": "tinyint",
    "boolean": "boolean",
    "decimal": "double",
    "double": "double",
    "float": "float",
    # Carried in JSON as base64 / epoch millis / epoch days; the spark engine converts them after parsing.
    "blob": "string",
    "timestamp": "bigint",
    "date": "int",
}

SPARK_CONVERTED_AFTER_PARSING = {"blob": "binary", "timestamp": "timestamp", "date": "date"}
"""Top-level CQL types whose JSON form the spark engine turns into a native Spark type."""


def spark_ddl_type(cql_type: str) -> str:
    """The Spark SQL type (DDL text) a CQL-typed value parses into from cdcflow's row JSON."""
    return _spark_type(parse_cql_type(cql_type))


def _spark_type(parsed: tuple[str, tuple[Any, ...]]) -> str:
    name, arguments = parsed
    if name in _SIMPLE_SPARK:
        return _SIMPLE_SPARK[name]
    if name in ("list", "set", "vector"):
        return f"array<{_spark_type(arguments[0])}>"
    if name == "map":
        # JSON object keys are text, so a map<int, ...> arrives with its keys as their decimal text.
        return f"map<string,{_spark_type(arguments[1])}>"
    if name == "tuple":
        return "struct<" + ",".join(f"f{i}:{_spark_type(a)}" for i, a in enumerate(arguments)) + ">"
    return "string"  # UDTs by name and anything newer: their JSON text
