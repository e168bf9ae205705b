"""The model of ScyllaDB's CDC design (the product's stream IDs, tokens and tablet histories, and
the stand-in's generations and stream sets), checked against values derived from the seed's rules
and ScyllaDB's own documentation, not against this code's outputs."""

from __future__ import annotations

import random
import uuid
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow.sources.scylla_cdc.exceptions import StreamIdError
from cdcflow.sources.scylla_cdc.stream_id import StreamId
from cdcflow.sources.scylla_cdc.tablets import StreamState, TabletStreamHistory
from cdcflow.sources.scylla_cdc.timeuuids import max_timeuuid, micros_of, min_timeuuid, timeuuid_at
from cdcflow.sources.scylla_cdc.tokens import (
    MAX_TOKEN,
    MIN_TOKEN,
    composite_key,
    first_token_of_shard,
    partition_token,
    shard_of,
)
from tests.standins.scylla.errors import StandinSetupError, WriteRejectedError
from tests.standins.scylla.generations import (
    CdcMetadata,
    TokenRangeDescription,
    TopologyDescription,
    make_new_generation_description,
    split_ring,
)
from tests.standins.scylla.tablet_streams import CLOSED, CURRENT, OPENED, TableStreams, new_tablet_streams, stream_diff

tokens = st.integers(min_value=MIN_TOKEN + 1, max_value=MAX_TOKEN)


def layout_bytes(token: int, random_bits: int, index: int, version: int) -> bytes:
    """The seed's figure as one 128-bit number: token in the high 64 bits (two's complement),
    then 38 random bits, 22 index bits and 4 version bits."""
    value = ((token % (1 << 64)) << 64) | (random_bits << 26) | (index << 4) | version
    return value.to_bytes(16, "big")


def fraction_shard(token: int, shards: int, ignore_msb: int) -> int:
    """The shard rule read as ScyllaDB's comment puts it: drop the ignored high bits of the
    unbiased token, read the rest as a fraction of the ring, scale by the shard count."""
    unbiased = token + (1 << 63)
    kept = (unbiased * (1 << ignore_msb)) % (1 << 64)
    return int(Fraction(kept, 1 << 64) * shards)


# --- stream IDs -----------------------------------------------------------------------------------


@given(tokens, st.integers(0, (1 << 38) - 1), st.integers(0, (1 << 22) - 1), st.integers(0, 15))
def test_stream_id_layout_round_trips_through_its_fields(token: int, rnd: int, index: int, version: int) -> None:
    stream = StreamId.from_parts(token, rnd, index, version)
    assert stream.raw == layout_bytes(token, rnd, index, version)
    decoded = StreamId.from_bytes(layout_bytes(token, rnd, index, version))
    assert (decoded.token, decoded.random_bits, decoded.vnode_index, decoded.version) == (token, rnd, index, version)
    first, second = decoded.pair
    assert StreamId.from_pair(first, second) == decoded
    assert first == token


def test_stream_ids_from_scyllas_documentation_decode_to_their_vnode_and_version() -> None:
    # cdc-querying-streams: rows of cdc_streams_descriptions_v2 are per vnode: indexes 0, 1, 2, 3.
    documented = {
        "7ffe0c687fcce86e0783343730000001": (0x7FFE0C687FCCE86E, 0),
        "807ae73e07dbd4122e32d36e08000011": (0x807AE73E07DBD412 - (1 << 64), 1),
        "80838c6b76e19a1c6da83d4d14000021": (0x80838C6B76E19A1C - (1 << 64), 2),
        "80c5343222b6eee636e3ed42d0000031": (0x80C5343222B6EEE6 - (1 << 64), 3),
    }
    for text, (token, index) in documented.items():
        stream = StreamId.from_hex(text)
        assert (stream.token, stream.vnode_index, stream.version) == (token, index, 1)


