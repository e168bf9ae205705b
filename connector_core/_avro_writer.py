"""Avro binary encoding, compiled per schema into straight-line Python.

fastavro interprets the schema for every datum (about 15 µs for a 1 KB change event); the worker
engine encodes every event it sends, so cdcflow generates one function per schema instead, whose
body is the schema's fields written out in order (about a quarter of that). Output is byte for
byte what fastavro writes (a property test holds the two together). Schemas using what the
compiler does not cover (unions other than ``["null", T]``, logical types other than
``timestamp-millis``, ``uuid`` and ``decimal`` on bytes) are left to fastavro.

:func:`avro_encoder` is what converters use: the compiled core's writer (``cdcflow._native``, Rust,
any schema, again byte for byte fastavro's) when it is built, else this module's, else fastavro.
"""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AvroEncoder",
    "AvroWriter",
    "UnsupportedAvroSchemaError",
    "avro_encoder",
    "compile_avro_writer",
    "compiled_avro_writer",
    "epoch_millis",
    "logical_type_preparers",
    "uuid_text",
]

AvroWriter = Callable[[bytearray, Any], None]
"""Appends the Avro binary encoding of a datum to a buffer."""


@dataclass(frozen=True, slots=True)
class AvroEncoder:
    """``encode(datum)``: a fixed prefix (a wire-format header) followed by the Avro binary
    encoding of ``datum``. ``native`` is the compiled core's writer when it encodes (None: Python
    or fastavro); it also takes a record as a tuple of its fields' values in their order, which
    costs less to build than a dict, and encodes compact batches (cdcflow.batches) with ``prefix``."""

    encode: Callable[[Any], bytes]
    native: Any = None
    prefix: bytes = b""

    @property
    def takes_rows(self) -> bool:
        return self.native is not None


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_PACK_FLOAT = struct.Struct("<f").pack
_PACK_DOUBLE = struct.Struct("<d").pack
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class UnsupportedAvroSchemaError(Exception):
    """The schema uses a construct the compiler leaves to fastavro."""


def _write_long(buffer: bytearray, value: int) -> None:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} does not fit an Avro long")
    value = (value << 1) ^ (value >> 63)
    while value > 0x7F:
        buffer.append((value & 0x7F) | 0x80)
        value >>= 7
    buffer.append(value)


def _write_int(buffer: bytearray, value: int) -> None:
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{value} does not fit an Avro int")
    _write_long(buffer, value)


def _write_string(buffer: bytearray, value: str) -> None:
    data = value.encode()
    _write_long(buffer, len(data))
    buffer += data


def _write_bytes(buffer: bytearray, value: bytes) -> None:
    if not isinstance(value, bytes | bytearray):
        raise TypeError(f"{type(value).__name__} is not bytes")
    _write_long(buffer, len(value))
    buffer += value


def _write_boolean(buffer: bytearray, value: bool) -> None:
    if value is True:
        buffer.append(1)
    elif value is False:
        buffer.append(0)
    else:
        raise TypeError(f"{value!r} is not a boolean")


def _write_float(buffer: bytearray, value: float) -> None:
    buffer += _PACK_FLOAT(value)


def _write_double(buffer: bytearray, value: float) -> None:
    buffer += _PACK_DOUBLE(value)


def _write_null(buffer: bytearray, value: None) -> None:
    if value is not None:
        raise TypeError(f"{value!r} is not null")


def epoch_millis(value: Any) -> Any:
    # fastavro takes datetimes for timestamp-millis; cdcflow's own values are already epoch millis.
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    return value


