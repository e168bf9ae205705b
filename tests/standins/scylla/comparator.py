"""The clustering comparator: the order ScyllaDB keeps a partition's rows in, from its code.

A mutation's clustered rows are visited in the schema's clustering order (scylladb
``cdc/change_visitor.hh`` lines 61-69: "for each clustering key"), which decides both the log
rows' ``cdc$batch_seq_no`` and what ``cdc/split.cc`` ``should_split_visitor`` sees first. The
order compares clustering columns one by one with their type's comparator (``types/types.cc``
``compare_visitor``, lines 2640-2790), reversed for a ``DESC`` column (``reversed_type_impl``):

* integers, floats, ``timestamp``, ``boolean``, ``decimal``, ``varint``: numerically (floats: NaN
  after everything);
* ``text``, ``ascii``, ``blob``, ``inet``, ``date``: their serialized bytes, unsigned
  (``compare_unsigned``; ``date`` is stored as days + 2**31, so that is day order);
* ``timeuuid``: the timestamp (version bits masked), then the low 8 bytes as *signed* bytes
  (``utils/UUID.hh`` ``timeuuid_tri_compare``, lines 164-173): not the UUID's byte order;
* ``uuid``: the version nibble first; two version-1 UUIDs by timestamp then low bytes unsigned
  (``uuid_tri_compare_timeuuid``, lines 200-206); others by bytes, unsigned.

Cassandra orders its clustering columns the same way (``TimeUUIDType.compareCustom``: timestamp,
then signed bytes), which ``tests/integration/test_scylla_writer.py`` checks on the real node.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import math
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

__all__ = ["clustering_sort_key", "compare_prefixes", "compare_values"]

_SIGN_FLIP = 0x8080808080808080
_NUMERIC = {"tinyint", "smallint", "int", "bigint", "counter", "varint", "decimal", "boolean", "time"}
_BYTE_ORDERED = {"text", "varchar", "ascii", "blob", "inet", "date"}


def _sign(difference: int) -> int:
    return (difference > 0) - (difference < 0)


def _uuid_bytes(value: Any) -> bytes:
    return value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes


def _timeuuid_msb(raw: bytes) -> int:
    # utils/UUID.hh timeuuid_read_msb(): time_hi (version masked), time_mid, time_low
    return ((raw[6] & 0x0F) << 56) | (raw[7] << 48) | (raw[4] << 40) | (raw[5] << 32) | int.from_bytes(raw[0:4], "big")


def _compare_timeuuid(a: bytes, b: bytes) -> int:
    by_time = _sign(_timeuuid_msb(a) - _timeuuid_msb(b))
    if by_time:
        return by_time
    low_a = int.from_bytes(a[8:], "big") ^ _SIGN_FLIP
    low_b = int.from_bytes(b[8:], "big") ^ _SIGN_FLIP
    return _sign(low_a - low_b)


def _compare_uuid(a: bytes, b: bytes) -> int:
    version_a, version_b = a[6] >> 4, b[6] >> 4
    if version_a != version_b:
        return _sign(version_a - version_b)
    if version_a == 1:
        by_time = _sign(_timeuuid_msb(a) - _timeuuid_msb(b))
        return by_time or _sign(int.from_bytes(a[8:], "big") - int.from_bytes(b[8:], "big"))
    return _sign(int.from_bytes(a, "big") - int.from_bytes(b, "big"))


def _serialized(type_text: str, value: Any) -> bytes:
    """The bytes ``compare_unsigned`` compares for a byte-ordered type."""
    if type_text in ("text", "varchar", "ascii"):
        return str(value).encode()
    if type_text == "blob":
        return bytes(value)
    if type_text == "inet":
        return ipaddress.ip_address(value).packed
    if type_text == "date":
        days = (
            value.toordinal() - datetime.date(1970, 1, 1).toordinal()
            if isinstance(value, datetime.date)
            else int(value)
        )
        return (days + (1 << 31)).to_bytes(4, "big")
    raise TypeError(f"no comparator for {type_text} values in the stand-in")


def _timestamp_ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return int(aware.timestamp() * 1000)
    return int(value)


def compare_values(type_text: str, a: Any, b: Any) -> int:
    """-1, 0 or 1: ``a`` against ``b`` as ScyllaDB's comparator of ``type_text`` orders them."""
    kind = type_text.strip().lower()
    if kind == "timeuuid":
        return _compare_timeuuid(_uuid_bytes(a), _uuid_bytes(b))
    if kind == "uuid":
        return _compare_uuid(_uuid_bytes(a), _uuid_bytes(b))
    if kind == "timestamp":
        return _sign(_timestamp_ms(a) - _timestamp_ms(b))
    if kind in ("float", "double"):
        if math.isnan(a) or math.isnan(b):
            return int(math.isnan(a)) - int(math.isnan(b))
        return (a > b) - (a < b)
    if kind in _NUMERIC:
        left, right = (Decimal(a), Decimal(b)) if kind == "decimal" else (a, b)
        return (left > right) - (left < right)
    if kind in _BYTE_ORDERED:
        left_bytes, right_bytes = _serialized(kind, a), _serialized(kind, b)
        return (left_bytes > right_bytes) - (left_bytes < right_bytes)
    raise TypeError(f"no comparator for {type_text} values in the stand-in")


def compare_prefixes(types: Sequence[str], descending: Sequence[bool], a: Sequence[Any], b: Sequence[Any]) -> int:
    """Clustering prefixes compared column by column; a prefix that is shorter and equal so far
    compares equal (the caller decides what an open bound means)."""
    for type_text, reversed_order, left, right in zip(types, descending, a, b, strict=False):
        found = compare_values(type_text, left, right)
        if found:
            return -found if reversed_order else found
    return 0


def clustering_sort_key(types: Sequence[str], descending: Sequence[bool]) -> Callable[[Sequence[Any]], Any]:
    """A ``sorted`` key putting full clustering keys in the schema's clustering order."""
    return functools.cmp_to_key(lambda a, b: compare_prefixes(types, descending, a, b))