@given(st.lists(st.binary(min_size=16, max_size=16), min_size=2, max_size=20))
def test_stream_ids_sort_as_their_bytes_so_the_token_is_most_significant(raws: list[bytes]) -> None:
    by_number = sorted(raws, key=lambda raw: int.from_bytes(raw, "big"))
    assert [s.raw for s in sorted(StreamId(r) for r in raws)] == by_number


def test_a_negative_token_sorts_after_a_positive_one_in_byte_order() -> None:
    assert StreamId.from_parts(1, 0, 0) < StreamId.from_parts(-1, 0, 0)


@pytest.mark.parametrize("raw", [b"", b"\x00" * 15, b"\x00" * 17])
def test_a_stream_id_of_the_wrong_size_is_refused(raw: bytes) -> None:
    with pytest.raises(StreamIdError, match="16 bytes"):
        StreamId(raw)


def test_fields_that_do_not_fit_are_refused() -> None:
    with pytest.raises(StreamIdError, match="vnode_index"):
        StreamId.from_parts(0, 0, 1 << 22)
    with pytest.raises(StreamIdError, match="token"):
        StreamId.from_parts(1 << 63, 0, 0)


# --- tokens and shards -----------------------------------------------------------------------------


def test_murmur3_token_of_a_known_key() -> None:
    # Cassandra's token(1) for an int partition key, as published in its documentation.
    assert partition_token((1).to_bytes(4, "big")) == -4069959284402364209


def test_composite_key_frames_each_component() -> None:
    assert composite_key([b"\x00\x00\x00\x01"]) == b"\x00\x00\x00\x01"
    assert composite_key([b"ab", b"c"]) == b"\x00\x02ab\x00\x00\x01c\x00"


def test_shard_of_matches_the_drivers_published_vectors() -> None:
    # Values the Scylla drivers test their shard routing with (4 shards, sharding_ignore_msb 12).
    assert shard_of(-9219783007514621794, 4, 12) == 3
    assert shard_of(9222582454147032830, 4, 12) == 3


@settings(max_examples=300)
@given(tokens, st.integers(1, 128), st.integers(0, 16))
def test_shard_of_is_the_fraction_rule(token: int, shards: int, ignore_msb: int) -> None:
    assert shard_of(token, shards, ignore_msb) == fraction_shard(token, shards, ignore_msb)


@settings(max_examples=300)
@given(tokens, tokens, st.integers(1, 16), st.integers(0, 12), st.data())
def test_first_token_of_shard_is_the_first_of_that_shard_in_the_range(
    after: int, up_to: int, shards: int, ignore_msb: int, data: st.DataObject
) -> None:
    shard = data.draw(st.integers(0, shards - 1))
    found = first_token_of_shard(after, up_to, shard, shards, ignore_msb)

    def in_range(token: int) -> bool:
        return after < token <= up_to if after < up_to else token > after or token <= up_to

    period = 1 << (64 - ignore_msb)
    if found is None:
        # Then the range is shorter than a period and holds no value of this shard: its two ends
        # and everything between have other shards, which holds if no block start falls inside.
        assert (up_to - after) % (1 << 64) < period
        return
    assert in_range(found)
    assert fraction_shard(found, shards, ignore_msb) == shard
    before = found - 1 if found > MIN_TOKEN + 1 else MAX_TOKEN  # INT64_MIN is no key's token
    assert not in_range(before) or before == after or fraction_shard(before, shards, ignore_msb) != shard


def test_a_range_inside_another_shards_block_has_no_token_of_this_shard() -> None:
    # With 2 shards and no ignored bits, shard 0 owns every negative token: a range of negatives
    # holds no token of shard 1.
    assert first_token_of_shard(-1000, -10, 1, 2, 0) is None
    assert first_token_of_shard(-1000, -10, 0, 2, 0) == -999


