"""CQL types as the commit log stores them: how long a value is, and what it decodes to.

Decoded values are what cdcflow's events carry, exactly (see ``cdcflow.schemas`` for how
converters write them): ``decimal`` as a ``Decimal`` with its scale, ``varint`` as an ``int`` of any
size, ``timestamp`` as epoch milliseconds, ``date`` as days since the epoch,
``uuid``/``timeuuid``/``inet`` as text, ``duration`` as ``<months>mo<days>d<nanos>ns``, tuples as
``{"f0": ..., "f1": ...}``, user types as ``{field: value}`` (a frozen value has every field; a
field update of a non-frozen one only the fields it wrote), maps as dicts, or as lists of
``{"key": k, "value": v}`` when their keys are collections, tuples or user types (not hashable).
The same values come from storage (:meth:`CqlType.decode`, :meth:`CqlType.collect`) and from the
driver (:func:`from_driver`); the decimal, varint and user-type forms are made in one place each
(:func:`decode_decimal`, :func:`decode_varint`, :func:`user_type_value`).

Only a few types have a fixed length in storage (``valueLengthIfFixed`` in Cassandra); all others,
``date``, ``time``, ``smallint`` and ``tinyint`` included, are stored with a vint length prefix.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cdcflow.events import UserType
from cdcflow.schemas import parse_cql_type
from cdcflow.wire_values import int_from_twos_complement, unscaled_to_decimal

__all__ = [
    "CqlType",
    "ValueDecodeError",
    "build_type",
    "decode_decimal",
    "decode_varint",
    "from_driver",
    "map_value",
    "native_type_name",
    "read_signed_vint",
    "read_unsigned_vint",
    "user_type_value",
    "user_types_of",
]

Decode = Callable[[bytes], Any]


class ValueDecodeError(ValueError):
    """A value's bytes do not fit its type (wrong length, bad UTF-8)."""


# Number of bytes that follow a vint's first byte: its count of leading one bits.
_VINT_EXTRA = bytes(8 - (b ^ 0xFF).bit_length() if b >= 0x80 else 0 for b in range(256))


def read_unsigned_vint(data: bytes | memoryview, offset: int) -> tuple[int, int]:
    """Cassandra's unsigned vint at ``offset``: (value as an unsigned 64-bit int, next offset)."""
    first = data[offset]
    if first < 0x80:
        return first, offset + 1
    extra = _VINT_EXTRA[first]
    end = offset + 1 + extra
    if end > len(data):
        raise ValueDecodeError("vint runs past the end of its buffer")
    value = first & (0xFF >> extra)
    return (value << (8 * extra)) | int.from_bytes(data[offset + 1 : end], "big"), end


def read_signed_vint(data: bytes | memoryview, offset: int) -> tuple[int, int]:
    value, offset = read_unsigned_vint(data, offset)
    return (value >> 1) ^ -(value & 1), offset  # zig-zag


_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U32 = struct.Struct(">I")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")


def _fixed(unpacker: struct.Struct) -> Decode:
    unpack = unpacker.unpack
    size = unpacker.size

    def decode(raw: bytes) -> Any:
        if len(raw) != size:
            if not raw:
                return None  # CQL allows empty values for every type
            raise ValueDecodeError(f"expected {size} bytes, found {len(raw)}")
        return unpack(raw)[0]

    return decode


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueDecodeError(f"not UTF-8: {exc}") from exc


def _boolean(raw: bytes) -> bool | None:
    return raw != b"\x00" if raw else None


def _date(raw: bytes) -> int | None:
    if not raw:
        return None
    if len(raw) != 4:
        raise ValueDecodeError(f"date takes 4 bytes, found {len(raw)}")
    return int(_U32.unpack(raw)[0]) - (1 << 31)  # stored unsigned, the epoch at 2^31


def _uuid(raw: bytes) -> str | None:
    if not raw:
        return None
    if len(raw) != 16:
        raise ValueDecodeError(f"uuid takes 16 bytes, found {len(raw)}")
    return str(uuid.UUID(bytes=raw))


def _inet(raw: bytes) -> str | None:
    if not raw:
        return None
    if len(raw) not in (4, 16):
        raise ValueDecodeError(f"inet takes 4 or 16 bytes, found {len(raw)}")
    return str(ipaddress.ip_address(raw))


def decode_varint(raw: bytes) -> int | None:
    """A ``varint``: big-endian two's complement of any length."""
    return int_from_twos_complement(raw) if raw else None


def decode_decimal(raw: bytes) -> Decimal | None:
    """A ``decimal``: an int32 scale, then the unscaled value as a varint; exact, scale kept."""
    if not raw:
        return None
    if len(raw) < 4:
        raise ValueDecodeError(f"decimal takes at least 4 bytes, found {len(raw)}")
    scale = _I32.unpack_from(raw)[0]
    return unscaled_to_decimal(scale, int_from_twos_complement(raw[4:]))


