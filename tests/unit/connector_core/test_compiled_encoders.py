"""The compiled core's Avro writer and JSON encoder write exactly what the references write.

Avro: random schemas (records nesting records, enums, fixed, arrays, maps, ``[null, T]`` and
general unions, every logical type fastavro knows, Debezium's variable-scale decimal record) and
data of them, byte for byte against fastavro, and against cdcflow's own Python writer where it
compiles the schema; data that does not fit raises where the Python writer raises. JSON: random
documents of every Python value an event carries, text for text against ``compact_json``'s C
encoder. Skipped when the compiled core is not built (or CDCFLOW_PURE_PYTHON=1).
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import math
import struct
import uuid
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cdcflow._avro_writer import UnsupportedAvroSchemaError, compile_avro_writer, logical_type_preparers
from cdcflow.events import ChangeEvent, Column, Op, RowSchema, SourceInfo
from cdcflow.jsontext import json_default
from cdcflow.native import native_module
from cdcflow.schemas import avro_envelope_row, avro_value_schema
from cdcflow.wire_values import row_encoder
from tests.unit.connector_core.test_avro_writer import EVERY_CQL_TYPE, USER_TYPES

NATIVE = native_module()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core (cdcflow._native) is not built")

_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_DOES_NOT_FIT = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, struct.error)


def _fastavro(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum, disable_tuple_notation=True)
    return out.getvalue()


def _compiled(schema: Any, datum: Any) -> bytes:
    assert NATIVE is not None
    encoded: bytes = NATIVE.AvroWriter(schema, logical_type_preparers()).encode(datum)
    return encoded


_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(1 << 31), (1 << 31) - 1),
    "long": st.integers(-(1 << 63), (1 << 63) - 1),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=40),
    "string": st.text(max_size=40),
}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@st.composite
def _logical(draw: st.DrawFn) -> tuple[Any, Any]:
    kind = draw(st.sampled_from(["ts-ms", "ts-us", "date", "time-ms", "time-us", "uuid", "dec-bytes", "dec-fixed"]))
    moment = _EPOCH + datetime.timedelta(microseconds=draw(st.integers(0, 4_000_000_000_000_000)))
    if kind == "ts-ms":
        return {"type": "long", "logicalType": "timestamp-millis"}, draw(
            st.sampled_from([moment, int(moment.timestamp() * 1000)])
        )
    if kind == "ts-us":
        micros = draw(st.sampled_from([moment, 1_700_000_000_000_000]))
        return {"type": "long", "logicalType": "timestamp-micros"}, micros
    if kind == "date":
        return {"type": "int", "logicalType": "date"}, draw(st.sampled_from([moment.date(), 19_000]))
    if kind == "time-ms":
        return {"type": "int", "logicalType": "time-millis"}, draw(st.sampled_from([moment.time(), 45_000_000]))
    if kind == "time-us":
        return {"type": "long", "logicalType": "time-micros"}, moment.time()
    if kind == "uuid":
        value = uuid.UUID(int=draw(st.integers(0, (1 << 128) - 1)))
        return {"type": "string", "logicalType": "uuid"}, draw(st.sampled_from([value, str(value)]))
    scale = draw(st.integers(0, 6))
    value = decimal.Decimal(draw(st.integers(-(10**12), 10**12))).scaleb(-scale)
    if kind == "dec-bytes":
        return {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": scale}, value
    name = f"D{draw(_NAMES)}"
    return {"type": "fixed", "name": name, "size": 12, "logicalType": "decimal", "precision": 20, "scale": scale}, value


def _variable_scale_decimal(value: decimal.Decimal) -> dict[str, Any]:
    """Debezium's VariableScaleDecimal datum: the scale and the unscaled value's two's complement."""
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    assert isinstance(exponent, int)
    return {"scale": -exponent, "value": unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)}


