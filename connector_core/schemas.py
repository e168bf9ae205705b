"""Schemas for records: CQL column types mapped to Avro, to Kafka Connect's JSON schema and to Spark.

Seed 001's "Data Type Conversions" table is the base; where it loses data, cdcflow does what
Debezium does. ``decimal`` follows ``decimal_handling`` (Debezium's ``decimal.handling.mode``):
``precise`` writes Debezium's variable-scale decimal (a ``scale`` and the unscaled ``value`` bytes,
:data:`VARIABLE_SCALE_DECIMAL`), ``double`` a double, ``string`` its plain text. ``varint`` is
Kafka Connect's ``Decimal`` with scale 0 (unscaled two's-complement bytes; Avro ``bytes`` with the
``decimal`` logical type), or text under ``string``. User types are Avro records and Connect
structs whose fields are all optional. ``uuid``/``timeuuid`` are Avro strings with the ``uuid``
logical type; ``timestamp`` carries ``timestamp-millis``; maps whose keys are not text are Avro
arrays of key/value records (Avro map keys are strings). :mod:`cdcflow.wire_values` turns event
values into what these schemas describe, and back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

from cdcflow.events import ChangeEvent, Column, Record, RowSchema, SchemaChangeEvent

__all__ = [
    "CONNECT_DECIMAL",
    "DECIMAL_HANDLING_MODES",
    "MAP_ENTRY",
    "UNTYPED_NULL",
    "VARIABLE_SCALE_DECIMAL",
    "VARINT_AVRO_PRECISION",
    "DecimalHandling",
    "avro_envelope_row",
    "avro_key_schema",
    "avro_value_schema",
    "connect_key_schema",
    "connect_value_schema",
    "infer_row_schema",
    "parse_cql_type",
    "record_schema",
    "spark_ddl_type",
]

DecimalHandling = Literal["precise", "double", "string"]
DECIMAL_HANDLING_MODES: tuple[DecimalHandling, ...] = ("precise", "double", "string")

UNTYPED_NULL = "null"
"""The type :func:`infer_row_schema` gives a column whose value is null: nothing says what it
holds. Converters write it as optional text (the only value is null); a sink that merges the
schemas of several events (``parquet``) takes the column's type from the events that have a value."""

VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
"""Debezium's decimal of any scale: a struct (Avro record) of ``scale`` (int32) and ``value``, the
unscaled number as big-endian two's-complement bytes; the number is ``value * 10^-scale``."""

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
"""Kafka Connect's fixed-scale decimal (unscaled two's-complement bytes, the scale a schema parameter)."""

VARINT_AVRO_PRECISION = 2**31 - 1
"""The precision of ``varint``'s Avro ``decimal``: as many digits as a varint can have, so that no
reader (fastavro rounds to the schema's precision) changes a value."""

MAP_ENTRY = "MapEntry"
"""``connect.internal.type`` of the Avro key/value records a map with non-text keys is written as."""

# Types whose value is text in every encoding.
_TEXT_TYPES = frozenset({"ascii", "text", "varchar", "inet", "duration"})

_SIMPLE_AVRO: dict[str, Any] = {
    **dict.fromkeys(_TEXT_TYPES, "string"),
    "bigint": "long",
    "counter": "long",
    "time": "long",
    "int": "int",
    "smallint": "int",
    "tinyint": "int",
    "date": "int",
    "blob": "bytes",
    "boolean": "boolean",
    "double": "double",
    "float": "float",
    "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
    "uuid": {"type": "string", "logicalType": "uuid"},
    "timeuuid": {"type": "string", "logicalType": "uuid"},
    UNTYPED_NULL: "string",
}
_SIMPLE_CONNECT: dict[str, str] = {
    **dict.fromkeys(_TEXT_TYPES, "string"),
    "uuid": "string",
    "timeuuid": "string",
    "bigint": "int64",
    "counter": "int64",
    "time": "int64",
    "timestamp": "int64",
    "int": "int32",
    "date": "int32",
    "smallint": "int16",
    "tinyint": "int8",
    "blob": "bytes",
    "boolean": "boolean",
    "double": "float64",
    "float": "float32",
    UNTYPED_NULL: "string",
}
NATIVE_TYPES = frozenset(_SIMPLE_CONNECT) | {"decimal", "varint"}
"""CQL types that are one value (not a collection, tuple or user type)."""

