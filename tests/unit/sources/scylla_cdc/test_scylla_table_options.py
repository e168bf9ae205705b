"""A table's CDC options from its ``cdc`` schema extension, on bytes built here from ScyllaDB's
format (``cdc/cdc_extension.hh``: ``ser::serialize_to_buffer`` of a ``std::map<sstring, sstring>``;
``serializer_impl.hh``: a little-endian uint32 count, then per entry key and value, each a
little-endian uint32 length and its bytes), not from the stand-in's encoder."""

from __future__ import annotations

import struct

import pytest

from cdcflow.sources.scylla_cdc.exceptions import CdcOptionsError
from cdcflow.sources.scylla_cdc.table_options import CdcOptions, parse_cdc_extension


def idl_string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<I", len(encoded)) + encoded


def idl_map(entries: dict[str, str]) -> bytes:
    # a std::map iterates in key order
    return struct.pack("<I", len(entries)) + b"".join(
        idl_string(k) + idl_string(entries[k]) for k in sorted(entries, key=str.encode)
    )


def test_the_options_scylladb_writes_for_a_table() -> None:
    # cdc/log.cc to_map(): what `WITH cdc = {'enabled': true, 'preimage': 'full', 'ttl': 3600}` stores
    raw = idl_map({"enabled": "true", "preimage": "full", "postimage": "false", "delta": "full", "ttl": "3600"})
    assert raw[:4] == b"\x05\x00\x00\x00" and raw[4:8] == b"\x05\x00\x00\x00" and raw[8:13] == b"delta"
    options = parse_cdc_extension(raw)
    assert options == CdcOptions(enabled=True, preimage="full", postimage=False, delta="full", ttl_s=3600)
    assert options.log_ttl_us == 3_600_000_000


def test_keys_and_values_are_read_as_scylladb_reads_them() -> None:
    # cdc/log.cc options(map): keys and values lower-cased, "1"/"0" as true/false, ttl 0 = none
    raw = idl_map({"ENABLED": "1", "PostImage": "TRUE", "preimage": "0", "delta": "Keys", "ttl": "0"})
    options = parse_cdc_extension(raw)
    assert options == CdcOptions(enabled=True, preimage=False, postimage=True, delta="keys", ttl_s=0)
    assert options.log_ttl_us is None


def test_an_empty_map_is_cdc_never_enabled_with_the_default_ttl() -> None:
    # to_map() returns {} for options never set; the defaults are cdc_options.hh's
    assert parse_cdc_extension(struct.pack("<I", 0)) == CdcOptions(False, False, False, "full", 86_400)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (idl_map({"enabled": "true", "compaction": "x"}), "unknown cdc option 'compaction'"),
        (idl_map({"enabled": "yes"}), "'enabled' is 'yes'"),
        (idl_map({"ttl": "-5"}), "'ttl' is '-5'"),
        (idl_map({"delta": "some"}), "'delta' is 'some'"),
        (idl_map({"ttl": "60"})[:-1], "ends at byte"),
        (idl_map({"ttl": "60"}) + b"\x00", "1 bytes follow"),
        (b"\x01\x00", "ends at byte 2"),
    ],
)
def test_bytes_scylladb_would_not_write_are_refused_with_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(CdcOptionsError, match=message) as refused:
        parse_cdc_extension(raw, "ks.t")
    assert "ks.t" in str(refused.value)