def user_type_value(names: Sequence[str], values: Iterable[tuple[int, Any]], whole: bool) -> dict[str, Any]:
    """A user type's value from ``(field index, value)`` pairs: with every field (``None`` where
    there is none) when ``whole`` (a frozen value, or a non-frozen one written as a whole), else
    only the fields given (a field update: absent fields were not touched)."""
    fields: dict[str, Any] = dict.fromkeys(names) if whole else {}
    for index, value in values:
        if 0 <= index < len(names):
            fields[names[index]] = value
    return fields


def map_value(pairs: Iterable[tuple[Any, Any]], keys_are_values: bool) -> dict[Any, Any] | list[dict[str, Any]]:
    """A map's value: a dict, or ``[{"key": k, "value": v}, ...]`` when its keys are collections,
    tuples or user types (dicts and lists cannot be dict keys)."""
    if keys_are_values:
        return dict(pairs)
    return [{"key": k, "value": v} for k, v in pairs]


def _duration(raw: bytes) -> str | None:
    if not raw:
        return None
    months, offset = read_signed_vint(raw, 0)
    days, offset = read_signed_vint(raw, offset)
    nanos, offset = read_signed_vint(raw, offset)
    if offset != len(raw):
        raise ValueDecodeError("duration has trailing bytes")
    return f"{months}mo{days}d{nanos}ns"


def _blob(raw: bytes) -> bytes:
    return raw


def _empty(raw: bytes) -> None:
    return None


# (storage length when fixed, decoder) by CQL name.
_NATIVE: dict[str, tuple[int, Decode]] = {
    "ascii": (-1, _text),
    "text": (-1, _text),
    "varchar": (-1, _text),
    "blob": (-1, _blob),
    "boolean": (1, _boolean),
    "tinyint": (-1, _fixed(_I8)),
    "smallint": (-1, _fixed(_I16)),
    "int": (4, _fixed(_I32)),
    "bigint": (8, _fixed(_I64)),
    "counter": (-1, _fixed(_I64)),
    "varint": (-1, decode_varint),
    "float": (4, _fixed(_F32)),
    "double": (8, _fixed(_F64)),
    "decimal": (-1, decode_decimal),
    "timestamp": (8, _fixed(_I64)),
    "date": (-1, _date),
    "time": (-1, _fixed(_I64)),
    "uuid": (16, _uuid),
    "timeuuid": (16, _uuid),
    "inet": (-1, _inet),
    "duration": (-1, _duration),
    "empty": (0, _empty),
}


@dataclass(frozen=True, slots=True)
class CqlType:
    """One column type, ready to decode what the commit log holds for it.

    ``multi_cell`` types (non-frozen list, set, map and user type) store one cell per element:
    the element's identity in the cell path (``path``) and its value in the cell (``value``).
    """

    text: str  # the CQL text, as events name the column's type
    kind: str  # "native", "list", "set", "map", "tuple", "udt", "vector"
    fixed_length: int  # bytes in storage, or -1 when a vint length precedes the value
    decode: Decode = field(repr=False, compare=False)
    multi_cell: bool = False
    path: CqlType | None = field(default=None, repr=False)  # element identity in a cell path
    value: CqlType | None = field(default=None, repr=False)  # the cell's value
    field_names: tuple[str, ...] = ()
    field_types: tuple[CqlType, ...] = field(default=(), repr=False)

    def collect(self, cells: Sequence[tuple[bytes, bytes | None]], whole: bool = True) -> Any:
        """The value of a multi-cell column from its cells, as (path, value) pairs.

        ``whole``: the cells replace the column's value (it was overwritten, or the row read
        whole); otherwise they are an update of some elements. That matters for user types: an
        update names only the fields it wrote, and a field set to null is a cell without a value
        (``None``). For collections only live cells are given.
        """
        if self.kind == "list":
            return [self.value.decode(v) for _, v in cells if v is not None] if self.value else []
        if self.kind == "set":
            return [self.path.decode(p) for p, _ in cells] if self.path else []
        if self.kind == "map":
            assert self.path is not None and self.value is not None
            path, value = self.path, self.value
            return map_value(
                ((path.decode(p), value.decode(v)) for p, v in cells if v is not None), self.keys_are_values
            )
        if self.kind == "udt":
            types = self.field_types
            fields = (
                (index, None if v is None or index >= len(types) else types[index].decode(v))
                for index, v in ((_I16.unpack(p)[0], v) for p, v in cells)
            )
            return user_type_value(self.field_names, fields, whole)
        raise ValueDecodeError(f"{self.text} is not a multi-cell type")

    @property
    def keys_are_values(self) -> bool:
        """A map whose keys are single values (dict keys in events)."""
        return self.path is not None and self.path.kind == "native"

    def path_label(self, path: bytes) -> Any:
        """How a delta event names one element of a multi-cell column (set element, map key, field)."""
        if self.kind == "udt":
            index = _I16.unpack(path)[0]
            return self.field_names[index] if 0 <= index < len(self.field_names) else index
        if self.kind == "list":
            return str(uuid.UUID(bytes=path)) if len(path) == 16 else path.hex()
        assert self.path is not None
        return self.path.decode(path)


