"""How ScyllaDB keeps a table's CDC options: ``system_schema.tables.extensions['cdc']``, from its code.

Since 4.0 the options live in the table's schema extensions (``system_schema.tables``'s
``extensions map<text, blob>``, scylladb ``db/schema_tables.cc`` line 267; written at lines
1579-1587 as ``extension->serialize()``), and ``system_schema.scylla_tables.cdc`` is always empty
(line 1663). The ``cdc`` extension's bytes are ``ser::serialize_to_buffer`` of
``options::to_map()`` (``cdc/cdc_extension.hh`` lines 38-40): a ``std::map<sstring, sstring>``
written as a little-endian ``uint32`` count, then per entry in key order the key and the value,
each a little-endian ``uint32`` length and its bytes (``serializer_impl.hh`` lines 380-398 and
658-676). ``to_map()`` (``cdc/log.cc`` lines 483-505) holds ``enabled``, ``preimage``
(``false``/``true``/``full``), ``postimage``, ``delta`` (``full``/``keys``) and ``ttl`` (seconds).

A Cassandra node refuses writes to its ``system_schema``: the stand-in keeps a table of the same
name and columns, ``<prefix>_system_schema.tables``, and the source looks there when its
``schema_keyspace`` says so.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Literal

__all__ = ["SCHEMA_TABLES_DDL", "cdc_extension_bytes", "cdc_options_map"]

SCHEMA_TABLES_DDL = (
    "CREATE TABLE IF NOT EXISTS {keyspace}.tables (keyspace_name text, table_name text, "
    "extensions frozen<map<text, blob>>, PRIMARY KEY (keyspace_name, table_name))"
)
_LENGTH = struct.Struct("<I")


def cdc_options_map(
    *,
    enabled: bool = True,
    preimage: bool | Literal["full"] = False,
    postimage: bool = False,
    delta: Literal["full", "keys"] = "full",
    ttl_s: int = 86_400,
) -> dict[str, str]:
    """``cdc::options::to_map()`` of a table's options."""
    image = "full" if preimage == "full" else ("true" if preimage else "false")
    return {
        "enabled": "true" if enabled else "false",
        "preimage": image,
        "postimage": "true" if postimage else "false",
        "delta": delta,
        "ttl": str(ttl_s),
    }


def cdc_extension_bytes(options: Mapping[str, str]) -> bytes:
    """``cdc_extension::serialize()``: the map, its entries in key order (a ``std::map``)."""
    parts = [_LENGTH.pack(len(options))]
    for key in sorted(options, key=str.encode):
        for text in (key, options[key]):
            encoded = text.encode()
            parts += [_LENGTH.pack(len(encoded)), encoded]
    return b"".join(parts)
