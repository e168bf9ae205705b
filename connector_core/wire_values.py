"""Event values and the forms converters write them in, both ways.

An event carries exact values (``Decimal``, ``int`` of any size, user types and tuples as dicts,
maps as dicts); the schemas in :mod:`cdcflow.schemas` say how Avro and Kafka Connect JSON carry
them. The *encoders* here turn a row into what those schemas describe (a decimal into Debezium's
``{"scale", "value"}``, a varint into its two's-complement bytes, a map with non-text keys into
key/value entries), compiled once per schema and touching only the columns that need it. The
*decoders* turn what a consumer reads back (fastavro's datum, a Connect JSON payload) into the
event's values again, driven by the writer's schema alone, so a consumer needs no cdcflow metadata.

The number forms (:func:`decimal_to_unscaled`, :func:`unscaled_to_decimal`,
:func:`int_to_twos_complement`) are the ones Cassandra's storage, Debezium and Java's
``BigInteger.toByteArray`` share.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal

from cdcflow._avro_writer import epoch_millis, uuid_text
from cdcflow.errors import ConverterError, DecimalOutOfDoubleRangeError
from cdcflow.events import Column, RowSchema
from cdcflow.jsontext import plain_decimal_text
from cdcflow.schemas import (
    _TEXT_TYPES,
    CONNECT_DECIMAL,
    MAP_ENTRY,
    VARIABLE_SCALE_DECIMAL,
    DecimalHandling,
    ParsedType,
    parse_cql_type,
)

__all__ = [
    "RowEncoder",
    "Target",
    "avro_decoder",
    "column_encoders",
    "connect_decoder",
    "decimal_to_unscaled",
    "int_from_twos_complement",
    "int_to_twos_complement",
    "plain_decimal_text",
    "row_encoder",
    "unscaled_to_decimal",
]

Target = Literal["avro", "connect"]
Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]
RowEncoder = Callable[[Mapping[str, Any]], dict[str, Any]]

# --- exact numbers ---------------------------------------------------------------------------------


def int_to_twos_complement(value: int) -> bytes:
    """The shortest big-endian two's-complement bytes of ``value`` (Java's ``BigInteger.toByteArray``)."""
    bits = (value if value >= 0 else ~value).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def int_from_twos_complement(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def decimal_to_unscaled(value: Decimal) -> tuple[int, int]:
    """``(scale, unscaled)`` with ``value == unscaled * 10^-scale``, exactly (the scale may be negative)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite number")
    unscaled = 0
    for digit in digits:
        unscaled = unscaled * 10 + digit
    return -exponent, -unscaled if sign else unscaled


def unscaled_to_decimal(scale: int, unscaled: int) -> Decimal:
    """The decimal ``unscaled * 10^-scale``, with exactly that scale (no context rounding)."""
    return Decimal(f"{unscaled}E{-scale}")


# --- encoders: event values -> what the converter's schema describes ---------------------------------


def _variable_scale_decimal(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Decimal):
        value = Decimal(value) if isinstance(value, int) else Decimal(str(value))
    scale, unscaled = decimal_to_unscaled(value)
    return {"scale": scale, "value": int_to_twos_complement(unscaled)}


def _decimal_as_double(value: Any) -> float | None:
    if value is None:
        return None
    as_double = float(value)
    if not math.isfinite(as_double):
        raise DecimalOutOfDoubleRangeError(f"decimal {value:.6E} is beyond a double's range (decimal_handling: double)")
    return as_double


def _decimal_as_text(value: Any) -> str | None:
    if value is None:
        return None
    return plain_decimal_text(value) if isinstance(value, Decimal) else str(value)


def _varint_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        scale, unscaled = decimal_to_unscaled(value)
        if scale > 0 and unscaled % 10**scale:
            raise ValueError(f"{value} is not an integer")
        value = int(value)
    return int_to_twos_complement(value)


def _varint_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _connect_key_is_text(key: ParsedType) -> bool:
    return key[0] in _TEXT_TYPES or key[0] in ("uuid", "timeuuid")