def native_type_name(cql: CqlType) -> str | None:
    """The CQL name of a native type whose values decode as that name's reference decoder does
    (``int``, ``text``...); None for collections, tuples, user types, vectors and custom types.

    The compiled core (``cdcflow._native``) decodes some native types itself and must know which
    decoder a type really has: the name alone would not say (a custom type decodes as ``blob``).
    """
    if cql.kind != "native":
        return None
    for name, (_, decode) in _NATIVE.items():
        if decode is cql.decode:
            return name
    return None


_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)


def from_driver(value: Any, cql: CqlType) -> Any:
    """A value as cassandra-driver returns it, in the form :meth:`CqlType.decode` gives from storage.

    Bootstrap reads rows through the driver; its events must carry the same values the commit-log
    events carry for the same row, whichever way the row was read.
    """
    if value is None:
        return None
    kind = cql.kind
    if kind == "native":
        return _native_from_driver(value, cql.text)
    if kind in ("list", "vector"):
        assert cql.value is not None
        return [from_driver(v, cql.value) for v in value]
    if kind == "set":
        assert cql.path is not None
        return [from_driver(v, cql.path) for v in value]
    if kind == "map":
        assert cql.path is not None and cql.value is not None
        pairs = ((from_driver(k, cql.path), from_driver(v, cql.value)) for k, v in value.items())
        return map_value(pairs, cql.keys_are_values)
    if kind == "tuple":
        return {f"f{i}": from_driver(v, t) for i, (v, t) in enumerate(zip(value, cql.field_types, strict=False))}
    if kind == "udt":
        fields = (
            (index, from_driver(value.get(name) if isinstance(value, dict) else getattr(value, name, None), member))
            for index, (name, member) in enumerate(zip(cql.field_names, cql.field_types, strict=True))
        )
        return user_type_value(cql.field_names, fields, whole=True)
    return value


def _native_from_driver(value: Any, name: str) -> Any:
    if name == "timestamp" and isinstance(value, dt.datetime):
        # The driver builds the datetime from milliseconds / 1000.0: far from 1970 it is a few
        # microseconds off, so round to the nearest millisecond (what was stored) instead of down.
        micros = (value.replace(tzinfo=None) - _EPOCH) // dt.timedelta(microseconds=1)
        return (micros + 500) // 1000
    if name == "date":
        days = getattr(value, "days_from_epoch", None)
        return days if days is not None else (value - _EPOCH_DATE).days
    if name == "time":
        nanos = getattr(value, "nanosecond_time", None)
        if nanos is not None:
            return nanos
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000_000 + value.microsecond * 1000
    if name == "decimal":
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if name in ("uuid", "timeuuid"):
        return str(value)
    if name == "inet":
        # Written as the storage decoder writes it: the driver prints IPv4-mapped IPv6 its own way.
        return str(ipaddress.ip_address(str(value)))
    if name == "duration":
        return f"{value.months}mo{value.days}d{value.nanoseconds}ns"
    return value


def _elements(raw: bytes, count_of: str) -> tuple[list[bytes | None], int]:
    # A frozen collection or tuple value: int32 lengths, -1 for null.
    items: list[bytes | None] = []
    offset = 0
    end = len(raw)
    while offset < end:
        if offset + 4 > end:
            raise ValueDecodeError(f"{count_of} cut short")
        (length,) = _I32.unpack_from(raw, offset)
        offset += 4
        if length < 0:
            items.append(None)
            continue
        if offset + length > end:
            raise ValueDecodeError(f"{count_of} element runs past the value")
        items.append(raw[offset : offset + length])
        offset += length
    return items, offset


def _frozen_collection(raw: bytes) -> list[bytes | None]:
    if not raw:
        return []
    (count,) = _I32.unpack_from(raw, 0)
    items, _ = _elements(raw[4:], "collection")
    if len(items) < count:
        raise ValueDecodeError(f"collection says {count} elements, holds {len(items)}")
    return items


def _decode_optional(element: CqlType, raw: bytes | None) -> Any:
    return None if raw is None else element.decode(raw)


def build_type(text: str, user_types: Mapping[str, tuple[Sequence[str], Sequence[str]]] | None = None) -> CqlType:
    """A :class:`CqlType` for CQL type text as ``system_schema`` stores it (``frozen<map<text, int>>``).

    ``user_types`` maps a user type's name to its field names and field type texts (from
    ``system_schema.types`` of the table's keyspace).
    """
    user_types = user_types or {}
    stripped = text.strip()
    multi_cell = not stripped.lower().startswith("frozen<")
    return _build(parse_cql_type(stripped), stripped, user_types, multi_cell)