_TYPE_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[<>,]|[0-9]+)")

ParsedType = tuple[str, tuple[Any, ...]]


@lru_cache(maxsize=4096)
def parse_cql_type(text: str) -> ParsedType:
    """``map<text, frozen<list<int>>>`` -> ``("map", (("text", ()), ("list", (("int", ()),))))``.

    ``frozen<>`` is dropped: it changes storage, not the value's shape. Names are lower case (a
    user type's name too).
    """
    tokens = [m.group(1) for m in _TYPE_TOKEN.finditer(text)]
    position = 0

    def parse() -> ParsedType:
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


def map_keys_are_values(key: ParsedType) -> bool:
    """Whether a map's keys are single values (dict keys in events); other maps (keys that are
    collections, tuples or user types) are lists of ``{"key": k, "value": v}`` entries."""
    return key[0] in NATIVE_TYPES


def record_schema(record: ChangeEvent) -> RowSchema:
    """The record's schema: the one it carries, else one read off its values."""
    return record.schema or infer_row_schema(record)


# --- Avro ------------------------------------------------------------------------------------------


def _avro_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def _avro_namespace(text: str) -> str:
    return ".".join(_avro_name(part) for part in text.split("."))


_AVRO_VARIABLE_SCALE_DECIMAL: dict[str, Any] = {
    "type": "record",
    "name": "VariableScaleDecimal",
    "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal",
    "connect.version": 1,
    "connect.name": VARIABLE_SCALE_DECIMAL,
}
_AVRO_VARINT: dict[str, Any] = {
    "type": "bytes",
    "logicalType": "decimal",
    "precision": VARINT_AVRO_PRECISION,
    "scale": 0,
    "connect.version": 1,
    "connect.parameters": {"scale": "0"},
    "connect.name": CONNECT_DECIMAL,
}