def test_a_wrapping_range_gives_shard_zero_int64_min_plus_one_never_int64_min() -> None:
    # dht/token.cc find_first_token_for_shard(): past INT64_MAX the search restarts from
    # minimum_token() + 1; INT64_MIN is "before all keys". With 2 shards and 12 ignored bits the
    # tail (MAX - 5, MAX] belongs to shard 1, so shard 0's first token is just past the wrap.
    assert fraction_shard(MAX_TOKEN, 2, 12) == 1
    assert first_token_of_shard(MAX_TOKEN - 5, -(1 << 40), 0, 2, 12) == MIN_TOKEN + 1
    assert first_token_of_shard(MAX_TOKEN, -(1 << 40), 0, 2, 12) == MIN_TOKEN + 1
    description = make_new_generation_description([-(1 << 40), MAX_TOKEN], 2, 12, random.Random(1))
    # entry 0 is the wrapping range (MAX_TOKEN, -(1 << 40)]
    assert description.entries[0].streams[0].token == MIN_TOKEN + 1


# --- generations ------------------------------------------------------------------------------------


def three_range_description() -> TopologyDescription:
    def streams(token: int, count: int) -> tuple[StreamId, ...]:
        return tuple(StreamId.from_parts(token, j, 0) for j in range(count))

    return TopologyDescription(
        (
            TokenRangeDescription(-(1 << 62), streams(-(1 << 62), 2), 0),
            TokenRangeDescription(0, streams(0, 4), 12),
            TokenRangeDescription(1 << 62, streams(1 << 62, 1), 0),
        )
    )


@given(tokens)
def test_a_token_maps_to_its_left_open_right_closed_range_then_to_its_shard(token: int) -> None:
    description = three_range_description()
    ends = [e.token_range_end for e in description.entries]
    # (end[i-1], end[i]] for i > 0; entry 0 takes (end[-1], +inf) and (-inf, end[0]].
    index = next((i for i, end in enumerate(ends) if token <= end), 0)
    entry = description.entries[index]
    expected = entry.streams[fraction_shard(token, len(entry.streams), entry.sharding_ignore_msb)]
    assert description.stream_of(token) == expected


def test_range_ends_belong_to_their_range_and_the_ring_wraps_to_entry_zero() -> None:
    description = three_range_description()
    assert description.entry_of(0).token_range_end == 0
    assert description.entry_of(1).token_range_end == 1 << 62
    assert description.entry_of((1 << 62) + 1).token_range_end == -(1 << 62)
    assert description.entry_of(MIN_TOKEN + 1).token_range_end == -(1 << 62)


def test_unsorted_or_empty_descriptions_are_refused() -> None:
    entry = TokenRangeDescription(5, (StreamId.from_parts(5, 0, 0),))
    with pytest.raises(StandinSetupError):
        TopologyDescription((entry, entry))
    with pytest.raises(StandinSetupError):
        TopologyDescription(())


def test_generations_operate_from_their_timestamp_until_the_next() -> None:
    first, second = three_range_description(), make_new_generation_description([0], 1, 0, random.Random(1))
    metadata = CdcMetadata()
    metadata.insert(1_000, first)
    metadata.insert(5_000, second)
    assert metadata.interval_of(1_000) == (1_000, 5_000)
    assert metadata.interval_of(5_000) == (5_000, None)
    assert metadata.operating_at(999) is None
    assert metadata.get_stream(4_999, 123) == first.stream_of(123)
    assert metadata.get_stream(5_000, 123) == second.stream_of(123)


def accepting_metadata() -> CdcMetadata:
    metadata = CdcMetadata(generation_leeway_us=5_000_000)
    metadata.insert(100_000_000, three_range_description())
    metadata.insert(200_000_000, three_range_description())
    return metadata


