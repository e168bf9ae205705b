"""Segments whose file ends before their ``COMPLETED`` ``_cdc.idx`` (cut short), on the segments real
Cassandra 5.0 nodes wrote (tests/fixtures/commitlog), cut at several places.

A cut file is read as far as it goes and says where it ends (``SegmentRead.cut_at``); the same
file without a completed index (a segment still being written) is only "more may come". The
compiled core's framing gives the same entries, faults and state as the reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.native import native_module
from cdcflow.sources.cassandra_commitlog.compiled import CompiledFramer
from cdcflow.sources.cassandra_commitlog.segment import (
    Entry,
    EntryFault,
    Section,
    SegmentRead,
    read_entries,
    read_framed,
    read_segment_header,
)
from tests.paths import COMMITLOG_FIXTURES

FORMATS = sorted(p.name for p in COMMITLOG_FIXTURES.iterdir() if (p / "expected.json").exists())
PLAIN = [name for name in FORMATS if "-" not in name]  # v7, v8: logical positions are file offsets
COMPRESSED = [name for name in FORMATS if "-" in name]
NATIVE = native_module()
FRAMERS = ["reference", pytest.param("compiled", marks=pytest.mark.skipif(NATIVE is None, reason="no compiled core"))]


def _segment(name: str) -> bytes:
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    return segment.read_bytes()


def _read(data: bytes, framer: str, synced_to: int | None) -> tuple[list[Any], SegmentRead]:
    """(kind, start, end, bytes) of every entry and fault, and where reading stopped."""
    state = SegmentRead()
    if framer == "reference":
        items = read_entries(data, "cut.log", synced_to=synced_to, state=state)
    else:
        items = read_framed(data, "cut.log", CompiledFramer(NATIVE), synced_to=synced_to, state=state)
    found = [
        ("fault", i.start, i.end, i.raw) if isinstance(i, EntryFault) else ("entry", i.start, i.end, i.mutation)
        for i in items
    ]
    return found, state


def _closed(name: str) -> tuple[bytes, list[Entry], int]:
    """The fixture's bytes, its entries, and the offset Cassandra's COMPLETED index gives it when it
    closes the segment there: where its last section ends (``CommitLogSegment.sync``)."""
    data = _segment(name)
    state = SegmentRead()
    entries = [i for i in read_entries(data, state=state) if isinstance(i, Entry)]
    assert state.clean_end and len(entries) > 50
    return data, entries, state.read_to


def _sections(data: bytes) -> list[Section]:
    """The segment's sync sections, as the reader walks them."""
    found: list[Section] = []

    def record(section: Section, path: Path | str, state: SegmentRead) -> Iterator[Entry]:
        found.append(section)
        return iter(())

    for _ in read_framed(data, "cut.log", record):
        pass
    return found


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("name", FORMATS)
def test_a_whole_completed_segment_is_not_cut(name: str, framer: str) -> None:
    data, entries, synced = _closed(name)
    found, state = _read(data, framer, synced_to=synced)
    assert state.cut_at is None and state.section_error is None
    assert [(start, end) for _, start, end, _ in found] == [(e.start, e.end) for e in entries]