class _Encoders:
    def __init__(self, schema: RowSchema, decimal_handling: DecimalHandling, target: Target) -> None:
        self.schema = schema
        self.decimal_handling = decimal_handling
        self.target = target

    def of(self, parsed: ParsedType) -> Encode | None:
        """How a value of this type is rewritten, or None when it is written as it is."""
        name, arguments = parsed
        if name == "decimal":
            if self.decimal_handling == "precise":
                return _variable_scale_decimal
            return _decimal_as_double if self.decimal_handling == "double" else _decimal_as_text
        if name == "varint":
            return _varint_text if self.decimal_handling == "string" else _varint_bytes
        if name in ("list", "set", "vector"):
            return self._sequence(arguments[0])
        if name == "map":
            return self._map(arguments[0], arguments[1])
        if name == "tuple":
            return self._fields([(f"f{i}", a) for i, a in enumerate(arguments)])
        user_type = self.schema.user_type(name)
        if user_type is not None:
            return self._fields([(field, parse_cql_type(kind)) for field, kind in user_type.fields])
        return None

    def _sequence(self, element: ParsedType) -> Encode | None:
        inner = self.of(element)
        if inner is None:
            return None

        def encode_sequence(value: Any) -> Any:
            return None if value is None else [inner(item) for item in value]

        return encode_sequence

    def _map(self, key: ParsedType, value: ParsedType) -> Encode | None:
        key_encode = self.of(key) or _same
        value_encode = self.of(value) or _same
        if (self.target == "avro" and key[0] in _TEXT_TYPES) or (
            self.target == "connect" and _connect_key_is_text(key)
        ):
            if value_encode is _same:
                return None

            def encode_object(entries: Any) -> Any:
                return None if entries is None else {k: value_encode(v) for k, v in entries.items()}

            return encode_object
        as_record = self.target == "avro"

        def encode_entries(entries: Any) -> Any:
            if entries is None:
                return None
            # Maps whose keys are collections, tuples or user types are entry lists in events.
            pairs = entries.items() if isinstance(entries, Mapping) else ((e["key"], e["value"]) for e in entries)
            if as_record:
                return [{"key": key_encode(k), "value": value_encode(v)} for k, v in pairs]
            return [[key_encode(k), value_encode(v)] for k, v in pairs]

        return encode_entries

    def _fields(self, fields: list[tuple[str, ParsedType]]) -> Encode | None:
        encoders = {name: encode for name, parsed in fields if (encode := self.of(parsed)) is not None}
        if not encoders:
            return None

        def encode_fields(value: Any) -> Any:
            if value is None:
                return None
            # A user type's field update carries only the fields written: absent ones stay absent.
            return {name: encoders[name](v) if name in encoders else v for name, v in value.items()}

        return encode_fields


def _same(value: Any) -> Any:
    return value


def column_encoders(
    schema: RowSchema, columns: tuple[Column, ...], decimal_handling: DecimalHandling, target: Target
) -> tuple[Encode | None, ...]:
    """How each of ``columns`` is rewritten for the ``target`` converter (None: written as it is),
    in column order: what :func:`row_encoder` applies to a row's dict, for rows held by position
    (the compiled core's compact batches)."""
    encoders = _Encoders(schema, decimal_handling, target)
    return tuple(encoders.of(parse_cql_type(c.type)) for c in columns)


def row_encoder(
    schema: RowSchema, columns: tuple[Column, ...], decimal_handling: DecimalHandling, target: Target
) -> RowEncoder | None:
    """A function writing a row of ``columns`` as the ``target`` converter's schema describes it,
    or None when every column is written as it is (most tables: no work per record)."""
    rewritten = {
        c.name: encode
        for c, encode in zip(columns, column_encoders(schema, columns, decimal_handling, target), strict=True)
        if encode is not None
    }
    if not rewritten:
        return None
    items = tuple(rewritten.items())

    def encode_row(row: Mapping[str, Any]) -> dict[str, Any]:
        encoded = dict(row)
        for name, encode in items:
            if name in encoded:
                try:
                    encoded[name] = encode(encoded[name])
                except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
                    raise ConverterError(f"column {name!r}: {exc}") from exc
        return encoded

    return encode_row


# --- decoders: what a consumer reads -> event values -----------------------------------------------


def _decimal_of_scale_zero(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, bytes | bytearray):
        return int_from_twos_complement(bytes(value))
    return value