def _type_text(parsed: tuple[str, tuple[Any, ...]]) -> str:
    name, arguments = parsed
    if not arguments:
        return name
    return f"{name}<{', '.join(str(a) if isinstance(a, int) else _type_text(a) for a in arguments)}>"


def _build(
    parsed: tuple[str, tuple[Any, ...]],
    text: str | None,
    user_types: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    multi_cell: bool,
) -> CqlType:
    name, arguments = parsed
    text = text or _type_text(parsed)
    if name in _NATIVE:
        length, decode = _NATIVE[name]
        return CqlType(text, "native", length, decode)
    if name in ("list", "set"):
        element = _build(arguments[0], None, user_types, False)

        def decode_sequence(raw: bytes) -> list[Any]:
            return [_decode_optional(element, item) for item in _frozen_collection(raw)]

        if name == "list":
            timeuuid = _build(("timeuuid", ()), None, user_types, False)
            return CqlType(text, "list", -1, decode_sequence, multi_cell, path=timeuuid, value=element)
        return CqlType(text, "set", -1, decode_sequence, multi_cell, path=element)
    if name == "map":
        key = _build(arguments[0], None, user_types, False)
        value = _build(arguments[1], None, user_types, False)

        keys_are_values = key.kind == "native"

        def decode_map(raw: bytes) -> dict[Any, Any] | list[dict[str, Any]]:
            items = _frozen_collection(raw)
            pairs = (
                (_decode_optional(key, items[i]), _decode_optional(value, items[i + 1]))
                for i in range(0, len(items) - 1, 2)
            )
            return map_value(pairs, keys_are_values)

        return CqlType(text, "map", -1, decode_map, multi_cell, path=key, value=value)
    if name == "tuple":
        members = tuple(_build(a, None, user_types, False) for a in arguments)

        def decode_tuple(raw: bytes) -> dict[str, Any]:
            items, _ = _elements(raw, "tuple")
            return {f"f{i}": _decode_optional(m, items[i]) if i < len(items) else None for i, m in enumerate(members)}

        return CqlType(text, "tuple", -1, decode_tuple, field_types=members)
    if name == "vector":
        element = _build(arguments[0], None, user_types, False)
        dimension = int(arguments[1])
        return _vector(text, element, dimension)
    if name in user_types:
        field_names, field_texts = user_types[name]
        members = tuple(_build(parse_cql_type(t), t, user_types, False) for t in field_texts)
        names = tuple(field_names)

        def decode_udt(raw: bytes) -> dict[str, Any]:
            items, _ = _elements(raw, "user type")
            values = ((i, _decode_optional(m, items[i])) for i, m in enumerate(members) if i < len(items))
            return user_type_value(names, values, whole=True)

        return CqlType(text, "udt", -1, decode_udt, multi_cell, field_names=names, field_types=members)
    # A custom type ('org.apache...') or a type cdcflow does not know: keep the bytes.
    return CqlType(text, "native", -1, _blob)


def _vector(text: str, element: CqlType, dimension: int) -> CqlType:
    size = element.fixed_length
    if size > 0:

        def decode_fixed(raw: bytes) -> list[Any] | None:
            if not raw:
                return None
            if len(raw) != size * dimension:
                raise ValueDecodeError(f"vector of {dimension} takes {size * dimension} bytes, found {len(raw)}")
            return [element.decode(raw[i : i + size]) for i in range(0, len(raw), size)]

        return CqlType(text, "vector", size * dimension, decode_fixed, value=element)

    def decode_variable(raw: bytes) -> list[Any] | None:
        if not raw:
            return None
        values = []
        offset = 0
        for _ in range(dimension):
            length, offset = read_unsigned_vint(raw, offset)
            values.append(element.decode(raw[offset : offset + length]))
            offset += length
        return values

    return CqlType(text, "vector", -1, decode_variable, value=element)


def user_types_of(types: Iterable[CqlType]) -> tuple[UserType, ...]:
    """The user types these column types name, nested ones too, each once: what a
    :class:`~cdcflow.events.RowSchema` needs to describe the columns' values."""
    found: dict[str, UserType] = {}

    def visit(cql: CqlType | None) -> None:
        if cql is None:
            return
        if cql.kind == "udt":
            name = parse_cql_type(cql.text)[0]
            if name not in found:
                found[name] = UserType(
                    name, tuple((n, t.text) for n, t in zip(cql.field_names, cql.field_types, strict=True))
                )
        for member in (cql.path, cql.value, *cql.field_types):
            visit(member)

    for cql in types:
        visit(cql)
    return tuple(found.values())