def _plain_cuts(data: bytes, entries: list[Entry]) -> dict[str, int]:
    header = read_segment_header(data)
    sections = _sections(data)
    middle = entries[len(entries) // 2]
    inner = [e for e in entries if all(e.end != s.logical_end for s in sections)]  # not a section's last
    return {
        "mid-header": header.size - 3,
        "mid-entry size": middle.start + 6,  # its size is there, its size CRC is cut
        "mid-entry mutation": middle.end - 7,
        "entry boundary": inner[len(inner) // 3].end,
        "section boundary": sections[len(sections) // 2].marker_position,
        "mid-marker": sections[len(sections) // 2].marker_position + 3,
    }


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("name", PLAIN)
def test_a_cut_plain_segment_gives_every_whole_entry_before_the_cut_and_says_where(name: str, framer: str) -> None:
    data, entries, synced = _closed(name)
    for place, cut in _plain_cuts(data, entries).items():
        found, state = _read(data[:cut], framer, synced_to=synced)
        kept = [(start, end) for kind, start, end, _ in found if kind == "entry"]
        assert kept == [(e.start, e.end) for e in entries if e.end <= cut], place
        faults = [(start, end) for kind, start, end, _ in found if kind == "fault"]
        if place.startswith("mid-entry"):
            # The entry the cut went through, up to the cut: nothing else is a fault.
            assert faults == [(max(e.start for e in entries if e.start < cut), cut)], place
        else:
            assert faults == [], place
        expected_cut = {"mid-header": 0, "mid-marker": cut - 3}.get(place, cut)
        assert state.cut_at == expected_cut, place
        assert state.section_error is None, place


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("name", COMPRESSED)
def test_a_cut_compressed_segment_gives_its_whole_sections_and_says_where(name: str, framer: str) -> None:
    data, entries, synced = _closed(name)
    sections = _sections(data)
    for section in sections[1:]:
        for cut in (section.marker_position + 3, (section.marker_position + section.next_marker_position) // 2):
            found, state = _read(data[:cut], framer, synced_to=synced)
            before = section.logical_start - 8  # the section's marker, in logical positions
            assert [end for kind, _, end, _ in found if kind == "entry"] == [e.end for e in entries if e.end <= before]
            assert state.cut_at == before and state.section_error is None
    found, state = _read(data[: sections[-1].marker_position], framer, synced_to=synced)  # at a boundary
    assert state.cut_at == sections[-1].logical_start - 8


@pytest.mark.parametrize("framer", FRAMERS)
@pytest.mark.parametrize("name", FORMATS)
def test_a_segment_still_being_written_is_never_taken_for_a_cut_one(name: str, framer: str) -> None:
    """No completed index (``synced_to`` None): a file may end anywhere, and reading it says only
    that more may come; a cut header is the error it always was."""
    data, _, _ = _closed(name)
    for section in _sections(data)[1:]:
        for cut in (section.marker_position + 3, (section.marker_position + section.next_marker_position) // 2):
            found, state = _read(data[:cut], framer, synced_to=None)
            assert state.cut_at is None and state.section_error is None
            assert all(end <= section.logical_start for kind, _, end, _ in found if kind == "entry")


@pytest.mark.parametrize("name", FORMATS)
def test_compiled_framing_of_cut_segments_is_the_reference(name: str) -> None:
    if NATIVE is None:
        pytest.skip("no compiled core")
    data, _, synced = _closed(name)
    header_size = read_segment_header(data).size
    for cut in range(0, len(data), max(1, len(data) // 97)):
        for synced_to in (None, synced) if cut >= header_size else (synced,):
            reference, reference_state = _read(data[:cut], "reference", synced_to)
            compiled, compiled_state = _read(data[:cut], "compiled", synced_to)
            assert compiled == reference
            assert (compiled_state.cut_at, compiled_state.read_to, compiled_state.clean_end) == (
                reference_state.cut_at,
                reference_state.read_to,
                reference_state.clean_end,
            )


@pytest.mark.parametrize("name", ["v7", "v8-lz4"])
def test_dump_of_a_cut_segment_beside_its_completed_index_reports_the_cut(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cdcflow commitlog dump`` reads the ``_cdc.idx`` beside the file (as the error store's file
    copies and cdc_unreadable/ keep them): the changes before the cut, then the cut, and exit 1."""
    import json

    from cdcflow.cli import main

    data, entries, synced = _closed(name)
    [segment] = sorted((COMMITLOG_FIXTURES / name).glob("CommitLog-*.log"))
    section = _sections(data)[len(_sections(data)) // 2]
    cut = section.marker_position + 5  # inside its sync marker
    before = section.logical_start - 8  # the marker's logical position: where reading ends
    copy = tmp_path / segment.name
    copy.write_bytes(data[:cut])
    (tmp_path / f"{copy.stem}_cdc.idx").write_text(f"{synced}\nCOMPLETED")
    schema = str(COMMITLOG_FIXTURES / name / "schema.json")
    assert main(["commitlog", "dump", str(copy), "--schema-from", schema, "--system-tables"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    positions = [line["position"] for line in lines if "changes" in line]
    assert positions == [e.end for e in entries if e.end <= before]
    assert "cut short" in lines[-1]["error"] and lines[-1]["position"] == before
    assert (lines[-1]["file_bytes"], lines[-1]["cdc_index"]) == (cut, synced)
    (tmp_path / f"{copy.stem}_cdc.idx").write_text(str(synced))  # still being written: nothing to report
    assert main(["commitlog", "dump", str(copy), "--schema-from", schema, "--system-tables"]) == 0
    assert "cut short" not in capsys.readouterr().out
