"""The compiled Avro writer writes exactly what fastavro writes, for every schema cdcflow makes and beyond."""

from __future__ import annotations

import datetime
import io
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow._avro_writer import UnsupportedAvroSchemaError, compile_avro_writer
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo, UserType
from cdcflow.schemas import avro_key_schema, avro_value_schema
from cdcflow.wire_values import row_encoder

_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_LONGS = st.integers(-(1 << 63), (1 << 63) - 1)
_INTS = st.integers(-(1 << 31), (1 << 31) - 1)


def _fastavro_bytes(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum, disable_tuple_notation=True)
    return out.getvalue()


def _compiled_bytes(schema: Any, datum: Any) -> bytes:
    buffer = bytearray()
    compile_avro_writer(schema)(buffer, datum)
    return bytes(buffer)


_PRIMITIVE_DATA: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": _INTS,
    "long": _LONGS,
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=200),
    "string": st.text(max_size=200),
}


@st.composite
def _schema_and_datum(draw: st.DrawFn, depth: int = 0) -> tuple[Any, Any]:
    """A random schema (records, arrays, maps, enums, fixed, [null, T] unions, logical types)
    together with a datum of it."""
    kinds = ["primitive", "timestamp", "uuid", "enum", "fixed"]
    if depth < 3:
        kinds += ["record", "array", "map", "nullable"]
    kind = draw(st.sampled_from(kinds))
    if kind == "primitive":
        name = draw(st.sampled_from(sorted(_PRIMITIVE_DATA)))
        return name, draw(_PRIMITIVE_DATA[name])
    if kind == "timestamp":
        schema = {"type": "long", "logicalType": "timestamp-millis"}
        moment = draw(st.integers(0, 4_000_000_000_000))
        as_datetime = datetime.datetime.fromtimestamp(moment / 1000, tz=datetime.UTC)
        return schema, draw(st.sampled_from([moment, as_datetime]))
    if kind == "uuid":
        value = uuid.UUID(int=draw(st.integers(0, (1 << 128) - 1)))
        return {"type": "string", "logicalType": "uuid"}, draw(st.sampled_from([value, str(value)]))
    if kind == "enum":
        symbols = draw(st.lists(_NAMES.map(str.upper), min_size=1, max_size=5, unique=True))
        return {"type": "enum", "name": f"E{draw(_NAMES)}{depth}", "symbols": symbols}, draw(st.sampled_from(symbols))
    if kind == "fixed":
        size = draw(st.integers(0, 16))
        return {"type": "fixed", "name": f"F{draw(_NAMES)}{depth}", "size": size}, draw(
            st.binary(min_size=size, max_size=size)
        )
    if kind == "array":
        items = draw(st.lists(_schema_and_datum(depth + 1), min_size=1, max_size=1))[0]
        values = [items[1]] * draw(st.integers(0, 4))
        return {"type": "array", "items": items[0]}, values
    if kind == "map":
        values_schema, value = draw(_schema_and_datum(depth + 1))
        keys = draw(st.lists(st.text(max_size=10), max_size=4, unique=True))
        return {"type": "map", "values": values_schema}, {key: value for key in keys}
    if kind == "nullable":
        inner, value = draw(_schema_and_datum(depth + 1))
        if inner == "null":
            return ["null"], None
        if isinstance(inner, list):  # a union directly inside a union is not Avro
            return inner, value
        order = draw(st.sampled_from(["null-first", "null-last"]))
        schema = ["null", inner] if order == "null-first" else [inner, "null"]
        return schema, draw(st.sampled_from([None, value]))
    fields, datum = [], {}
    for index, field_name in enumerate(draw(st.lists(_NAMES, min_size=1, max_size=6, unique=True))):
        field_schema, value = draw(_schema_and_datum(depth + 1))
        field: dict[str, Any] = {"name": field_name, "type": field_schema}
        if isinstance(field_schema, list) and field_schema[0] == "null" and draw(st.booleans()):
            field["default"] = None
            if draw(st.booleans()):
                fields.append(field)
                continue  # left out of the datum: the default is written
        fields.append(field)
        datum[field_name] = value
        del index
    return {"type": "record", "name": f"R{draw(_NAMES)}{depth}x{len(fields)}", "fields": fields}, datum


@settings(max_examples=400, deadline=None)
@given(_schema_and_datum())
def test_compiled_writer_matches_fastavro_byte_for_byte(case: tuple[Any, Any]) -> None:
    schema, datum = case
    try:
        expected = _fastavro_bytes(schema, datum)
    except Exception:  # a schema fastavro itself refuses (duplicate names drawn twice) says nothing
        return
    assert _compiled_bytes(schema, datum) == expected


