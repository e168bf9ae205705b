"""Stream IDs: the partition keys of CDC log tables (seed 000, "Stream IDs").

A stream ID is 128 bits, stored as 16 bytes, most significant first::

    128           64            26            4             0
      | <token:64> | <random:38> | <index:22> | <version:4> |

The high 64 bits are a token (signed, big-endian) in the range the stream serves, so that the log
row lands on the base row's replicas; ``index`` is the vnode the ID was created for and
``version`` is 1 for every ID ScyllaDB creates. The seed's figure labels the index/random border
27, but 4 + 22 + 38 = 64 puts it at bit 26 (ScyllaDB's ``stream_id_index_bits`` is 22).

IDs order as their bytes do ("sorted on string ordering"): unsigned, byte by byte, so the token
is the most significant part and a negative token sorts after every positive one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import total_ordering

from cdcflow.sources.scylla_cdc.exceptions import StreamIdError

__all__ = ["STREAM_ID_VERSION", "StreamId"]

STREAM_ID_VERSION = 1
_VERSION_BITS = 4
_INDEX_BITS = 22
_RANDOM_BITS = 38
_INDEX_SHIFT = _VERSION_BITS
_RANDOM_SHIFT = _VERSION_BITS + _INDEX_BITS
_PAIR = struct.Struct(">qq")
_TOKEN_AND_LOW = struct.Struct(">qQ")


@total_ordering
@dataclass(frozen=True, slots=True)
class StreamId:
    """One stream ID, kept as the 16 bytes the log table's ``cdc$stream_id`` column holds."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != 16:
            raise StreamIdError(f"a stream ID is 16 bytes, found {len(self.raw)}: {self.raw.hex()}")

    @classmethod
    def from_bytes(cls, raw: bytes | bytearray | memoryview) -> StreamId:
        return cls(bytes(raw))

    @classmethod
    def from_hex(cls, text: str) -> StreamId:
        try:
            return cls(bytes.fromhex(text.removeprefix("0x")))
        except ValueError as exc:
            raise StreamIdError(f"not a hex stream ID: {text!r}") from exc

    @classmethod
    def from_parts(cls, token: int, random_bits: int, vnode_index: int, version: int = STREAM_ID_VERSION) -> StreamId:
        """Build an ID from its fields; each must fit its width (the token is a signed 64-bit value)."""
        for name, value, bits in (
            ("random_bits", random_bits, _RANDOM_BITS),
            ("vnode_index", vnode_index, _INDEX_BITS),
            ("version", version, _VERSION_BITS),
        ):
            if not 0 <= value < 1 << bits:
                raise StreamIdError(f"{name} {value} does not fit in {bits} bits")
        if not -(1 << 63) <= token < 1 << 63:
            raise StreamIdError(f"token {token} is not a signed 64-bit value")
        low = (random_bits << _RANDOM_SHIFT) | (vnode_index << _INDEX_SHIFT) | version
        return cls(_TOKEN_AND_LOW.pack(token, low))

    @classmethod
    def from_pair(cls, first: int, second: int) -> StreamId:
        """From ScyllaDB's in-memory form, two ``int64``s (``_first`` high, ``_second`` low), as the
        seed's ``set<tuple<bigint, bigint>>`` description columns hold it."""
        try:
            return cls(_PAIR.pack(first, second))
        except struct.error as exc:
            raise StreamIdError(f"({first}, {second}) is not a pair of signed 64-bit values") from exc

    @property
    def pair(self) -> tuple[int, int]:
        first, second = _PAIR.unpack(self.raw)
        return first, second

    @property
    def token(self) -> int:
        return int(_TOKEN_AND_LOW.unpack(self.raw)[0])

    @property
    def _low(self) -> int:
        return int(_TOKEN_AND_LOW.unpack(self.raw)[1])

    @property
    def version(self) -> int:
        return self._low & ((1 << _VERSION_BITS) - 1)

    @property
    def vnode_index(self) -> int:
        return (self._low >> _INDEX_SHIFT) & ((1 << _INDEX_BITS) - 1)

    @property
    def random_bits(self) -> int:
        return self._low >> _RANDOM_SHIFT

    def hex(self) -> str:
        return self.raw.hex()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, StreamId):
            return NotImplemented
        return self.raw < other.raw

    def __repr__(self) -> str:
        return f"StreamId(0x{self.raw.hex()})"
