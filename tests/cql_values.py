"""CQL types and values for property tests: each drawn with what cassandra-driver needs to write it
(its type class and the value in the driver's form) and the value a cdcflow event must carry for it.

The driver is the independent encoder: its serialisation of a value is what Cassandra stores
(cell values and frozen collections alike), so decoding those bytes with
``cdcflow.sources.cql`` is the source side of a round trip.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import uuid
from collections import namedtuple
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cassandra import cqltypes as driver_types
from cassandra.util import Date, Duration
from hypothesis import strategies as st

from cdcflow.events import UserType

_MARSHAL = "org.apache.cassandra.db.marshal."


@dataclass(frozen=True)
class CqlCase:
    """A type (CQL text), its driver class, a value as the driver takes it and as an event holds it."""

    text: str
    driver: Any
    driver_value: Any
    event_value: Any
    user_types: tuple[UserType, ...] = ()
    key_is_value: bool = True  # usable as a map key or set element (hashable in events)


def _native(
    text: str, marshal: str, values: st.SearchStrategy[Any], to_driver: Any = None
) -> st.SearchStrategy[CqlCase]:
    driver = DRIVER_TYPES[text] = driver_types.lookup_casstype(_MARSHAL + marshal)
    return values.map(lambda v: CqlCase(text, driver, to_driver(v) if to_driver else v, v))


DRIVER_TYPES: dict[str, Any] = {}
_DRIVER_KEYSPACES = itertools.count()


_LONG = st.integers(-(2**63), 2**63 - 1)
_EPOCH = dt.date(1970, 1, 1)


def _decimal(unscaled: int, scale: int) -> Decimal:
    return Decimal(f"{unscaled}E{-scale}")


NATIVE: dict[str, st.SearchStrategy[CqlCase]] = {
    "ascii": _native("ascii", "AsciiType", st.text(alphabet=st.characters(max_codepoint=127), max_size=20)),
    "text": _native("text", "UTF8Type", st.text(max_size=20)),
    "bigint": _native("bigint", "LongType", _LONG),
    "int": _native("int", "Int32Type", st.integers(-(2**31), 2**31 - 1)),
    "smallint": _native("smallint", "ShortType", st.integers(-(2**15), 2**15 - 1)),
    "tinyint": _native("tinyint", "ByteType", st.integers(-128, 127)),
    "varint": _native("varint", "IntegerType", st.integers(-(2**300), 2**300)),
    "decimal": _native(
        "decimal",
        "DecimalType",
        st.builds(_decimal, st.integers(-(10**45), 10**45), st.integers(-20, 60)),
    ),
    "float": _native("float", "FloatType", st.floats(width=32, allow_nan=False, allow_infinity=False)),
    "double": _native("double", "DoubleType", st.floats(allow_nan=False, allow_infinity=False)),
    "boolean": _native("boolean", "BooleanType", st.booleans()),
    "blob": _native("blob", "BytesType", st.binary(max_size=20)),
    "uuid": _native("uuid", "UUIDType", st.uuids().map(str), uuid.UUID),
    "timeuuid": _native("timeuuid", "TimeUUIDType", st.uuids(version=1).map(str), uuid.UUID),
    "inet": _native(
        "inet",
        "InetAddressType",
        st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(lambda a: str(ipaddress.ip_address(a))),
    ),
    "date": _native("date", "SimpleDateType", st.integers(-(2**31), 2**31 - 1), Date),
    "time": _native("time", "TimeType", st.integers(0, 86_399_999_999_999)),
    # Python's datetime range (the driver returns datetimes; years 1-9999).
    "timestamp": _native("timestamp", "DateType", st.integers(-62_135_596_800_000, 253_402_300_799_999)),
    "duration": st.builds(
        lambda m, d, n: CqlCase(
            "duration",
            driver_types.DurationType,
            Duration(m, d, n),
            f"{m}mo{d}d{n}ns",
        ),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1),
        _LONG,
    ),
}
# Types whose event value is hashable and whose driver value compares by value: map keys, set elements.
KEY_TYPES = (
    "ascii",
    "text",
    "bigint",
    "int",
    "varint",
    "decimal",
    "boolean",
    "blob",
    "uuid",
    "inet",
    "date",
    "timestamp",
)


@st.composite
def cql_case(draw: st.DrawFn, depth: int = 0, udt_counter: list[int] | None = None) -> CqlCase:
    """A CQL type (native, list, set, map, tuple, frozen user type, vector), nested up to depth 2."""
    counter = udt_counter if udt_counter is not None else [0]
    kinds = ["native"] * 3 + (["list", "set", "map", "tuple", "udt", "vector"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "native":
        return draw(NATIVE[draw(st.sampled_from(sorted(NATIVE)))])
    if kind == "vector":
        size = draw(st.integers(1, 4))
        floats = draw(
            st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=size, max_size=size)
        )
        driver = driver_types.lookup_casstype(f"{_MARSHAL}VectorType({_MARSHAL}FloatType, {size})")
        return CqlCase(f"vector<float, {size}>", driver, floats, floats, key_is_value=False)
    if kind in ("list", "set"):
        if kind == "set":
            element = draw(NATIVE[draw(st.sampled_from(KEY_TYPES))])
            # Unique by value (1.5 and 1.50 are one element to Cassandra too), in the order the
            # driver returns a set in (it sorts Python values; Cassandra sends its own order).
            elements = draw(st.lists(NATIVE[_name(element.text)], max_size=4, unique_by=lambda c: c.event_value))
            elements.sort(key=lambda c: c.driver_value)
        else:
            element = draw(cql_case(depth + 1, counter))
            elements = [element, *draw(st.lists(_same_type(element, depth + 1, counter), max_size=3))]
        driver = (driver_types.ListType if kind == "list" else driver_types.SetType).apply_parameters([element.driver])
        return CqlCase(
            f"frozen<{kind}<{element.text}>>",
            driver,
            [e.driver_value for e in elements],
            [e.event_value for e in elements],
            _user_types(element, *elements),
            key_is_value=False,
        )
    if kind == "map":
        key_type = draw(st.sampled_from(KEY_TYPES))
        value = draw(cql_case(depth + 1, counter))
        keys = draw(st.lists(NATIVE[key_type], max_size=4, unique_by=lambda c: c.event_value))
        values = [draw(_same_type(value, depth + 1, counter)) for _ in keys]
        driver = driver_types.MapType.apply_parameters([DRIVER_TYPES[key_type], value.driver])
        return CqlCase(
            f"frozen<map<{key_type}, {value.text}>>",
            driver,
            {k.driver_value: v.driver_value for k, v in zip(keys, values, strict=True)},
            {k.event_value: v.event_value for k, v in zip(keys, values, strict=True)},
            _user_types(value, *values),
            key_is_value=False,
        )
    members = draw(st.lists(cql_case(depth + 1, counter), min_size=1, max_size=3))
    present = [draw(st.booleans()) for _ in members]  # a member may be null
    if kind == "tuple":
        driver = driver_types.TupleType.apply_parameters([m.driver for m in members])
        return CqlCase(
            f"frozen<tuple<{', '.join(m.text for m in members)}>>",
            driver,
            tuple(m.driver_value if p else None for m, p in zip(members, present, strict=True)),
            {f"f{i}": m.event_value if p else None for i, (m, p) in enumerate(zip(members, present, strict=True))},
            _user_types(*members),
            key_is_value=False,
        )
    counter[0] += 1
    name = f"udt{counter[0]}"
    fields = [f"field_{i}" for i in range(len(members))]
    # A driver keyspace per class: the driver caches user-type classes by keyspace and name.
    driver = driver_types.UserType.make_udt_class(
        f"ks{next(_DRIVER_KEYSPACES)}", name, fields, [m.driver for m in members]
    )
    row = namedtuple(name, fields)  # type: ignore[misc]
    definition = UserType(name, tuple((f, m.text) for f, m in zip(fields, members, strict=True)))
    return CqlCase(
        f"frozen<{name}>",
        driver,
        row(*(m.driver_value if p else None for m, p in zip(members, present, strict=True))),
        {f: m.event_value if p else None for f, m, p in zip(fields, members, present, strict=True)},
        (*_user_types(*members), definition),
        key_is_value=False,
    )


def _name(text: str) -> str:
    return text.split("<", maxsplit=1)[0]


def _same_type(case: CqlCase, depth: int, counter: list[int]) -> st.SearchStrategy[CqlCase]:
    """More values of ``case``'s type (for collections): natives drawn afresh, others repeated."""
    if _name(case.text) in NATIVE:
        return NATIVE[_name(case.text)]
    return st.just(case)


def _user_types(*cases: CqlCase) -> tuple[UserType, ...]:
    found: dict[str, UserType] = {}
    for case in cases:
        for user_type in case.user_types:
            found.setdefault(user_type.name, user_type)
    return tuple(found.values())


def date_days(value: Any) -> int:
    return (value - _EPOCH).days if isinstance(value, dt.date) else int(value)


@st.composite
def cql_rows(draw: st.DrawFn, max_columns: int = 4) -> list[CqlCase]:
    """Columns of one table: user types are named once per table (udt1, udt2...)."""
    counter = [0]
    return draw(st.lists(cql_case(0, counter), min_size=1, max_size=max_columns))