EVERY_CQL_TYPE = {
    "a_text": ("text", "héllo"),
    "a_bigint": ("bigint", -(1 << 62)),
    "a_int": ("int", -5),
    "a_double": ("double", 2.5),
    "a_float": ("float", 0.25),
    "a_bool": ("boolean", True),
    "a_blob": ("blob", b"\x00\xff"),
    "a_ts": ("timestamp", 1_700_000_000_123),
    "a_uuid": ("uuid", "5a2b7c4e-7d3f-4a8b-9c1d-2e3f4a5b6c7d"),
    "a_decimal": ("decimal", Decimal("-12345.678901234567890")),
    "a_varint": ("varint", -(2**100) + 7),
    "a_list": ("list<int>", [1, 2, 3]),
    "a_set": ("set<text>", ["x", "y"]),
    "a_map": ("map<text, bigint>", {"k": 1}),
    "a_map_int_keys": ("map<int, text>", {1: "one"}),
    "a_map_of_decimals": ("map<int, decimal>", {1: Decimal("1.5"), 2: Decimal("-2E+3")}),
    "a_tuple": ("tuple<int, text>", {"f0": 1, "f1": None}),
    "a_vector": ("vector<float, 2>", [0.5, 1.5]),
    "a_frozen": ("frozen<list<frozen<set<int>>>>", [[1], [2, 3]]),
    "a_udt": ("frozen<address>", {"street": "x", "zip": None, "cost": Decimal("0.10")}),
    "a_udt_update": ("address", {"zip": 12345}),  # a field update: only the fields written
    "a_udts": ("list<frozen<address>>", [{"street": "y", "zip": 1, "cost": None}]),
}
USER_TYPES = (UserType("address", (("street", "text"), ("zip", "int"), ("cost", "decimal"))),)


@pytest.mark.parametrize("op", [Op.CREATE, Op.UPDATE, Op.DELETE])
@pytest.mark.parametrize("envelope", [True, False])
@pytest.mark.parametrize("decimal_handling", ["precise", "double", "string"])
def test_events_of_every_cql_type_encode_as_fastavro_does(op: Op, envelope: bool, decimal_handling: str) -> None:
    schema = RowSchema(
        "c.ks.t",
        (Column("id", "bigint", optional=False),),
        (Column("id", "bigint", optional=False), *(Column(n, t) for n, (t, _) in EVERY_CQL_TYPE.items())),
        user_types=USER_TYPES,
    )
    row = {"id": 7, **{n: v for n, (_, v) in EVERY_CQL_TYPE.items()}}
    partial = {"id": 7, "a_text": None}  # a delta image: columns not carried are absent
    event = ChangeEvent(
        op=op,
        key={"id": 7},
        before=partial if op is not Op.CREATE else None,
        after=row if op is not Op.DELETE else None,
        source=SourceInfo("cassandra", "c", "ks", "t", "n1", {"segment": 1, "position": 2}, 1_700_000_000_000_001),
        ts_ms=1_700_000_000_002,
        schema=schema,
        envelope=envelope,
    )
    mode: Any = decimal_handling
    encode = row_encoder(schema, schema.value_columns, mode, "avro")
    assert encode is not None
    value = event.value_payload()
    if value is None:
        return
    if envelope:
        value = {**value, **{part: value[part] and encode(value[part]) for part in ("before", "after")}}
    else:
        value = encode(value)
    for avro_schema, datum in (
        (avro_value_schema(event, mode), value),
        (avro_key_schema(event, mode), event.key_payload()),
    ):
        fastavro.parse_schema(avro_schema)  # named types are defined once, then referred to
        assert _compiled_bytes(avro_schema, datum) == _fastavro_bytes(avro_schema, datum)


@settings(max_examples=300, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False), st.integers(0, 40))
def test_bytes_decimals_encode_as_fastavro_does(value: Decimal, scale: int) -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 200, "scale": scale}
    try:
        expected = _fastavro_bytes(schema, value)
    except ValueError:  # more digits after the point than the scale: both refuse
        with pytest.raises(ValueError):
            _compiled_bytes(schema, value)
        return
    assert _compiled_bytes(schema, value) == expected


def test_a_datum_that_does_not_fit_raises_and_a_general_union_is_left_to_fastavro() -> None:
    writer = compile_avro_writer({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]})
    with pytest.raises(KeyError):
        writer(bytearray(), {})
    with pytest.raises(TypeError):
        writer(bytearray(), {"n": "seven"})
    with pytest.raises(ValueError, match="does not fit"):
        writer(bytearray(), {"n": 1 << 63})
    with pytest.raises(UnsupportedAvroSchemaError):
        compile_avro_writer(["int", "string"])