def _from_variable_scale(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    data = value["value"]
    if isinstance(data, str):
        data = base64.b64decode(data)
    return unscaled_to_decimal(int(value["scale"]), int_from_twos_complement(bytes(data)))


def _entries_to_map(pairs: list[tuple[Any, Any]]) -> Any:
    try:
        return dict(pairs)
    except TypeError:  # keys that are dicts or lists: the event's entry-list form
        return [{"key": k, "value": v} for k, v in pairs]


def _optional(decode: Decode | None) -> Decode | None:
    if decode is None:
        return None

    def decode_optional(value: Any) -> Any:
        return None if value is None else decode(value)

    return decode_optional


def _pending(value: Any) -> Any:  # marks a record whose decoder is being built (it may refer to itself)
    return value


_PENDING: Decode = _pending


class _AvroDecoders:
    """Decoders for fastavro datums of one writer schema (its JSON form)."""

    def __init__(self) -> None:
        self.decoders: dict[str, Decode | None] = {}  # named type's full name -> its decoder

    def of(self, schema: Any, namespace: str) -> Decode | None:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) == 1:
                return _optional(self.of(branches[0], namespace))
            return None  # a general union: values as fastavro gives them
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical == "timestamp-millis":
            return epoch_millis
        if logical == "uuid":
            return uuid_text
        if logical == "decimal" and int(schema.get("scale", 0)) == 0:
            return _decimal_of_scale_zero
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(schema["name"], schema.get("namespace", namespace))
            self.decoders[full] = _PENDING
            decoder = self._record(schema, full) if kind in ("record", "error") else None
            self.decoders[full] = decoder
            return decoder
        if kind == "array":
            items = schema["items"]
            if isinstance(items, Mapping) and items.get("connect.internal.type") == MAP_ENTRY:
                return self._map_entries(items, namespace)
            inner = self.of(items, namespace)
            return None if inner is None else (lambda value: [inner(v) for v in value])
        if kind == "map":
            values = self.of(schema["values"], namespace)
            return None if values is None else (lambda value: {k: values(v) for k, v in value.items()})
        if isinstance(kind, dict | list):
            return self.of(kind, namespace)
        return None

    def _reference(self, name: str, namespace: str) -> Decode | None:
        full = _full_name(name, namespace)
        if full not in self.decoders:
            full = name  # a name from the null namespace
        decoder = self.decoders.get(full)
        if decoder is _PENDING:

            def decode_later(value: Any) -> Any:  # the record is complete by the time a value comes
                return (self.decoders[full] or _same)(value)

            return decode_later
        return decoder

    def _map_entries(self, entry: Mapping[str, Any], namespace: str) -> Decode:
        entry_namespace = entry.get("namespace", namespace)
        self.decoders[_full_name(entry["name"], entry_namespace)] = None
        types = {f["name"]: f["type"] for f in entry["fields"]}
        key = self.of(types["key"], entry_namespace) or _same
        value = self.of(types["value"], entry_namespace) or _same
        return lambda entries: _entries_to_map([(key(e["key"]), value(e["value"])) for e in entries])

    def _record(self, schema: Mapping[str, Any], full: str) -> Decode | None:
        if schema.get("connect.name") == VARIABLE_SCALE_DECIMAL:
            return _from_variable_scale
        namespace = full.rpartition(".")[0]
        fields = {f["name"]: d for f in schema.get("fields", ()) if (d := self.of(f["type"], namespace)) is not None}
        if not fields:
            return None
        items = tuple(fields.items())

        def decode_record(value: Any) -> Any:
            decoded = dict(value)
            for name, decode in items:
                if name in decoded:
                    decoded[name] = decode(decoded[name])
            return decoded

        return decode_record


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def avro_decoder(schema: Any) -> Decode:
    """Turns what fastavro reads with ``schema`` (the writer's, JSON form) into event values:
    variable-scale decimals into ``Decimal``, varints into ``int``, timestamps into epoch
    milliseconds, uuids into text, key/value entry arrays into maps."""
    return _AvroDecoders().of(schema, "") or _same


def connect_decoder(schema: Mapping[str, Any]) -> Decode:
    """Turns a Kafka Connect JSON payload written with ``schema`` into event values: bytes from
    base64, Connect decimals and Debezium's variable-scale decimals into exact numbers, maps written
    as key/value pairs back into maps."""
    return _connect(schema) or _same


def _connect(schema: Mapping[str, Any]) -> Decode | None:
    kind = schema.get("type")
    name = schema.get("name")
    decode: Decode | None = None
    if kind == "bytes":
        if name == CONNECT_DECIMAL:
            scale = int((schema.get("parameters") or {}).get("scale", "0"))

            def decode_connect_decimal(value: Any) -> Any:
                unscaled = int_from_twos_complement(base64.b64decode(value))
                return unscaled if scale == 0 else unscaled_to_decimal(scale, unscaled)

            decode = decode_connect_decimal
        else:
            decode = base64.b64decode
    elif kind == "struct":
        if name == VARIABLE_SCALE_DECIMAL:
            decode = _from_variable_scale
        else:
            fields = {f["field"]: d for f in schema.get("fields", ()) if (d := _connect(f)) is not None}
            if fields:
                items = tuple(fields.items())

                def decode_struct(value: Any) -> Any:
                    decoded = dict(value)
                    for field, inner in items:
                        if field in decoded:
                            decoded[field] = inner(decoded[field])
                    return decoded

                decode = decode_struct
    elif kind == "array":
        inner = _connect(schema["items"])
        if inner is not None:
            decode = lambda value: [inner(v) for v in value]  # noqa: E731
    elif kind == "map":
        key = _connect(schema["keys"]) or _same
        value_decode = _connect(schema["values"]) or _same
        if schema["keys"].get("type") == "string":
            if value_decode is not _same:
                decode = lambda value: {k: value_decode(v) for k, v in value.items()}  # noqa: E731
        else:
            decode = lambda value: _entries_to_map([(key(k), value_decode(v)) for k, v in value])  # noqa: E731
    return _optional(decode)
