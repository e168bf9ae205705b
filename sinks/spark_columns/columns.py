"""Typed table columns from the spark engine's change rows, as the sinks that write tables with
Spark (``parquet``, ``delta``) both type them: a destination's columns merged from the row schemas
feeding it (integer and floating types widen, other disagreements are errors), each CQL type's
Spark type and the conversion of its row-JSON values, and how a decimal column is sized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cdcflow.errors import SinkError
from cdcflow.events import Column, RowSchema
from cdcflow.schemas import UNTYPED_NULL, ParsedType, map_keys_are_values, parse_cql_type

__all__ = [
    "ENVELOPE_COLUMNS",
    "TableSchemaConflictError",
    "decimal_type",
    "keep_or_widen",
    "merge_table_columns",
    "native_values",
]

ENVELOPE_COLUMNS = ("op", "ts_ms", "source_ts_us", "source_partition", "source_position", "snapshot")
"""The envelope columns a change-log table gives each change."""


class TableSchemaConflictError(SinkError):
    """Rows of one destination hold one column with two types no table column can hold both of."""


_MAX_DECIMAL_DIGITS = 38  # Spark's (and Parquet's 16-byte) decimal precision


def decimal_type(scale: int, whole_digits: int) -> str:
    if whole_digits + scale > _MAX_DECIMAL_DIGITS:
        return "string"
    return f"decimal({_MAX_DECIMAL_DIGITS},{scale})"


def keep_or_widen(earlier: str, needed: str) -> str:
    """What a column written as ``earlier`` is written as when a batch needs ``needed``: the same
    decimal while every value fits its scale, else text from then on."""
    if earlier in (needed, "string"):
        return earlier
    if needed == "string":
        return "string"
    earlier_scale = int(earlier.split(",")[1].rstrip(")"))
    needed_scale = int(needed.split(",")[1].rstrip(")"))
    return earlier if needed_scale <= earlier_scale else "string"


# Types a column may widen through when tables of one destination disagree: every value of a
# lower type is exactly a value of a higher one. Anything else is a conflict.
_WIDENING_LADDERS = (("tinyint", "smallint", "int", "bigint", "varint"), ("float", "double"))
_SAME_VALUES = {"varchar": "text", "counter": "bigint"}


def merge_table_columns(
    destination: str,
    schemas: Sequence[RowSchema],
    learned: Mapping[tuple[str, str], str] | None = None,
    conflict: type[SinkError] = TableSchemaConflictError,
    store: str = "table",
) -> list[Column]:
    """The columns of one ``store`` table (Parquet, Delta) that gets rows of ``schemas`` (several source tables routed
    to one destination, versions of one table, schemas read off values), in first-seen order.

    A column's type comes from the schemas that type it: :data:`UNTYPED_NULL` (a value that was
    null) defers to them, then to ``learned`` (what an earlier batch wrote); a column nothing types
    stays :data:`UNTYPED_NULL`. Integer and floating types widen (``int`` and ``bigint`` make
    ``bigint``); any other disagreement raises ``conflict``.
    """
    typed: dict[str, list[tuple[str, str]]] = {}  # column -> (type, table) of each schema typing it
    optional: dict[str, bool] = {}
    for schema in schemas:
        for column in schema.value_columns or schema.key_columns:
            typed.setdefault(column.name, [])
            optional[column.name] = optional.get(column.name, False) or column.optional
            if column.type != UNTYPED_NULL:
                typed[column.name].append((_SAME_VALUES.get(column.type, column.type), schema.namespace))
    merged = []
    for name, types in typed.items():
        if not types:
            known = (learned or {}).get((destination, name), UNTYPED_NULL)
            merged.append(Column(name, known, True))
            continue
        chosen, chosen_table = types[0]
        for kind, table in types[1:]:
            if kind != chosen:
                chosen = _wider(destination, name, (chosen, chosen_table), (kind, table), conflict, store)
                chosen_table = table if chosen == kind else chosen_table
        # A column some schema lacks is null in that table's rows.
        everywhere = len(types) == len(schemas)
        merged.append(Column(name, chosen, optional[name] or not everywhere))
    return merged


def _wider(
    destination: str,
    column: str,
    first: tuple[str, str],
    second: tuple[str, str],
    conflict: type[SinkError],
    store: str,
) -> str:
    for ladder in _WIDENING_LADDERS:
        if first[0] in ladder and second[0] in ladder:
            return max(first[0], second[0], key=ladder.index)
    raise conflict(
        f"destination {destination!r}: column {column!r} is {first[0]} in {first[1]} but {second[0]} in "
        f"{second[1]}; one {store} column cannot hold both. Route these tables to destinations of their own "
        "(a route transform) or rename the column in one of them"
    )


def native_values(column: Any, parsed: ParsedType, schema: RowSchema) -> Any:
    """``column`` (parsed from the row JSON) with its values in their native Spark types: bytes
    from base64, timestamps and dates from epoch numbers, map keys from JSON object keys, at any
    depth (inside lists, maps, tuples and user types)."""
    converted = _conversion(parsed, schema)
    return column if converted is None else converted(column)


def _conversion(parsed: ParsedType, schema: RowSchema) -> Any:
    """A function of a Spark column converting values of ``parsed``, or None when they parse as
    they are."""
    from pyspark.sql import functions as F  # noqa: N812

    name, arguments = parsed
    if name == "blob":
        return F.unbase64
    if name == "timestamp":
        return F.timestamp_millis
    if name == "date":
        return F.date_from_unix_date
    if name in ("list", "set", "vector"):
        element = _conversion(arguments[0], schema)
        return None if element is None else (lambda c: F.transform(c, element))
    if name == "map":
        key_type, value_type = arguments
        values = _conversion(value_type, schema)
        if not map_keys_are_values(key_type):
            entry = _fields_conversion([("key", key_type), ("value", value_type)], schema)
            return None if entry is None else (lambda c: F.transform(c, entry))
        keys = _map_key_conversion(key_type)

        def convert_map(c: Any) -> Any:
            if keys is not None:
                c = F.transform_keys(c, lambda k, _: keys(k))
            if values is not None:
                c = F.transform_values(c, lambda _, v: values(v))
            return c

        return None if keys is None and values is None else convert_map
    if name == "tuple":
        return _fields_conversion([(f"f{i}", a) for i, a in enumerate(arguments)], schema)
    user_type = schema.user_type(name)
    if user_type is not None:
        return _fields_conversion([(f, parse_cql_type(t)) for f, t in user_type.fields], schema)
    return None


def _fields_conversion(fields: list[tuple[str, ParsedType]], schema: RowSchema) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    converted = {name: _conversion(parsed, schema) for name, parsed in fields}
    if all(c is None for c in converted.values()):
        return None

    def convert_struct(c: Any) -> Any:
        members = [(f(c.getField(n)) if f is not None else c.getField(n)).alias(n) for n, f in converted.items()]
        return F.when(c.isNotNull(), F.struct(*members))

    return convert_struct


_KEY_CASTS = {"int": "int", "bigint": "bigint", "counter": "bigint", "smallint": "smallint", "tinyint": "tinyint"}
_KEY_CASTS |= {"boolean": "boolean", "float": "float", "double": "double", "time": "bigint"}


def _map_key_conversion(key: ParsedType) -> Any:
    """Map keys parse as text (JSON object keys); a key of another type is cast back."""
    from pyspark.sql import functions as F  # noqa: N812

    name = key[0]
    if name in _KEY_CASTS:
        target = _KEY_CASTS[name]
        return lambda k: k.cast(target)
    if name == "timestamp":
        return lambda k: F.timestamp_millis(k.cast("bigint"))
    if name == "date":
        return lambda k: F.date_from_unix_date(k.cast("int"))
    if name == "blob":
        return F.unbase64
    return None  # text, uuids, inet, decimals and varints stay their exact text