def uuid_text(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def _decimal_bytes(value: Any, scale: int, precision: int) -> Any:
    # fastavro's encoding of a Decimal for a bytes ``decimal``, byte for byte (its length rule
    # included); bytes (the unscaled two's complement) pass as they are, as in fastavro.
    if not isinstance(value, decimal.Decimal):
        return value
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite number")
    if len(digits) > precision:
        raise ValueError("The decimal precision is bigger than allowed by schema")
    if exponent + scale < 0:
        raise ValueError("Scale provided in schema does not match the decimal")
    unscaled = 0
    for digit in digits:
        unscaled = unscaled * 10 + digit
    unscaled *= 10 ** (exponent + scale)
    size = (unscaled.bit_length() + 8) // 8
    return (-unscaled if sign else unscaled).to_bytes(size, "big", signed=True)


_LOGICAL_PREPARERS = {("long", "timestamp-millis"): "_timestamp_millis", ("string", "uuid"): "_uuid_text"}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_RUNTIME: dict[str, Any] = {
    "_decimal_bytes": _decimal_bytes,
    "_timestamp_millis": epoch_millis,
    "_uuid_text": uuid_text,
    "_write_long": _write_long,
    "_write_int": _write_int,
    "_write_string": _write_string,
    "_write_bytes": _write_bytes,
    "_write_boolean": _write_boolean,
    "_write_float": _write_float,
    "_write_double": _write_double,
    "_write_null": _write_null,
}


class _Compiler:
    """Turns a schema into the source text of ``write(buffer, datum)`` and its helpers."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> schema
        self.functions: dict[str, list[str]] = {}  # function name -> body lines
        self.constants: dict[str, Any] = {}
        self._counter = 0

    def fresh(self, stem: str) -> str:
        self._counter += 1
        return f"_{stem}{self._counter}"

    def function_for_named(self, full_name: str) -> str:
        return "_w_" + "".join(c if c.isalnum() else "_" for c in full_name)

    def declare(self, schema: Any, namespace: str) -> None:
        """Register named types (depth first), so references by name resolve."""
        if isinstance(schema, list):
            for branch in schema:
                self.declare(branch, namespace)
            return
        if not isinstance(schema, Mapping):
            return
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(schema["name"], schema.get("namespace", namespace))
            self.named[full] = schema
            inner_namespace = full.rpartition(".")[0]
            for field in schema.get("fields", ()):
                self.declare(field["type"], inner_namespace)
        elif kind == "array":
            self.declare(schema["items"], namespace)
        elif kind == "map":
            self.declare(schema["values"], namespace)
        elif isinstance(kind, list | Mapping):
            self.declare(kind, namespace)

    def emit(self, schema: Any, value: str, namespace: str, indent: str, lines: list[str]) -> None:
        """Lines that write ``value`` (an expression) as ``schema``."""
        if isinstance(schema, str):
            if schema == "string":
                # Inlined: strings are most of a change event, and a call per string costs more
                # than the copy. Lengths under 64 are one byte: (n << 1) for n >= 0.
                data, size = self.fresh("data"), self.fresh("size")
                lines.append(f"{indent}{data} = {value}.encode()")
                lines.append(f"{indent}{size} = len({data})")
                lines.append(f"{indent}if {size} < 64:")
                lines.append(f"{indent}    buffer.append({size} << 1)")
                lines.append(f"{indent}else:")
                lines.append(f"{indent}    _write_long(buffer, {size})")
                lines.append(f"{indent}buffer += {data}")
                return
            if schema in _PRIMITIVES:
                lines.append(f"{indent}_write_{schema}(buffer, {value})")
                return
            full = schema if "." in schema or schema in self.named else _full_name(schema, namespace)
            if full not in self.named:
                raise UnsupportedAvroSchemaError(f"unknown named type {schema!r}")
            self.ensure_named(full)
            lines.append(f"{indent}{self.function_for_named(full)}(buffer, {value})")
            return
        if isinstance(schema, list):
            self.emit_union(schema, value, namespace, indent, lines)
            return
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical == "decimal" and kind == "bytes" and isinstance(schema.get("precision"), int):
            scale, precision = int(schema.get("scale", 0)), int(schema["precision"])
            self.emit(kind, f"_decimal_bytes({value}, {scale}, {precision})", namespace, indent, lines)
            return
        if logical is not None and kind in _PRIMITIVES:
            prepare = _LOGICAL_PREPARERS.get((kind, logical))
            if prepare is None:
                raise UnsupportedAvroSchemaError(f"logical type {logical!r} on {kind!r}")
            self.emit(kind, f"{prepare}({value})", namespace, indent, lines)
            return
        if isinstance(kind, list | Mapping) or kind in _PRIMITIVES:
            self.emit(kind, value, namespace, indent, lines)
            return
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(schema["name"], schema.get("namespace", namespace))
            self.ensure_named(full)
            lines.append(f"{indent}{self.function_for_named(full)}(buffer, {value})")
            return
        if kind == "array":
            items = self.fresh("items")
            item = self.fresh("item")
            lines.append(f"{indent}{items} = {value}")
            lines.append(f"{indent}if {items}:")
            lines.append(f"{indent}    _write_long(buffer, len({items}))")
            lines.append(f"{indent}    for {item} in {items}:")
            self.emit(schema["items"], item, namespace, indent + "        ", lines)
            lines.append(f"{indent}buffer.append(0)")
            return
        if kind == "map":
            entries = self.fresh("entries")
            key, item = self.fresh("key"), self.fresh("item")
            lines.append(f"{indent}{entries} = {value}")
            lines.append(f"{indent}if {entries}:")
            lines.append(f"{indent}    _write_long(buffer, len({entries}))")
            lines.append(f"{indent}    for {key}, {item} in {entries}.items():")
            lines.append(f"{indent}        _write_string(buffer, {key})")
            self.emit(schema["values"], item, namespace, indent + "        ", lines)
            lines.append(f"{indent}buffer.append(0)")
            return
        raise UnsupportedAvroSchemaError(f"unsupported Avro type {kind!r}")

    def emit_union(self, branches: list[Any], value: str, namespace: str, indent: str, lines: list[str]) -> None:
        if len(branches) == 1 and not isinstance(branches[0], list):
            lines.append(f"{indent}buffer.append(0)")  # the branch index, then the branch
            self.emit(branches[0], value, namespace, indent, lines)
            return
        if len(branches) != 2 or "null" not in branches or any(isinstance(b, list) for b in branches):
            raise UnsupportedAvroSchemaError(f"union {branches!r} (only [null, T] is compiled)")
        null_index = branches.index("null")
        other = branches[1 - null_index]
        current = self.fresh("v")
        lines.append(f"{indent}{current} = {value}")
        lines.append(f"{indent}if {current} is None:")
        lines.append(f"{indent}    buffer.append({2 * null_index})")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    buffer.append({2 * (1 - null_index)})")
        self.emit(other, current, namespace, indent + "    ", lines)

    def field_value(self, field: Mapping[str, Any]) -> str:
        """How a field's value is read: a missing field takes its default (or null in a union with
        null), as fastavro does, so a partial row image encodes the same either way."""
        name = field["name"]
        if "default" in field:
            if field["default"] is None:
                return f"datum.get({name!r})"
            default = self.fresh("default")
            self.constants[default] = field["default"]
            return f"datum.get({name!r}, {default})"
        if isinstance(field["type"], list) and "null" in field["type"]:
            return f"datum.get({name!r})"
        return f"datum[{name!r}]"

    def ensure_named(self, full: str) -> None:
        function = self.function_for_named(full)
        if function in self.functions:
            return
        self.functions[function] = []  # placeholder first: a record may refer to itself
        schema = self.named[full]
        namespace = full.rpartition(".")[0]
        lines: list[str] = []
        kind = schema["type"]
        if kind in ("record", "error"):
            for field in schema["fields"]:
                self.emit(field["type"], self.field_value(field), namespace, "    ", lines)
        elif kind == "enum":
            symbols = self.fresh("symbols")
            self.constants[symbols] = {symbol: index for index, symbol in enumerate(schema["symbols"])}
            lines.append(f"    _write_long(buffer, {symbols}[datum])")
        elif kind == "fixed":
            if schema.get("logicalType") is not None:  # a decimal in fixed bytes: fastavro converts it
                raise UnsupportedAvroSchemaError(f"logical type {schema['logicalType']!r} on fixed {full}")
            lines.append(f"    if len(datum) != {int(schema['size'])}:")
            lines.append(f"        raise ValueError('fixed {full} takes {int(schema['size'])} bytes')")
            lines.append("    buffer += datum")
        self.functions[function] = lines or ["    pass"]


def _full_name(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def compile_avro_writer(schema: Any) -> AvroWriter:
    """A function appending the Avro binary form of a datum of ``schema`` to a ``bytearray``.

    ``schema`` is the JSON form (dicts, lists, names), as a registry holds it. Raises
    :class:`UnsupportedAvroSchemaError` for what it does not compile; a datum that does not fit
    the schema raises ``ValueError``, ``TypeError``, ``KeyError`` or ``AttributeError``.
    """
    compiler = _Compiler()
    compiler.declare(schema, "")
    top: list[str] = []
    compiler.emit(schema, "datum", "", "    ", top)
    source = []
    for name, body in compiler.functions.items():
        source.append(f"def {name}(buffer, datum):")
        source.extend(body)
    source.append("def write(buffer, datum):")
    source.extend(top)
    namespace: dict[str, Any] = {**_RUNTIME, **compiler.constants}
    # The source is generated from the schema above, never from data.
    exec(compile("\n".join(source), "<cdcflow avro writer>", "exec"), namespace)
    writer: AvroWriter = namespace["write"]
    return writer


def logical_type_preparers() -> dict[tuple[str, str], Callable[[Any, Any], Any]]:
    """``(type, logicalType)`` -> ``prepare(datum, schema)``, the value written in its base type:
    this module's for what it compiles itself, fastavro's for every other logical type."""
    from fastavro.write import LOGICAL_WRITERS

    preparers: dict[tuple[str, str], Callable[[Any, Any], Any]] = {}
    for name, prepare in LOGICAL_WRITERS.items():
        base, _, logical = name.partition("-")
        preparers[(base, logical)] = prepare
    preparers[("long", "timestamp-millis")] = lambda datum, schema: epoch_millis(datum)
    preparers[("string", "uuid")] = lambda datum, schema: uuid_text(datum)
    return preparers


def compiled_avro_writer() -> Any:
    """The compiled core's ``AvroWriter`` class when the compiled core is in use, else None: the one
    place the Avro path (per record in :func:`avro_encoder`, per batch in the Avro converter) is chosen."""
    from cdcflow.native import native_module

    native = native_module()
    return None if native is None else native.AvroWriter


def avro_encoder(schema: Any, prefix: bytes = b"") -> AvroEncoder:
    """``prefix`` plus the Avro binary form of a datum of ``schema``, as bytes, by the fastest
    writer there is for it: the compiled core's, this module's, or fastavro's (in that order).
    A datum that does not fit raises ``ValueError``, ``TypeError``, ``KeyError``,
    ``AttributeError`` or ``OverflowError``."""
    writer_class = compiled_avro_writer()
    if writer_class is not None:
        try:
            compiled = writer_class(schema, logical_type_preparers(), rows=True)
        except ValueError:
            pass  # a construct the compiled core does not take: the writers below decide
        else:

            def encode_compiled(datum: Any) -> bytes:
                encoded: bytes = compiled.encode(datum, prefix)
                return encoded

            return AvroEncoder(encode_compiled, native=compiled, prefix=prefix)
    try:
        write = compile_avro_writer(schema)
    except UnsupportedAvroSchemaError:
        import io

        import fastavro

        parsed = fastavro.parse_schema(schema)

        def write(buffer: bytearray, datum: Any) -> None:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, datum, disable_tuple_notation=True)
            buffer += out.getvalue()

    def encode(datum: Any) -> bytes:
        buffer = bytearray(prefix)
        write(buffer, datum)
        return bytes(buffer)

    return AvroEncoder(encode)
