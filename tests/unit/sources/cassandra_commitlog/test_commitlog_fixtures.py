"""The commit-log parser on segments real Cassandra 5.0 nodes wrote (tests/fixtures/commitlog), without a node.

Every fixture ran the same writes (``tests/commitlog_cases.py``) under one format: versions 7 and
8, plain and compressed with each codec. Then the same bytes, damaged in the ways a disk or a crash
damages them, must give the documented outcome and never an untyped exception.
"""

from __future__ import annotations

import contextlib
import json
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex, index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.changes import RowChange, row_changes
from cdcflow.sources.cassandra_commitlog.exceptions import (
    CommitLogError,
    CorruptEntryError,
    CorruptSegmentHeaderError,
    EncryptedSegmentError,
    UnsupportedSegmentVersionError,
)
from cdcflow.sources.cassandra_commitlog.mutation import MutationDecoder
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog
from cdcflow.sources.cassandra_commitlog.segment import (
    Entry,
    EntryFault,
    SegmentRead,
    read_entries,
    read_segment_header,
)
from tests.commitlog_cases import by_case, in_order
from tests.paths import COMMITLOG_FIXTURES

FORMATS = sorted(p.name for p in COMMITLOG_FIXTURES.iterdir() if (p / "expected.json").exists())
KEYSPACE = "fixture"


def _segment(name: str) -> Path:
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    return segment


def _catalog(name: str) -> SchemaCatalog:
    return SchemaCatalog.load(COMMITLOG_FIXTURES / name / "schema.json")


def _decode(
    data: bytes, catalog: SchemaCatalog, durable_to: int | None = None
) -> tuple[list[RowChange], list[EntryFault], SegmentRead]:
    state = SegmentRead()
    changes: list[RowChange] = []
    faults: list[EntryFault] = []
    decoder: MutationDecoder | None = None
    for item in read_entries(data, "fixture.log", durable_to=durable_to, state=state):
        if isinstance(item, EntryFault):
            faults.append(item)
            continue
        assert state.header is not None
        decoder = decoder or MutationDecoder(catalog, state.header.version, lambda t: t.keyspace == KEYSPACE)
        for update in decoder.decode(item.mutation, "fixture.log", item.end).updates:
            changes.extend(c for c in row_changes(update) if c.table != "done")
    return changes, faults, state


def _expected(name: str) -> dict[str, list[dict[str, object]]]:
    cases = json.loads((COMMITLOG_FIXTURES / name / "expected.json").read_text())
    return {case: in_order(case, changes) for case, changes in cases.items()}


def test_every_format_has_a_fixture() -> None:
    assert set(FORMATS) >= {"v7", "v8", "v8-lz4", "v7-zstd", "v8-snappy", "v8-deflate"}


@pytest.mark.parametrize("name", FORMATS)
def test_fixture_decodes_to_what_was_written(name: str) -> None:
    segment = _segment(name)
    header = read_segment_header(segment.read_bytes(), segment)
    assert header.version == int(name[1])
    compressed = name.partition("-")[2]
    assert (header.compression_class or "").lower().startswith(compressed)

    changes, faults, state = _decode(segment.read_bytes(), _catalog(name))
    assert faults == [] and state.section_error is None
    assert by_case([c.to_json() for c in changes]) == _expected(name)


@pytest.mark.parametrize("name", FORMATS)
def test_reading_up_to_the_cdc_index_gives_a_prefix(name: str) -> None:
    segment = _segment(name)
    index = read_cdc_index(index_path(segment))
    assert index is not None and not index.completed
    everything, _, _ = _decode(segment.read_bytes(), _catalog(name))
    durable, _, state = _decode(segment.read_bytes(), _catalog(name), durable_to=index.offset)
    assert durable == everything[: len(durable)]
    assert state.read_to <= index.offset