class _AvroTypes:
    """One Avro schema's types: a named type (a user type, the variable-scale decimal) is written
    out where it first appears and referred to by its full name after that, as Avro requires."""

    def __init__(self, schema: RowSchema, decimal_handling: DecimalHandling) -> None:
        self.schema = schema
        self.decimal_handling = decimal_handling
        self.namespace = _avro_namespace(schema.namespace)
        self.defined: set[str] = set()

    def named(self, full_name: str, build: Callable[[], dict[str, Any]]) -> Any:
        if full_name in self.defined:
            return full_name
        self.defined.add(full_name)
        return build()

    def type_of(self, parsed: ParsedType, record_name: str) -> Any:
        name, arguments = parsed
        if name in _SIMPLE_AVRO:
            return _SIMPLE_AVRO[name]
        if name == "decimal":
            if self.decimal_handling == "precise":
                return self.named(VARIABLE_SCALE_DECIMAL, lambda: dict(_AVRO_VARIABLE_SCALE_DECIMAL))
            return "double" if self.decimal_handling == "double" else "string"
        if name == "varint":
            return "string" if self.decimal_handling == "string" else dict(_AVRO_VARINT)
        if name in ("list", "set", "vector"):
            return {"type": "array", "items": self.type_of(arguments[0], record_name + "_item")}
        if name == "map":
            key, value = arguments
            if key[0] in _TEXT_TYPES:
                return {"type": "map", "values": self.type_of(value, record_name + "_value")}
            return {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": record_name + "_entry",
                    "namespace": self.namespace,
                    "connect.internal.type": MAP_ENTRY,
                    "fields": [
                        {"name": "key", "type": self.type_of(key, record_name + "_key")},
                        {"name": "value", "type": self.type_of(value, record_name + "_value")},
                    ],
                },
            }
        if name == "tuple":
            return {
                "type": "record",
                "name": record_name + "_tuple",
                "namespace": self.namespace,
                "fields": [
                    {"name": f"f{i}", "type": self.optional(a, f"{record_name}_f{i}"), "default": None}
                    for i, a in enumerate(arguments)
                ],
            }
        user_type = self.schema.user_type(name)
        if user_type is not None:
            full_name = f"{self.namespace}.{_avro_name(name)}"

            def build() -> dict[str, Any]:
                return {
                    "type": "record",
                    "name": _avro_name(name),
                    "namespace": self.namespace,
                    "connect.name": f"{self.schema.namespace}.{name}",
                    "fields": [
                        {
                            "name": _avro_name(field),
                            "type": self.optional(parse_cql_type(kind), f"{name}_{_avro_name(field)}"),
                            "default": None,
                        }
                        for field, kind in user_type.fields
                    ],
                }

            return self.named(full_name, build)
        # A type cdcflow has no mapping for (a custom class) travels as its bytes.
        return "bytes"

    def optional(self, parsed: ParsedType, record_name: str) -> list[Any]:
        return ["null", self.type_of(parsed, record_name)]

    def fields(self, columns: tuple[Column, ...], prefix: str) -> list[dict[str, Any]]:
        fields = []
        for column in columns:
            name = _avro_name(column.name)
            if column.optional:
                fields.append(
                    {
                        "name": name,
                        "type": self.optional(parse_cql_type(column.type), f"{prefix}_{name}"),
                        "default": None,
                    }
                )
            else:
                fields.append({"name": name, "type": self.type_of(parse_cql_type(column.type), f"{prefix}_{name}")})
        return fields


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


def avro_key_schema(record: Record, decimal_handling: DecimalHandling = "precise") -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "record",
            "name": "SchemaChangeKey",
            "namespace": "io.cdcflow",
            "fields": [{"name": "keyspace", "type": "string"}],
        }
    schema = record_schema(record)
    types = _AvroTypes(schema, decimal_handling)
    return {
        "type": "record",
        "name": "Key",
        "namespace": types.namespace,
        "fields": types.fields(schema.key_columns, "Key"),
    }


def avro_value_schema(record: Record, decimal_handling: DecimalHandling = "precise") -> dict[str, Any]:
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
    schema = record_schema(record)
    types = _AvroTypes(schema, decimal_handling)
    namespace = types.namespace
    value: dict[str, Any] = {
        "type": "record",
        "name": "Value",
        "namespace": namespace,
        "fields": types.fields(schema.value_columns, "Value"),
    }
    if not record.envelope:
        return value
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