@st.composite
def schemas_and_data(draw: st.DrawFn, depth: int = 0) -> tuple[Any, Any]:
    kinds = ["primitive", "logical", "enum", "fixed", "vsdecimal"]
    if depth < 3:
        kinds += ["record", "array", "map", "nullable", "union"]
    kind = draw(st.sampled_from(kinds))
    if kind == "primitive":
        name = draw(st.sampled_from(sorted(_PRIMITIVES)))
        return draw(st.sampled_from([name, {"type": name}])), draw(_PRIMITIVES[name])
    if kind == "logical":
        return draw(_logical())
    if kind == "enum":
        symbols = draw(st.lists(_NAMES.map(str.upper), min_size=1, max_size=5, unique=True))
        return {"type": "enum", "name": f"E{draw(_NAMES)}{depth}", "symbols": symbols}, draw(st.sampled_from(symbols))
    if kind == "fixed":
        size = draw(st.integers(0, 16))
        schema = {"type": "fixed", "name": f"F{draw(_NAMES)}{depth}", "size": size}
        return schema, draw(st.binary(min_size=size, max_size=size))
    if kind == "vsdecimal":
        schema = {
            "type": "record",
            "name": "VariableScaleDecimal",
            "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
        }
        value = decimal.Decimal(draw(st.integers(-(10**30), 10**30))).scaleb(-draw(st.integers(0, 20)))
        return schema, _variable_scale_decimal(value)
    if kind == "array":
        items, value = draw(schemas_and_data(depth + 1))
        return {"type": "array", "items": items}, draw(st.sampled_from([[value] * draw(st.integers(0, 3)), (value,)]))
    if kind == "map":
        values, value = draw(schemas_and_data(depth + 1))
        keys = draw(st.lists(st.text(max_size=8), max_size=3, unique=True))
        return {"type": "map", "values": values}, {key: value for key in keys}
    if kind == "nullable":
        inner, value = draw(schemas_and_data(depth + 1))
        if inner in ("null", {"type": "null"}) or isinstance(inner, list):
            return inner, value
        schema = draw(st.sampled_from([["null", inner], [inner, "null"]]))
        return schema, draw(st.sampled_from([None, value]))
    if kind == "union":
        # Branches of distinct kinds, the datum drawn from one of them: fastavro's choice decides.
        branches: list[Any] = []
        data: list[Any] = []
        seen: set[str] = set()
        for _ in range(draw(st.integers(2, 4))):
            branch, value = draw(schemas_and_data(depth + 1))
            if isinstance(branch, list):
                continue
            kind_name = branch if isinstance(branch, str) else json.dumps(branch.get("type"), sort_keys=True)
            if kind_name in seen:
                continue
            seen.add(kind_name)
            branches.append(branch)
            data.append(value)
        if not branches:
            return "null", None
        return branches, draw(st.sampled_from(data))
    fields, datum = [], {}
    for field_name in draw(st.lists(_NAMES, min_size=1, max_size=6, unique=True)):
        field_schema, value = draw(schemas_and_data(depth + 1))
        field: dict[str, Any] = {"name": field_name, "type": field_schema}
        if isinstance(field_schema, list) and field_schema[0] == "null" and draw(st.booleans()):
            field["default"] = None
            if draw(st.booleans()):
                fields.append(field)
                continue  # left out of the datum: the default is written
        fields.append(field)
        datum[field_name] = value
    return {"type": "record", "name": f"R{draw(_NAMES)}{depth}x{len(fields)}", "fields": fields}, datum