def test_resuming_after_a_position_skips_exactly_what_was_read() -> None:
    data = _segment("v8-lz4").read_bytes()
    entries = [e for e in read_entries(data) if isinstance(e, Entry)]
    middle = entries[len(entries) // 2]
    resumed = [e for e in read_entries(data, after=middle.end) if isinstance(e, Entry)]
    assert resumed == entries[len(entries) // 2 + 1 :]


# --- damage ---------------------------------------------------------------------------------


def _plain() -> tuple[bytearray, list[Entry]]:
    data = bytearray(_segment("v7").read_bytes())
    return data, [e for e in read_entries(bytes(data)) if isinstance(e, Entry)]


def test_flipped_byte_in_a_mutation_skips_only_that_entry() -> None:
    data, entries = _plain()
    victim = entries[len(entries) // 2]
    data[victim.start + 8 + 3] ^= 0xFF
    items = list(read_entries(bytes(data)))
    faults = [i for i in items if isinstance(i, EntryFault)]
    assert [f.start for f in faults] == [victim.start]
    assert isinstance(faults[0].error, CorruptEntryError) and "data CRC" in str(faults[0].error)
    assert len(faults[0].raw) == victim.end - victim.start  # the whole entry, for the error store
    assert [i for i in items if isinstance(i, Entry)] == [e for e in entries if e is not victim]


def test_flipped_size_skips_the_rest_of_its_section_and_goes_on() -> None:
    data, entries = _plain()
    victim = entries[1]
    data[victim.start] ^= 0x40
    items = list(read_entries(bytes(data)))
    faults = [i for i in items if isinstance(i, EntryFault)]
    assert len(faults) == 1 and faults[0].start == victim.start
    kept = [i for i in items if isinstance(i, Entry)]
    assert kept[0] == entries[0] and all(e in entries for e in kept)
    assert kept[-1] == entries[-1], "later sections are read again"


def _markers(data: bytes) -> list[int]:
    header = read_segment_header(data)
    positions, position = [], header.size
    while True:
        (following,) = struct.unpack_from(">i", data, position)
        if following == 0:
            return positions
        positions.append(position)
        position = following


def test_bad_marker_crc_ends_the_segment_keeping_what_came_before() -> None:
    data, entries = _plain()
    markers = _markers(bytes(data))
    assert len(markers) >= 2, "the fixture has several sync sections"
    data[markers[1] + 5] ^= 0x01
    state = SegmentRead()
    kept = [i for i in read_entries(bytes(data), state=state) if isinstance(i, Entry)]
    assert state.section_error is not None and "sync marker CRC" in str(state.section_error)
    assert kept == [e for e in entries if e.end <= markers[1]] and kept


def test_zero_filled_tail_is_a_clean_end() -> None:
    data, entries = _plain()
    markers = _markers(bytes(data))
    cut = markers[-1]
    data[cut:] = bytes(len(data) - cut)
    state = SegmentRead()
    kept = [i for i in read_entries(bytes(data), state=state) if isinstance(i, Entry)]
    assert state.clean_end and state.section_error is None
    assert kept == [e for e in entries if e.end <= cut]


def test_truncated_file_waits_for_the_rest() -> None:
    data, entries = _plain()
    markers = _markers(bytes(data))
    cut = markers[-1] + 20  # inside the last section
    state = SegmentRead()
    kept = [i for i in read_entries(bytes(data[:cut]), state=state) if isinstance(i, Entry)]
    assert kept == [e for e in entries if e.end <= markers[-1]]
    assert not state.clean_end and state.section_error is None  # "more may come", not corrupt


def test_empty_or_half_written_cdc_index_reads_as_unknown(tmp_path: Path) -> None:
    index = tmp_path / "CommitLog-7-1_cdc.idx"
    assert read_cdc_index(index) is None
    index.write_text("")
    assert read_cdc_index(index) is None
    index.write_text("\nCOMPLETED")
    assert read_cdc_index(index) is None
    # Cassandra's two forms (CommitLogSegment.writeCDCIndexFile): the offset, then COMPLETED once closed.
    index.write_text("4096")
    assert read_cdc_index(index) == CdcIndex(offset=4096, completed=False)
    index.write_text("4096\nCOMPLETED")
    assert read_cdc_index(index) == CdcIndex(offset=4096, completed=True)


def _header(version: int, segment_id: int, parameters: dict[str, str]) -> bytes:
    params = json.dumps(parameters).encode()
    crc = 0
    for value in (version, segment_id & 0xFFFFFFFF, segment_id >> 32, len(params)):
        crc = zlib.crc32(struct.pack(">I", value), crc)
    return struct.pack(">iqH", version, segment_id, len(params)) + params + struct.pack(">I", zlib.crc32(params, crc))


def test_encrypted_segment_is_a_clear_error_naming_the_file() -> None:
    data = _header(7, 42, {"encCipher": "AES/CBC/PKCS5Padding", "encKeyAlias": "testing:1", "encIV": "00"})
    with pytest.raises(EncryptedSegmentError, match=r"CommitLog-7-42\.log.*encrypted.*testing:1"):
        list(read_entries(data + bytes(64), "CommitLog-7-42.log"))


def test_unknown_version_and_bad_header_crc_are_typed_errors() -> None:
    with pytest.raises(UnsupportedSegmentVersionError, match="version 6"):
        read_segment_header(_header(6, 1, {}))
    damaged = bytearray(_header(7, 1, {}))
    damaged[5] ^= 1
    with pytest.raises(CorruptSegmentHeaderError, match="CRC"):
        read_segment_header(bytes(damaged))


# --- fuzz: any damage gives the parser's own errors, nothing else ---------------------------

_SEED_SEGMENTS = {name: _segment(name).read_bytes()[:65536] for name in ("v7", "v8-lz4")}
_CATALOGS = {name: _catalog(name) for name in _SEED_SEGMENTS}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_SEED_SEGMENTS)),
    flips=st.lists(st.tuples(st.integers(0, 65535), st.integers(1, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.integers(0, 65536)),
)
def test_damaged_segments_raise_only_commitlog_errors(name: str, flips: list[tuple[int, int]], cut: int | None) -> None:
    data = bytearray(_SEED_SEGMENTS[name])
    for position, mask in flips:
        data[position % len(data)] ^= mask
    if cut is not None:
        del data[cut:]
    with contextlib.suppress(CommitLogError):
        _decode_all(bytes(data), _CATALOGS[name])


_SEED_MUTATIONS = [e.mutation for e in read_entries(_segment("v8").read_bytes()) if isinstance(e, Entry)]


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, len(_SEED_MUTATIONS) - 1),
    flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_damaged_mutations_past_their_crcs_raise_only_decode_errors(index: int, flips: list[tuple[int, int]]) -> None:
    mutation = bytearray(_SEED_MUTATIONS[index])
    for position, mask in flips:
        mutation[position % len(mutation)] ^= mask
    with contextlib.suppress(CommitLogError):
        for update in MutationDecoder(_catalog("v8"), 8).decode(bytes(mutation)).updates:
            list(row_changes(update))


def _decode_all(data: bytes, catalog: SchemaCatalog) -> None:
    state = SegmentRead()
    for item in read_entries(data, state=state):
        if isinstance(item, Entry) and state.header is not None:
            try:
                for update in MutationDecoder(catalog, state.header.version).decode(item.mutation).updates:
                    list(row_changes(update))
            except CommitLogError:
                continue