@pytest.mark.parametrize(
    ("write", "coordinator", "accepted"),
    [
        # current generation (T = 200 s at C = 210 s): only W <= C + leeway (cdc/metadata.cc
        # get_vnode_stream() refuses ts > now + leeway)
        (214_999_999, 210_000_000, True),
        (215_000_000, 210_000_000, True),
        (215_000_001, 210_000_000, False),
        (150_000_000 + 200_000_000, 210_000_000, False),
        # a previous generation: only W > C - leeway
        (199_000_000, 201_000_000, True),
        (196_000_001, 201_000_000, True),
        (196_000_000, 201_000_000, False),
        # no generation operated that early
        (99_000_000, 100_500_000, False),
        # before the switch, a write into the next generation within the leeway
        (200_000_001, 196_000_000, True),
    ],
)
def test_writes_are_accepted_only_within_the_generation_leeway(write: int, coordinator: int, accepted: bool) -> None:
    metadata = accepting_metadata()
    if accepted:
        metadata.check_write(write, coordinator)
    else:
        with pytest.raises(WriteRejectedError):
            metadata.check_write(write, coordinator)


def test_a_prepared_generation_refuses_writes_until_its_description_arrives() -> None:
    metadata = accepting_metadata()
    metadata.prepare(300_000_000)
    with pytest.raises(WriteRejectedError, match="not known yet"):
        metadata.check_write(300_000_001, 299_000_000)
    metadata.insert(300_000_000, three_range_description())
    metadata.check_write(300_000_001, 299_000_000)


def test_a_joining_node_refines_every_vnode_and_gives_each_shard_its_own_stream() -> None:
    rng = random.Random(7)
    old_ring = split_ring(8, rng)
    new_ring = sorted(set(old_ring) | set(split_ring(8, rng)))
    old, new = (make_new_generation_description(ring, 4, 12, rng) for ring in (old_ring, new_ring))
    old_ends = [e.token_range_end for e in old.entries]
    for index, entry in enumerate(new.entries):
        after = new.entries[index - 1].token_range_end
        # each new range lies inside one old vnode: the old vnode holding its end also holds
        # the token right after its start
        first_token = after + 1 if after < MAX_TOKEN else MIN_TOKEN + 1
        assert old.entry_of(entry.token_range_end) == old.entry_of(first_token) or entry.token_range_end in old_ends
        for shard, stream in enumerate(entry.streams):
            assert stream.version == 1
            assert stream.vnode_index == index
            in_range = (after < stream.token <= entry.token_range_end) if index else True
            assert in_range
            assert fraction_shard(stream.token, 4, 12) == shard
    assert len(set(new.streams())) == 4 * len(new_ring)


# --- tablets ----------------------------------------------------------------------------------------


def test_tablet_streams_carry_their_tablets_last_tokens() -> None:
    # cdc-stream-changes: four tablets' streams start 0xbfff.., 0xffff.., 0x3fff.., 0x7fff.. .
    streams = new_tablet_streams(4, random.Random(3))
    assert [s.raw[:8].hex() for s in streams] == [
        "bfffffffffffffff",
        "ffffffffffffffff",
        "3fffffffffffffff",
        "7fffffffffffffff",
    ]
    assert all(s.version == 1 and s.vnode_index == 0 for s in streams)


def test_tablet_history_rebuilds_the_stream_set_at_any_timestamp_from_cdc_streams_rows() -> None:
    rng = random.Random(5)
    two, four = new_tablet_streams(2, rng), new_tablet_streams(4, rng)
    # what system.cdc_streams lists: the first set as current and opened, then per change the
    # current set, the closed and the opened streams
    rows = [(1_000, StreamState.CURRENT, s) for s in two] + [(1_000, StreamState.OPENED, s) for s in two]
    rows += [(9_000, StreamState.CURRENT, s) for s in four]
    rows += [(9_000, StreamState.CLOSED, s) for s in two] + [(9_000, StreamState.OPENED, s) for s in four]
    random.Random(1).shuffle(rows)
    history = TabletStreamHistory.from_rows((t, int(state), s) for t, state, s in rows)
    assert history.timestamps() == [1_000, 9_000]
    assert set(history.streams_at(999)) == set()
    assert set(history.streams_at(1_000)) == set(two) == set(history.streams_at(8_999))
    assert set(history.streams_at(9_000)) == set(four)
    lifetimes = {life.stream: (life.opened_us, life.closed_us) for life in history.lifetimes()}
    assert lifetimes == {**dict.fromkeys(two, (1_000, 9_000)), **dict.fromkeys(four, (9_000, None))}
    assert history.changes_at(9_000) == (tuple(sorted(two, key=lambda s: s.token)), tuple(four))


