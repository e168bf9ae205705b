"""Tokens and shards: where a partition key lands in the ring and on which shard of a node.

* ``partition_token``: the Murmur3 token of a partition key, as Cassandra's (and ScyllaDB's)
  Murmur3Partitioner computes it: the 64-bit MurmurHash3 (x64, 128) of the serialized key, with
  ``INT64_MIN`` (reserved for "before every key") mapped to ``INT64_MAX``. A key of several
  columns is serialized as a composite: each component as a 2-byte length, the bytes, a 0 byte.
* ``shard_of``: ScyllaDB's shard-of-token rule ("biased-token-round-robin"). The token is
  unbiased to an unsigned value (``token - INT64_MIN``), its ``sharding_ignore_msb`` highest bits
  are dropped (shifted out), and the rest, read as a fraction of 2**64, is scaled by the shard
  count: ``((unbiased << ignore_msb) mod 2**64) * shards >> 64``. Learned from ScyllaDB's
  ``dht/token-sharding.hh`` and the drivers that route to shards; written here from that rule.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "MAX_TOKEN",
    "MIN_TOKEN",
    "composite_key",
    "first_token_of_shard",
    "partition_token",
    "ring_ranges",
    "shard_of",
]

MIN_TOKEN = -(1 << 63)
MAX_TOKEN = (1 << 63) - 1
_RING = 1 << 64
_MASK64 = _RING - 1
_LENGTH = struct.Struct(">H")


def composite_key(components: Sequence[bytes]) -> bytes:
    """The partition key bytes the partitioner hashes: a single component as is, several as a
    composite (length, bytes, end-of-component byte each)."""
    if len(components) == 1:
        return components[0]
    return b"".join(_LENGTH.pack(len(part)) + part + b"\x00" for part in components)


def partition_token(key: bytes) -> int:
    """The Murmur3Partitioner token of serialized partition key bytes."""
    from cassandra.murmur3 import murmur3

    token = int(murmur3(key))
    return MAX_TOKEN if token == MIN_TOKEN else token


def ring_ranges(ends: Sequence[int], index: int) -> tuple[tuple[int, int], ...]:
    """The tokens of range ``index`` of a ring cut at the sorted end tokens ``ends``, as
    ``(start, end]`` pairs in token order: ``(ends[index - 1], ends[index]]``; range 0 also holds
    every token past the last end (the ring wraps, as ``get_stream`` picks streams: scylladb
    ``cdc/metadata.cc`` lines 40-69)."""
    if index > 0:
        return ((ends[index - 1], ends[index]),)
    first = ((MIN_TOKEN, ends[0]),)
    return (*first, (ends[-1], MAX_TOKEN)) if ends[-1] < MAX_TOKEN else first


def _unbiased(token: int) -> int:
    return (token - MIN_TOKEN) & _MASK64


def shard_of(token: int, shard_count: int, sharding_ignore_msb: int) -> int:
    """The shard (0-based) owning ``token`` on a node with ``shard_count`` shards."""
    if shard_count <= 0:
        raise ValueError(f"shard_count must be positive, found {shard_count}")
    shifted = (_unbiased(token) << sharding_ignore_msb) & _MASK64
    return (shifted * shard_count) >> 64


def first_token_of_shard(after: int, up_to: int, shard: int, shard_count: int, sharding_ignore_msb: int) -> int | None:
    """The smallest token in the ring range ``(after, up_to]`` owned by ``shard``, or None.

    The range wraps around the ring when ``after >= up_to``. In unbiased coordinates the shard
    pattern repeats every ``2**(64 - ignore_msb)`` values; shard ``j`` owns the values whose offset
    ``x`` in their period satisfies ``ceil(j * P / n) <= x < ceil((j + 1) * P / n)``.
    """
    if not 0 <= shard < shard_count:
        raise ValueError(f"shard {shard} is not one of {shard_count} shards")
    low = _unbiased(after) + 1  # first unbiased value in the range
    high = _unbiased(up_to)
    if after >= up_to:
        high += _RING  # the range wraps: continue past the ring's end
    period = 1 << (64 - sharding_ignore_msb)
    begin = -(-shard * period // shard_count)
    end = -(-(shard + 1) * period // shard_count)
    if begin >= end:
        return None  # more shards than values in a period: this shard owns none
    base = low - low % period
    offset = low % period
    candidate = base + max(offset, begin) if offset < end else base + period + begin
    if candidate & _MASK64 == 0:
        # INT64_MIN is no key's token ("before all keys", scylladb ``dht/token.hh``
        # minimum_token()): past the ring's end the search starts at INT64_MIN + 1
        # (``dht/token.cc`` find_first_token_for_shard()), which shard 0 owns as well.
        candidate += 1
    if candidate > high:
        return None
    return (candidate & _MASK64) + MIN_TOKEN
