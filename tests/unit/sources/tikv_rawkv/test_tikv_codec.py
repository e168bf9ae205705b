"""API V2 codec and protocol messages against byte strings computed by hand from the public specs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdcflow.sources.tikv_client.codec import (
    KeyCodec,
    RawValue,
    compose_ts,
    decode_memcomparable,
    decode_raw_value,
    decode_storage_key,
    encode_memcomparable,
    encode_raw_value,
    encode_storage_key,
    physical_ms,
    ts_to_us,
)
from cdcflow.sources.tikv_client.exceptions import KeyDecodeError, ValueDecodeError
from cdcflow.sources.tikv_client.proto import cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, pdpb_pb2


def test_memcomparable_groups_and_padding_markers() -> None:
    assert encode_memcomparable(b"") == bytes(8) + b"\xf7"
    assert encode_memcomparable(b"abc") == b"abc" + bytes(5) + b"\xfa"
    assert encode_memcomparable(b"12345678") == b"12345678\xff" + bytes(8) + b"\xf7"
    assert encode_memcomparable(b"123456789") == b"12345678\xff9" + bytes(7) + b"\xf8"
    # TiKV's own test case: `r` + keyspace 0x020304 is four bytes padded by four.
    assert encode_memcomparable(b"r\x02\x03\x04") == bytes([ord("r"), 2, 3, 4, 0, 0, 0, 0, 0xFB])


def test_storage_key_appends_the_bitwise_not_timestamp_big_endian() -> None:
    assert encode_storage_key(b"r\x00\x00\x01k", 10) == b"r\x00\x00\x01k\x00\x00\x00\xfc" + b"\xff" * 7 + b"\xf5"
    assert decode_storage_key(b"r\x00\x00\x01k\x00\x00\x00\xfc" + b"\xff" * 7 + b"\xf5") == (b"r\x00\x00\x01k", 10)


def test_value_meta_byte_expire_time_and_delete_flag() -> None:
    assert encode_raw_value(RawValue(b"\x12\x34\x56")) == b"\x12\x34\x56\x00"
    with_ttl = b"\x12\x34\x56" + b"\x00" * 6 + b"\xff\xff" + b"\x01"
    assert encode_raw_value(RawValue(b"\x12\x34\x56", expire_ts=0xFFFF)) == with_ttl
    assert decode_raw_value(with_ttl) == RawValue(b"\x12\x34\x56", 0xFFFF, False)
    assert encode_raw_value(RawValue(b"", is_delete=True)) == b"\x02"
    assert decode_raw_value(b"\x02") == RawValue(b"", None, True)


@pytest.mark.parametrize(
    ("encoded", "reason"),
    [(b"", "at least its meta byte"), (b"v\x04", "unknown meta flag"), (b"v\x00\x01", "no 8-byte expire time")],
)
def test_undecodable_values_name_the_problem(encoded: bytes, reason: str) -> None:
    with pytest.raises(ValueDecodeError, match=reason):
        decode_raw_value(encoded)


@pytest.mark.parametrize(
    "encoded",
    [b"abc", b"abc\x00\x00\x00\x00\x00\xf6", b"abc\x00\x01\x00\x00\x00\xfa", b"r\x02\x03\x04\x05\x06\x07\x08\xf6"],
)
def test_malformed_memcomparable_bytes_are_refused(encoded: bytes) -> None:
    with pytest.raises(KeyDecodeError):
        decode_memcomparable(encoded)


def test_tso_layout_is_physical_milliseconds_shifted_by_18_bits() -> None:
    assert compose_ts(1, 0) == 262_144
    assert compose_ts(1_700_000_000_000, 5) == 1_700_000_000_000 * 262_144 + 5
    assert physical_ms(compose_ts(1_700_000_000_123, 77)) == 1_700_000_000_123
    assert ts_to_us(compose_ts(1_700_000_000_123, 77)) == 1_700_000_000_123_000


def test_key_codec_per_api_version() -> None:
    v2 = KeyCodec(2, keyspace_id=1)
    assert v2.request_key(b"k") == b"r\x00\x00\x01k"
    assert v2.user_key(b"r\x00\x00\x01k") == b"k"
    assert v2.request_range(b"", b"") == (b"r\x00\x00\x01", b"r\x00\x00\x02")
    assert v2.region_range(b"", b"") == (b"r\x00\x00\x01\x00\x00\x00\x00\xfb", b"r\x00\x00\x02\x00\x00\x00\x00\xfb")
    assert v2.keyspace_of(b"r\x00\x01\x00k") == 256
    with pytest.raises(KeyDecodeError, match="keyspace 1"):
        v2.user_key(b"r\x00\x00\x02k")
    v1 = KeyCodec(1)
    assert v1.request_key(b"k") == b"k"
    assert v1.region_range(b"a", b"") == (b"a", b"")
    with pytest.raises(ValueError, match="keyspace_id"):
        KeyCodec(2, keyspace_id=1 << 24)
    # The last keyspace ends where RawKV's key mode ends: TiKV refuses b"s\x00\x00\x00" as a
    # range end (components/api_version/src/api_v2.rs parse_range_mode), it takes b"s".
    assert KeyCodec(2, keyspace_id=0xFFFFFF).request_range(b"", b"") == (b"r\xff\xff\xff", b"s")


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_memcomparable_preserves_order_and_round_trips(a: bytes, b: bytes) -> None:
    ea, eb = encode_memcomparable(a), encode_memcomparable(b)
    assert (a < b) == (ea < eb)
    assert decode_memcomparable(ea + b"tail") == (a, b"tail")


@given(st.binary(max_size=24), st.binary(max_size=24), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_storage_keys_sort_by_key_then_newest_version_first(a: bytes, b: bytes, ts_a: int, ts_b: int) -> None:
    ka, kb = encode_storage_key(a, ts_a), encode_storage_key(b, ts_b)
    if a != b:
        assert (a < b) == (ka < kb)
    elif ts_a != ts_b:
        assert (ts_a > ts_b) == (ka < kb)
    assert decode_storage_key(ka) == (a, ts_a)


@given(st.binary(max_size=64), st.one_of(st.none(), st.integers(0, 2**64 - 1)), st.booleans())
def test_raw_values_round_trip(user_value: bytes, expire_ts: int | None, is_delete: bool) -> None:
    value = RawValue(user_value, expire_ts, is_delete)
    assert decode_raw_value(encode_raw_value(value)) == value


def test_change_data_request_fields_match_cdcpb_numbers() -> None:
    request = cdcpb_pb2.ChangeDataRequest(
        region_id=2,
        checkpoint_ts=5,
        request_id=7,
        kv_api=cdcpb_pb2.ChangeDataRequest.RawKV,
        register=cdcpb_pb2.ChangeDataRequest.Register(),
    )
    # region_id #2, checkpoint_ts #4, request_id #7 varints; register #9 empty message; kv_api #11 = 1.
    assert request.SerializeToString() == bytes.fromhex("1002 2005 3807 4a00 5801")


def test_change_data_event_parses_a_resolved_ts_event() -> None:
    # events #1 = Event{region_id #1 = 3, resolved_ts #6 = 100, request_id #7 = 7}
    event = cdcpb_pb2.ChangeDataEvent.FromString(bytes.fromhex("0a06 0803 3064 3807"))
    assert (event.events[0].region_id, event.events[0].resolved_ts, event.events[0].request_id) == (3, 100, 7)
    assert event.events[0].WhichOneof("event") == "resolved_ts"
    # resolved_ts #2 = ResolvedTs{regions #1 = [3, 4] packed, ts #2 = 9}
    batched = cdcpb_pb2.ChangeDataEvent.FromString(bytes.fromhex("1206 0a02 0304 1009"))
    assert (list(batched.resolved_ts.regions), batched.resolved_ts.ts) == ([3, 4], 9)


def test_raw_batch_put_carries_api_version_keyspace_and_ttls() -> None:
    request = kvrpcpb_pb2.RawBatchPutRequest(
        context=kvrpcpb_pb2.Context(api_version=kvrpcpb_pb2.V2, keyspace_id=0),
        pairs=[kvrpcpb_pb2.KvPair(key=b"k", value=b"v")],
        ttls=[60],
    )
    # context #1 {api_version #21 = 2 (tag a801), keyspace_id #32 = 0 present (tag 8002)};
    # pairs #2 {key #2 "k", value #3 "v"}; ttls #6 packed [60].
    assert request.SerializeToString() == bytes.fromhex("0a06 a80102 800200 1206 12016b 1a0176 3201 3c")


def test_update_service_gc_safepoint_matches_pdpb_numbers() -> None:
    request = pdpb_pb2.UpdateServiceGCSafePointRequest(service_id=b"s", TTL=86_400, safe_point=9)
    assert request.SerializeToString() == bytes.fromhex("120173 1880a305 2009")


def test_region_error_variants_and_pd_error_types_match_kvproto_numbers() -> None:
    # kvproto errorpb.Error: raft_entry_too_large #9 {region_id #1, entry_size #2}; not a oneof, so
    # a message and a variant travel together; undetermined_result #22 (two-byte tag b201).
    error = errorpb_pb2.Error(
        message="m",
        raft_entry_too_large=errorpb_pb2.RaftEntryTooLarge(region_id=1, entry_size=2),
        undetermined_result=errorpb_pb2.UndeterminedResult(message="u"),
    )
    assert error.SerializeToString() == bytes.fromhex("0a016d 4a04 0801 1002 b20103 0a0175")
    # kvproto pdpb.ErrorType: INVALID_VALUE = 10, REGIONS_NOT_CONTAIN_ALL_KEY_RANGE = 12.
    assert (pdpb_pb2.INVALID_VALUE, pdpb_pb2.REGIONS_NOT_CONTAIN_ALL_KEY_RANGE) == (10, 12)
    # kvrpcpb.KvPair: error #1 = KeyError{abort #3}, the key left empty (a request-level error).
    pair = kvrpcpb_pb2.KvPair(error=kvrpcpb_pb2.KeyError(abort="x"))
    assert pair.SerializeToString() == bytes.fromhex("0a03 1a0178")


def test_committed_protobuf_modules_match_the_protos() -> None:
    from cdcflow.sources.tikv_client.proto.generate import stale_modules

    assert stale_modules() == [], "run python -m cdcflow.sources.tikv_client.proto.generate"