def avro_envelope_row(
    event: ChangeEvent, encode_row: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[Any, ...]:
    """The value of an enveloped event as a row of :func:`avro_value_schema`'s Envelope fields, in
    their order (the source block a row of its own): what the compiled Avro writer takes instead of
    the dict ``event.value_payload()`` builds, without the dicts. Same fields, same values; with
    ``encode_row`` (the converter's row encoder), ``before`` and ``after`` in its form."""
    source = event.source
    before, after = event.before, event.after
    if encode_row is not None:
        before = None if before is None else encode_row(before)
        after = None if after is None else encode_row(after)
    return (
        event.op.value,
        before,
        after,
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

_CONNECT_VARIABLE_SCALE_DECIMAL: dict[str, Any] = {
    "type": "struct",
    "name": VARIABLE_SCALE_DECIMAL,
    "version": 1,
    "doc": "Variable scaled decimal",
    "fields": [
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"},
    ],
}
_CONNECT_VARINT: dict[str, Any] = {"type": "bytes", "name": CONNECT_DECIMAL, "version": 1, "parameters": {"scale": "0"}}


def _connect_type(
    parsed: ParsedType,
    schema: RowSchema,
    decimal_handling: DecimalHandling,
    optional: bool,
    field: str | None = None,
) -> dict[str, Any]:
    name, arguments = parsed
    result: dict[str, Any]
    if name in _SIMPLE_CONNECT:
        result = {"type": _SIMPLE_CONNECT[name]}
    elif name == "decimal":
        if decimal_handling == "precise":
            result = dict(_CONNECT_VARIABLE_SCALE_DECIMAL)
        else:
            result = {"type": "float64" if decimal_handling == "double" else "string"}
    elif name == "varint":
        result = {"type": "string"} if decimal_handling == "string" else dict(_CONNECT_VARINT)
    elif name in ("list", "set", "vector"):
        result = {"type": "array", "items": _connect_type(arguments[0], schema, decimal_handling, True)}
    elif name == "map":
        result = {
            "type": "map",
            "keys": _connect_type(arguments[0], schema, decimal_handling, False),
            "values": _connect_type(arguments[1], schema, decimal_handling, True),
        }
    elif name == "tuple":
        result = {
            "type": "struct",
            "fields": [_connect_type(a, schema, decimal_handling, True, f"f{i}") for i, a in enumerate(arguments)],
        }
    elif (user_type := schema.user_type(name)) is not None:
        result = {
            "type": "struct",
            "name": f"{schema.namespace}.{name}",
            "fields": [
                _connect_type(parse_cql_type(kind), schema, decimal_handling, True, field_name)
                for field_name, kind in user_type.fields
            ],
        }
    else:
        result = {"type": "bytes"}
    result["optional"] = optional
    if field is not None:
        result["field"] = field
    return result


def _connect_struct(
    columns: tuple[Column, ...],
    schema: RowSchema,
    decimal_handling: DecimalHandling,
    name: str,
    optional: bool,
    field: str | None = None,
) -> dict[str, Any]:
    struct: dict[str, Any] = {
        "type": "struct",
        "name": name,
        "optional": optional,
        "fields": [
            _connect_type(parse_cql_type(c.type), schema, decimal_handling, c.optional, c.name) for c in columns
        ],
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


def connect_key_schema(record: Record, decimal_handling: DecimalHandling = "precise") -> dict[str, Any]:
    if isinstance(record, SchemaChangeEvent):
        return {
            "type": "struct",
            "name": "io.cdcflow.SchemaChangeKey",
            "optional": False,
            "fields": [{"field": "keyspace", "type": "string", "optional": False}],
        }
    schema = record_schema(record)
    return _connect_struct(schema.key_columns, schema, decimal_handling, f"{schema.namespace}.Key", False)


def connect_value_schema(record: Record, decimal_handling: DecimalHandling = "precise") -> dict[str, Any]:
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
    schema = record_schema(record)
    value_name = f"{schema.namespace}.Value"
    if not record.envelope:
        return _connect_struct(schema.value_columns, schema, decimal_handling, value_name, True)
    return {
        "type": "struct",
        "name": f"{schema.namespace}.Envelope",
        "optional": False,
        "version": schema.version,
        "fields": [
            {"field": "op", "type": "string", "optional": False},
            _connect_struct(schema.value_columns, schema, decimal_handling, value_name, True, "before"),
            _connect_struct(schema.value_columns, schema, decimal_handling, value_name, True, "after"),
            _CONNECT_SOURCE,
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }


# --- schemas read off values ------------------------------------------------------------------------

_INT64 = range(-(1 << 63), 1 << 63)
_INFERRED_TYPES: dict[type, str] = {
    type(None): UNTYPED_NULL,
    bool: "boolean",
    float: "double",
    str: "text",
    bytes: "blob",
    Decimal: "decimal",
}
_inferred_schemas: dict[tuple[Any, ...], RowSchema] = {}
_INFERRED_SCHEMAS_KEPT = 4096


def inferred_type(value: Any) -> str:
    """The CQL type a value of a schemaless record is written as: an integer is ``bigint`` (or
    ``varint`` beyond 64 bits), a null :data:`UNTYPED_NULL`, a value of a type without a CQL name
    (a nested map or list) ``text``, its JSON text."""
    if type(value) is int:
        return "bigint" if value in _INT64 else "varint"
    return _INFERRED_TYPES.get(type(value), "text")


def infer_row_schema(event: ChangeEvent) -> RowSchema:
    """A schema read off the values, for sources that know no table metadata (see :func:`inferred_type`)."""
    row = event.after or event.before or {}
    source = event.source
    # Events of one table mostly share a shape: build (and fingerprint) its schema once.
    shape = (
        source.cluster,
        source.keyspace,
        source.table,
        tuple((name, inferred_type(value)) for name, value in event.key.items()),
        tuple((name, inferred_type(value)) for name, value in row.items()),
    )
    schema = _inferred_schemas.get(shape)
    if schema is None:
        if len(_inferred_schemas) >= _INFERRED_SCHEMAS_KEPT:
            _inferred_schemas.clear()
        keys = tuple(Column(name, kind, False) for name, kind in shape[3])
        values = tuple(Column(name, kind, True) for name, kind in shape[4])
        schema = _inferred_schemas[shape] = RowSchema(
            f"{source.cluster}.{source.keyspace}.{source.table}", keys, values
        )
    return schema


# --- Spark SQL types (the spark engine's typed Parquet columns) ------------------------------------

_SIMPLE_SPARK: dict[str, str] = {
    **dict.fromkeys(_TEXT_TYPES, "string"),
    "uuid": "string",
    "timeuuid": "string",
    "bigint": "bigint",
    "counter": "bigint",
    "time": "bigint",
    "int": "int",
    "smallint": "smallint",
    "tinyint": "tinyint",
    "boolean": "boolean",
    "double": "double",
    "float": "float",
    # Carried in JSON as base64 / epoch millis / epoch days; the sink converts them after parsing
    # (cdcflow.sinks.parquet_spark), at any depth.
    "blob": "string",
    "timestamp": "bigint",
    "date": "int",
    # Exact numbers as their text; a top-level column whose values share a scale becomes a Parquet
    # decimal in the sink (it sees the values).
    "decimal": "string",
    "varint": "string",
    UNTYPED_NULL: "string",
}


def spark_ddl_type(cql_type: str, schema: RowSchema | None = None) -> str:
    """The Spark SQL type (DDL text) a CQL-typed value parses into from cdcflow's row JSON; user
    types are looked up in ``schema``. Maps with single-value keys parse with text keys (JSON
    object keys); the sink casts them back after parsing."""
    return _spark_type(parse_cql_type(cql_type), schema)


def _spark_type(parsed: ParsedType, schema: RowSchema | None) -> str:
    name, arguments = parsed
    if name in _SIMPLE_SPARK:
        return _SIMPLE_SPARK[name]
    if name in ("list", "set", "vector"):
        return f"array<{_spark_type(arguments[0], schema)}>"
    if name == "map":
        key, value = arguments
        if map_keys_are_values(key):
            return f"map<string,{_spark_type(value, schema)}>"
        return f"array<struct<key:{_spark_type(key, schema)},value:{_spark_type(value, schema)}>>"
    if name == "tuple":
        return "struct<" + ",".join(f"f{i}:{_spark_type(a, schema)}" for i, a in enumerate(arguments)) + ">"
    user_type = schema.user_type(name) if schema is not None else None
    if user_type is not None:
        fields = ",".join(f"`{field}`:{_spark_type(parse_cql_type(kind), schema)}" for field, kind in user_type.fields)
        return f"struct<{fields}>"
    return "string"  # a custom type: base64 of its bytes
