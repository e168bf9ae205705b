"""A CDC table's options (TTL, images, delta mode) from where ScyllaDB keeps them.

Since ScyllaDB 4.0 a table's CDC options are its ``cdc`` schema extension, the blob under key
``'cdc'`` of ``system_schema.tables.extensions`` (``system_schema.scylla_tables.cdc`` is always
empty: scylladb ``db/schema_tables.cc`` line 1663). The blob is the IDL serialization of a
``std::map<sstring, sstring>`` (``cdc/cdc_extension.hh``): a little-endian ``uint32`` count, then
per entry a key and a value, each a little-endian ``uint32`` length and that many UTF-8 bytes.
ScyllaDB reads the map case-insensitively and refuses keys and values it does not know
(``cdc/log.cc`` ``cdc::options::options``); so does :func:`parse_cdc_extension`.

The source asks a :class:`CdcOptionsLookup` for a table's options: the seam between "what the
options are" and "where the bytes come from". :class:`SchemaTablesLookup`, the one the source
uses, reads the bytes from ``<schema_keyspace>.tables`` (``system_schema`` on ScyllaDB; a test
cluster that cannot write ``system_schema`` serves the same bytes from a keyspace of its own).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cdcflow.sources.scylla_cdc.exceptions import CdcMetadataUnavailableError, CdcOptionsError

__all__ = ["CdcOptions", "CdcOptionsLookup", "SchemaTablesLookup", "parse_cdc_extension"]

_LENGTH = struct.Struct("<I")
_TRUE, _FALSE = ("true", "1"), ("false", "0")


@dataclass(frozen=True, slots=True)
class CdcOptions:
    """``cdc::options`` (``cdc/cdc_options.hh``): defaults are ScyllaDB's (a TTL of 86400 s)."""

    enabled: bool = False
    preimage: bool | Literal["full"] = False
    postimage: bool = False
    delta: Literal["full", "keys"] = "full"
    ttl_s: int = 86_400

    @property
    def log_ttl_us(self) -> int | None:
        """How long the log keeps a row, in µs; None for a TTL of 0 (rows never expire)."""
        return self.ttl_s * 1_000_000 if self.ttl_s > 0 else None


class CdcOptionsLookup(Protocol):
    """Where the source learns a table's CDC options."""

    def cdc_options(self, keyspace: str, table: str) -> CdcOptions | None:
        """The table's options; None when the table has no ``cdc`` extension (CDC never enabled,
        or a server that keeps them elsewhere)."""
        ...


def _read_map(raw: bytes, where: str) -> dict[str, str]:
    def take(offset: int, size: int) -> bytes:
        if offset + size > len(raw):
            raise CdcOptionsError(
                f"{where}: the cdc schema extension ends at byte {len(raw)}, inside a field that needs "
                f"{size} bytes from byte {offset}"
            )
        return raw[offset : offset + size]

    (count,) = _LENGTH.unpack(take(0, 4))
    offset = 4
    found: dict[str, str] = {}
    for _ in range(count):
        pair = []
        for _part in range(2):
            (size,) = _LENGTH.unpack(take(offset, 4))
            try:
                pair.append(take(offset + 4, size).decode())
            except UnicodeDecodeError as exc:
                raise CdcOptionsError(f"{where}: a cdc option at byte {offset} is not UTF-8") from exc
            offset += 4 + size
        found[pair[0]] = pair[1]
    if offset != len(raw):
        raise CdcOptionsError(f"{where}: {len(raw) - offset} bytes follow the cdc schema extension's {count} options")
    return found


def _flag(key: str, value: str, where: str) -> bool:
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise CdcOptionsError(f"{where}: cdc option {key!r} is {value!r}, not true or false")


def parse_cdc_extension(raw: bytes, where: str = "cdc extension") -> CdcOptions:
    """The options a ``cdc`` schema extension blob holds; :class:`CdcOptionsError` names what is
    wrong (``where``: the table, for the message)."""
    enabled, postimage = False, False
    image: bool | Literal["full"] = False
    delta: Literal["full", "keys"] = "full"
    ttl_s = 86_400
    for original_key, original_value in _read_map(raw, where).items():
        key, value = original_key.lower(), original_value.lower()
        if key == "enabled":
            enabled = _flag(key, value, where)
        elif key == "preimage":
            image = "full" if value == "full" else _flag(key, value, where)
        elif key == "postimage":
            postimage = _flag(key, value, where)
        elif key == "delta":
            if value not in ("full", "keys"):
                raise CdcOptionsError(f"{where}: cdc option 'delta' is {original_value!r}, not full or keys")
            delta = "keys" if value == "keys" else "full"
        elif key == "ttl":
            if not original_value.strip().lstrip("+-").isdigit() or int(original_value) < 0:
                raise CdcOptionsError(f"{where}: cdc option 'ttl' is {original_value!r}, not seconds >= 0")
            ttl_s = int(original_value)
        elif key in ("enable_requested", "tablet_merge_blocked"):
            _flag(key, value, where)  # Alternator's, checked and not used here
        else:
            raise CdcOptionsError(f"{where}: unknown cdc option {original_key!r}")
    return CdcOptions(enabled, image, postimage, delta, ttl_s)


class SchemaTablesLookup:
    """Options from ``<keyspace>.tables.extensions['cdc']`` (``system_schema`` by default), read
    at the execution profile given (schema tables are node-local: one replica answers)."""

    def __init__(self, session: Any, keyspace: str, profile: object) -> None:
        self._session = session
        self._keyspace = keyspace
        self._profile = profile

    def cdc_options(self, keyspace: str, table: str) -> CdcOptions | None:
        try:
            rows = list(
                self._session.execute(
                    f"SELECT extensions FROM {self._keyspace}.tables WHERE keyspace_name = %s AND table_name = %s",
                    (keyspace, table),
                    execution_profile=self._profile,
                )
            )
        except Exception as exc:
            raise CdcMetadataUnavailableError(
                f"reading {self._keyspace}.tables for {keyspace}.{table}: {type(exc).__name__}: {exc}"
            ) from exc
        extensions: Mapping[str, bytes] | None = rows[0][0] if rows else None
        raw = (extensions or {}).get("cdc")
        if raw is None:
            return None
        return parse_cdc_extension(bytes(raw), f"{keyspace}.{table} ({self._keyspace}.tables.extensions['cdc'])")
