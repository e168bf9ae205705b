"""TiKV API V2 encodings: RawKV keys and values, memcomparable bytes, timestamps.

From the API V2 RFC and kvproto's ``APIVersion`` documentation:

* a RawKV key on the wire is ``r`` + the keyspace id (3 bytes, big-endian) + the user key;
* in storage, and in region boundaries PD reports, that key is memcomparable-encoded (groups of
  8 bytes, each followed by ``0xFF`` minus the number of zero pad bytes in it), and storage
  appends the write's timestamp, bitwise-not, big-endian, so newer versions sort first;
* a stored value is the user value, then the expire time (u64 big-endian, seconds since the
  epoch) when the meta byte's ``0x01`` bit is set, then the meta byte (``0x02``: deleted);
* a timestamp (TSO) is the physical time in milliseconds shifted left 18 bits, plus a logical
  counter.

Under API V1 keys travel as they are and PD's region boundaries are the raw keys:
:class:`KeyCodec` hides that difference from the clients.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdcflow.sources.tikv_client.exceptions import KeyDecodeError, ValueDecodeError

__all__ = [
    "LOGICAL_BITS",
    "MAX_KEYSPACE_ID",
    "META_DELETE",
    "META_EXPIRE_TS",
    "KeyCodec",
    "RawValue",
    "compose_ts",
    "decode_memcomparable",
    "decode_raw_value",
    "decode_storage_key",
    "encode_memcomparable",
    "encode_raw_value",
    "encode_storage_key",
    "physical_ms",
    "ts_to_us",
]

LOGICAL_BITS = 18
MAX_KEYSPACE_ID = (1 << 24) - 1
RAW_PREFIX = b"r"
RAW_END = b"s"  # the first key after every RawKV key
META_EXPIRE_TS = 0x01
META_DELETE = 0x02
_KNOWN_META = META_EXPIRE_TS | META_DELETE
_GROUP = 8
_MARKER = 0xFF
_PAD = b"\x00" * _GROUP
_U64 = struct.Struct(">Q")
_MASK64 = (1 << 64) - 1


# --- timestamps ------------------------------------------------------------------------------


def compose_ts(physical_ms: int, logical: int = 0) -> int:
    """A TSO timestamp from its physical milliseconds and logical counter."""
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def ts_to_us(ts: int) -> int:
    """The timestamp's physical part in microseconds since the epoch (the logical part dropped)."""
    return (ts >> LOGICAL_BITS) * 1000


# --- memcomparable bytes ---------------------------------------------------------------------


def encode_memcomparable(data: bytes) -> bytes:
    """Groups of 8 bytes, each followed by 0xFF minus its zero padding; always one padded group last."""
    out = bytearray()
    length = len(data)
    for index in range(0, length + 1, _GROUP):
        group = data[index : index + _GROUP]
        pad = _GROUP - len(group)
        out += group
        if pad:
            out += _PAD[:pad]
        out.append(_MARKER - pad)
    return bytes(out)


def decode_memcomparable(encoded: bytes) -> tuple[bytes, bytes]:
    """The decoded bytes and what follows them in ``encoded``."""
    out = bytearray()
    offset = 0
    while True:
        group = encoded[offset : offset + _GROUP + 1]
        if len(group) < _GROUP + 1:
            raise KeyDecodeError(encoded, "memcomparable group is truncated")
        pad = _MARKER - group[_GROUP]
        if pad > _GROUP:
            raise KeyDecodeError(encoded, f"memcomparable marker {group[_GROUP]:#x} is invalid")
        offset += _GROUP + 1
        if pad == 0:
            out += group[:_GROUP]
            continue
        if any(group[_GROUP - pad : _GROUP]):
            raise KeyDecodeError(encoded, "memcomparable padding is not zero")
        out += group[: _GROUP - pad]
        return bytes(out), encoded[offset:]


def encode_storage_key(key: bytes, ts: int) -> bytes:
    """The key as TiKV stores a version of it: memcomparable key, then the bitwise-not timestamp."""
    return encode_memcomparable(key) + _U64.pack(~ts & _MASK64)


def decode_storage_key(encoded: bytes) -> tuple[bytes, int]:
    key, rest = decode_memcomparable(encoded)
    if len(rest) != 8:
        raise KeyDecodeError(encoded, f"expected an 8-byte timestamp after the key, found {len(rest)} bytes")
    return key, ~_U64.unpack(rest)[0] & _MASK64


