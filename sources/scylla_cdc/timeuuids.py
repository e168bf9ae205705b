"""``cdc$time`` values: version 1 UUIDs whose timestamp is the base write's, in microseconds.

A time UUID counts 100 ns intervals since 1582-10-15; ScyllaDB puts the write timestamp (µs) times
ten there and random bits in the rest. The smallest and largest UUIDs of a given microsecond bound
range queries (``"cdc$time" > ? AND "cdc$time" <= ?``): Cassandra and ScyllaDB compare time UUIDs
by timestamp first, then the low 8 bytes as signed bytes, so ``0x80`` bytes are the least and
``0x7f`` bytes the greatest tail.
"""

from __future__ import annotations

import os
import uuid

__all__ = ["max_timeuuid", "micros_of", "min_timeuuid", "timeuuid_at"]

_GREGORIAN_OFFSET = 0x01B21DD213814000  # 100 ns intervals from 1582-10-15 to 1970-01-01
_MIN_TAIL = 0x8080808080808080
_MAX_TAIL = 0x7F7F7F7F7F7F7F7F


def _uuid(micros: int, tail: int) -> uuid.UUID:
    intervals = micros * 10 + _GREGORIAN_OFFSET
    time_low = intervals & 0xFFFFFFFF
    time_mid = (intervals >> 32) & 0xFFFF
    time_hi_version = ((intervals >> 48) & 0x0FFF) | 0x1000
    high = (time_low << 32) | (time_mid << 16) | time_hi_version
    return uuid.UUID(int=(high << 64) | tail)


def timeuuid_at(micros: int, tail: int | None = None) -> uuid.UUID:
    """A time UUID for ``micros`` (µs since the epoch) with a random (or given) 64-bit tail,
    variant bits set as RFC 4122 requires."""
    bits = int.from_bytes(os.urandom(8), "big") if tail is None else tail
    bits = (bits & 0x3FFFFFFFFFFFFFFF) | 0x8000000000000000
    return _uuid(micros, bits)


def min_timeuuid(micros: int) -> uuid.UUID:
    """The smallest time UUID of microsecond ``micros``."""
    return _uuid(micros, _MIN_TAIL)


def max_timeuuid(micros: int) -> uuid.UUID:
    """The largest time UUID of microsecond ``micros``."""
    return _uuid(micros, _MAX_TAIL)


def micros_of(value: uuid.UUID) -> int:
    """The timestamp of a time UUID, in µs since the epoch."""
    return (value.time - _GREGORIAN_OFFSET) // 10