def test_the_stand_in_s_virtual_rows_rebuild_into_its_own_stream_sets() -> None:
    # db/virtual_tables.cc cdc_streams: per timestamp the current set, then closed and opened
    # (the first timestamp lists every stream as opened); the product's history reads them back.
    rng = random.Random(9)
    streams = TableStreams.starting(1_000, new_tablet_streams(2, rng))
    streams.resize(9_000, new_tablet_streams(4, rng))
    history = TabletStreamHistory.from_rows(streams.virtual_rows())
    assert [set(history.streams_at(t)) for t in (1_000, 9_000)] == [set(streams.set_at(t)) for t in (1_000, 9_000)]
    states = [state for _, state, _ in streams.virtual_rows()]
    assert states == [CURRENT] * 2 + [OPENED] * 2 + [CURRENT] * 4 + [CLOSED] * 2 + [OPENED] * 4


def test_a_partial_stream_change_keeps_the_untouched_streams() -> None:
    # cdc/metadata.cc generate_stream_diff / construct_next_stream_set: by token, side by side
    first = new_tablet_streams(2, random.Random(11))
    replacement = StreamId.from_parts(first[0].token, 1, 0)
    closed, opened = stream_diff(first, [replacement, first[1]])
    assert (closed, opened) == ([first[0]], [replacement])
    loaded = TableStreams.load(10, first, [(20, CLOSED, first[0]), (20, OPENED, replacement)])
    assert set(loaded.set_at(20)) == {replacement, first[1]}
    with pytest.raises(StandinSetupError):
        loaded.resize(15, first)


@given(tokens)
def test_a_tablet_token_maps_to_the_stream_of_the_tablet_holding_it(token: int) -> None:
    streams = new_tablet_streams(8, random.Random(2))
    tablet = (token - MIN_TOKEN) // ((1 << 64) // 8)  # biased token / tablet width
    assert TableStreams.starting(0, streams).stream_of(5, token) == streams[tablet]


def test_garbage_collection_keeps_the_newest_set_that_began_before_now_minus_the_ttl() -> None:
    # cdc/generation.cc get_new_base_for_gc: every set whose successor began at or before
    # now - ttl is gone; the newest such successor is the new base.
    rng = random.Random(4)
    streams = TableStreams.starting(0, new_tablet_streams(1, rng))
    for at in (10_000_000, 20_000_000, 30_000_000):
        streams.resize(at, new_tablet_streams(2, rng))
    assert streams.new_base_for_gc(now_us=25_000_000, ttl_s=30) is None
    assert streams.new_base_for_gc(now_us=40_000_000, ttl_s=30) == 10_000_000
    assert streams.new_base_for_gc(now_us=50_000_000, ttl_s=30) == 20_000_000
    assert streams.new_base_for_gc(now_us=10**12, ttl_s=30) == 30_000_000


# --- cdc$time -----------------------------------------------------------------------------------------


def test_cdc_time_microseconds_as_scyllas_documentation_computes_them() -> None:
    documented = uuid.UUID("b223c55e-6d07-11ea-7654-24e4fb3f20b9")
    assert micros_of(documented) == int((documented.time - 0x01B21DD213814000) / 10) == 1584969040910883


@given(st.integers(0, (1 << 53)))
def test_timeuuids_keep_their_microsecond_and_bound_it(micros: int) -> None:
    made = timeuuid_at(micros)
    assert made.version == 1 and made.variant == uuid.RFC_4122
    assert micros_of(made) == micros_of(min_timeuuid(micros)) == micros_of(max_timeuuid(micros)) == micros