# --- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawValue:
    """A stored RawKV value: what the user wrote, when it expires, whether it is a deletion."""

    user_value: bytes
    expire_ts: int | None = None
    is_delete: bool = False


def encode_raw_value(value: RawValue) -> bytes:
    meta = 0
    tail = b""
    if value.expire_ts is not None:
        meta |= META_EXPIRE_TS
        tail = _U64.pack(value.expire_ts)
    if value.is_delete:
        meta |= META_DELETE
    return value.user_value + tail + bytes((meta,))


def decode_raw_value(encoded: bytes) -> RawValue:
    if not encoded:
        raise ValueDecodeError(encoded, "a stored value has at least its meta byte")
    meta = encoded[-1]
    if meta & ~_KNOWN_META:
        raise ValueDecodeError(encoded, f"unknown meta flag bits {meta & ~_KNOWN_META:#04x}")
    end = len(encoded) - 1
    expire_ts = None
    if meta & META_EXPIRE_TS:
        if end < 8:
            raise ValueDecodeError(encoded, "the expire-time flag is set but the value has no 8-byte expire time")
        expire_ts = _U64.unpack_from(encoded, end - 8)[0]
        end -= 8
    return RawValue(encoded[:end], expire_ts, bool(meta & META_DELETE))


# --- keys per API version --------------------------------------------------------------------


@dataclass(frozen=True)
class KeyCodec:
    """How user keys become request keys and region keys for one API version and keyspace.

    ``api_version`` 2: request keys are ``r`` + keyspace id + user key and regions are bounded by
    their memcomparable encoding. ``api_version`` 1: keys are the user keys, boundaries raw.
    """

    api_version: int = 2
    keyspace_id: int = 0

    def __post_init__(self) -> None:
        if self.api_version not in (1, 2):
            raise ValueError(f"api_version must be 1 or 2, not {self.api_version}")
        if not 0 <= self.keyspace_id <= MAX_KEYSPACE_ID:
            raise ValueError(f"keyspace_id must be within 0..{MAX_KEYSPACE_ID}, not {self.keyspace_id}")

    @property
    def prefix(self) -> bytes:
        return RAW_PREFIX + self.keyspace_id.to_bytes(3, "big") if self.api_version == 2 else b""

    def request_key(self, user_key: bytes) -> bytes:
        return self.prefix + user_key

    def user_key(self, request_key: bytes) -> bytes:
        """The user key of a key TiKV returned; :class:`KeyDecodeError` if it is not in this keyspace."""
        prefix = self.prefix
        if not request_key.startswith(prefix):
            raise KeyDecodeError(request_key, f"not a RawKV key of keyspace {self.keyspace_id} (prefix {prefix!r})")
        return request_key[len(prefix) :]

    def keyspace_of(self, request_key: bytes) -> int | None:
        """The keyspace id a V2 RawKV key names, or None when it is not a RawKV key."""
        if len(request_key) < 4 or request_key[:1] != RAW_PREFIX:
            return None
        return int.from_bytes(request_key[1:4], "big")

    def request_range(self, start: bytes, end: bytes) -> tuple[bytes, bytes]:
        """User range [start, end) as request keys; an empty ``end`` is the end of the keyspace.

        The last keyspace ends where RawKV's key mode does, at ``s``: TiKV refuses a range
        ending at ``s\x00\x00\x00`` (tikv/tikv components/api_version/src/api_v2.rs
        ``parse_range_mode`` needs the end's first byte to be the start's, or the end to be
        exactly the byte after it)."""
        prefix = self.prefix
        if end:
            return prefix + start, prefix + end
        if self.api_version == 1:
            return start, b""
        if self.keyspace_id == MAX_KEYSPACE_ID:
            return prefix + start, RAW_END
        return prefix + start, RAW_PREFIX + (self.keyspace_id + 1).to_bytes(3, "big")

    def region_key(self, request_key: bytes) -> bytes:
        """A request key as PD bounds regions (empty stays empty: the start or end of everything)."""
        if self.api_version == 1 or not request_key:
            return request_key
        return encode_memcomparable(request_key)

    def region_range(self, start: bytes, end: bytes) -> tuple[bytes, bytes]:
        """User range [start, end) in region-key space."""
        request_start, request_end = self.request_range(start, end)
        return self.region_key(request_start), self.region_key(request_end)