def _breaks_avro_rules(schema: Any, seen: set[str] | None = None) -> bool:
    """A name defined twice, or a union with two branches of one unnamed type: no Avro schema."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        kinds = [b if isinstance(b, str) else b.get("type") for b in schema]
        unnamed = [k for k in kinds if isinstance(k, str) and k not in ("record", "enum", "fixed")]
        return len(unnamed) != len(set(unnamed)) or any(_breaks_avro_rules(b, seen) for b in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("type") in ("record", "enum", "fixed"):
        if schema["name"] in seen:
            return True
        seen.add(schema["name"])
    inner = [f["type"] for f in schema.get("fields", [])] + [schema[k] for k in ("items", "values") if k in schema]
    return any(_breaks_avro_rules(part, seen) for part in inner)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schemas_and_data())
def test_compiled_avro_writes_what_fastavro_writes(case: tuple[Any, Any]) -> None:
    schema, datum = case
    # fastavro does not always refuse what breaks Avro's rules (it writes each inline definition of
    # a name where it stands, and takes the first of two null branches): such a draw says nothing.
    assume(not _breaks_avro_rules(schema))
    try:
        expected = _fastavro(schema, datum)
    except Exception:  # a schema or datum fastavro refuses (a name drawn twice, no branch fits) says nothing
        return
    assert _compiled(schema, datum) == expected


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schemas_and_data(), schemas_and_data())
def test_data_that_does_not_fit_fails_where_the_python_writer_fails(
    case: tuple[Any, Any], other: tuple[Any, Any]
) -> None:
    schema, _ = case
    datum = other[1]  # most likely not of this schema
    try:
        writer = compile_avro_writer(schema)
    except (UnsupportedAvroSchemaError, KeyError, TypeError, ValueError):
        return  # left to fastavro (or not a schema): compared with fastavro above
    buffer = bytearray()
    try:
        writer(buffer, datum)
    except _DOES_NOT_FIT:
        with pytest.raises(_DOES_NOT_FIT):
            _compiled(schema, datum)
        return
    assert _compiled(schema, datum) == bytes(buffer)


def test_writer_errors_and_the_wire_prefix() -> None:
    assert NATIVE is not None
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}, {"name": "i", "type": "int"}]}
    writer = NATIVE.AvroWriter(schema, logical_type_preparers())
    assert writer.encode({"n": 1, "i": -1}, b"\x00\x00\x00\x00\x07") == b"\x00\x00\x00\x00\x07\x02\x01"
    with pytest.raises(KeyError):
        writer.encode({"n": 1})
    with pytest.raises(TypeError):
        writer.encode({"n": "seven", "i": 0})
    with pytest.raises(ValueError, match="does not fit an Avro long"):
        writer.encode({"n": 1 << 63, "i": 0})
    with pytest.raises(ValueError, match="does not fit an Avro int"):
        writer.encode({"n": 0, "i": 1 << 31})
    with pytest.raises(ValueError, match="unknown named type"):
        NATIVE.AvroWriter({"type": "array", "items": "Nowhere"}, {})
    buffer = bytearray(b"x")
    writer(buffer, {"n": 2, "i": 0})
    assert buffer == b"x\x04\x00"
    linked = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": None}],
    }
    datum: dict[str, Any] = {"v": 0}
    for v in range(1, 50):
        datum = {"v": v, "next": datum}
    assert _compiled(linked, datum) == _fastavro(linked, datum)
    cycle: dict[str, Any] = {"v": 1}
    cycle["next"] = cycle
    with pytest.raises(RecursionError):
        _compiled(linked, cycle)


# --- JSON -------------------------------------------------------------------------------------------

_python_encoder = json.JSONEncoder(ensure_ascii=False, default=json_default, separators=(",", ":")).encode
_KEYS = st.one_of(st.text(max_size=6), st.integers(-(1 << 70), 1 << 70), st.floats(), st.booleans(), st.none())
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(),
    st.floats(width=32),
    st.text(),
    st.binary(max_size=20),
    st.decimals(allow_nan=False),
    st.uuids(),
    st.datetimes(),
    st.frozensets(st.integers(0, 9), max_size=3),
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(_KEYS, children, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_DOCUMENTS)
def test_compiled_json_writes_what_the_c_encoder_writes(document: Any) -> None:
    assert NATIVE is not None
    encoder = NATIVE.JsonEncoder(json_default)
    try:
        expected = _python_encoder(document)
        expected.encode()  # a lone surrogate fails here: the compiled encoder fails on it too
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            encoder.dumps(document)
        return
    assert encoder.dumps(document) == expected
    assert encoder.envelope(document, '{"type":"x"}') == f'{{"schema":{{"type":"x"}},"payload":{expected}}}'.encode()
    assert encoder.envelope(document, None) == expected.encode()


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**17), 10**17).map(lambda n: n / 4))
def test_floats_are_written_as_repr_writes_them(value: float) -> None:
    assert NATIVE is not None
    assert NATIVE.float_text(value) == repr(value)
    assert NATIVE.float_text(math.copysign(0.0, -1)) == "-0.0"


@pytest.mark.parametrize("op", [Op.CREATE, Op.UPDATE, Op.DELETE])
@pytest.mark.parametrize("decimal_handling", ["precise", "double", "string"])
def test_an_envelope_given_as_a_row_encodes_as_its_payload_does(op: Op, decimal_handling: str) -> None:
    # Every CQL type, in the converter's form (Debezium's variable-scale decimal records, varints
    # as bytes decimals, user types as nested records, maps with collection keys as entries).
    schema = RowSchema(
        "c.ks.t",
        (Column("id", "bigint", optional=False),),
        (Column("id", "bigint", optional=False), *(Column(n, t) for n, (t, _) in EVERY_CQL_TYPE.items())),
        user_types=USER_TYPES,
    )
    mode: Any = decimal_handling
    encode = row_encoder(schema, schema.value_columns, mode, "avro")
    assert encode is not None
    row = {"id": 7, **{n: v for n, (_, v) in EVERY_CQL_TYPE.items()}}
    event = ChangeEvent(
        op=op,
        key={"id": 7},
        before={"id": 7, "a_text": None} if op is not Op.CREATE else None,
        after=row if op is not Op.DELETE else None,
        source=SourceInfo("cassandra", "c", "ks", "t", "n1", {"segment": 1, "position": 2}, 1_700_000_000_000_001),
        ts_ms=1_700_000_000_002,
        schema=schema,
    )
    value_schema = avro_value_schema(event, mode)
    payload = event.value_payload()
    assert payload is not None
    payload = {**payload, **{part: payload[part] and encode(payload[part]) for part in ("before", "after")}}
    assert NATIVE is not None
    writer = NATIVE.AvroWriter(value_schema, logical_type_preparers(), rows=True)
    assert writer.encode(avro_envelope_row(event, encode)) == _fastavro(value_schema, payload)
    with pytest.raises(ValueError, match="a row of 4 values for a record of 5 fields"):
        writer.encode(avro_envelope_row(event, encode)[:4])
    with pytest.raises(TypeError):  # rows only where asked for: a tuple is no record otherwise
        _compiled(value_schema, avro_envelope_row(event, encode))
