"""Commit-log segments: the header, sync sections and entry framing, as Cassandra writes and replays them.

A segment (``CommitLog-<version>-<id>.log``) is::

    header   int version | long id | ushort n | n bytes of JSON parameters | int CRC
    section  int next-marker position | int CRC(id, marker position)   ... the sync marker
             [int uncompressed length]                                 ... compressed segments only
             entries up to the next marker (compressed as one block when the segment is)
    section  ...
    zeros    a marker of all zeros: nothing was synced past this point (yet)

and an entry is ``int size | int CRC(size) | size bytes of mutation | int CRC(size, mutation)``.

Positions are *logical*: offsets in the uncompressed stream Cassandra buffers in memory. For an
uncompressed segment they equal file offsets; for a compressed one they do not, and they are what
``_cdc.idx`` and Cassandra's ``CommitLogPosition`` count in. An entry's position here is where the
entry ends, which is what Cassandra reports for a mutation, so "resume after position P" skips
every entry whose end is at most P.

How problems are handled (the rules Cassandra's replay applies, made to keep the stream going):

* a marker of zeros, or a section past the durable offset, is the end for now (wait for more);
* a file that ends before the offset a ``COMPLETED`` ``_cdc.idx`` says Cassandra synced (``synced_to``)
  was cut short: Cassandra writes that index only after the bytes before it are on disk, and adds
  nothing afterwards. It is read as far as it goes (a cut plain section to its last whole entry) and
  :attr:`SegmentRead.cut_at` says where it ends. Without ``synced_to`` (a live segment, or one
  without an index) a file that ends is only "more may come";
* a marker with a bad CRC that is not zero, or one pointing backwards, ends the segment
  (:class:`CorruptSectionError`);
* a bad entry is reported as an :class:`EntryFault` with its raw bytes: when its size passed its
  CRC the reader goes on with the next entry; otherwise the rest of the section is reported and
  the reader goes on with the next section, whose marker is independently checked.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cdcflow.sources.cassandra_commitlog.exceptions import (
    CommitLogError,
    CorruptEntryError,
    CorruptSectionError,
    CorruptSegmentHeaderError,
    EncryptedSegmentError,
    SegmentHeaderCutShortError,
    UnsupportedCompressionError,
    UnsupportedSegmentVersionError,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "Entry",
    "EntryFault",
    "Framed",
    "Section",
    "SectionFramer",
    "SegmentHeader",
    "SegmentRead",
    "parse_segment_name",
    "read_entries",
    "read_framed",
    "read_segment_header",
]

SUPPORTED_VERSIONS = (7, 8)  # Cassandra 4.0/4.1/5.0 (CASSANDRA_4 mode), and 5.0 (NONE mode)
SYNC_MARKER_SIZE = 8
# The smallest mutation there can be (Cassandra's own bound, CASSANDRA-2128): guards against garbage.
MIN_MUTATION_SIZE = 10

_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_MARKER = struct.Struct(">iI")
_HEADER_FIXED = struct.Struct(">iqH")
_SEGMENT_NAME = re.compile(r"^CommitLog-(\d+)-(\d+)\.log$")


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``CommitLog-7-1795372314336.log`` -> ``(7, 1795372314336)``; None for any other file name."""
    match = _SEGMENT_NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _crc_ints(*values: int, crc: int = 0) -> int:
    # Cassandra's updateChecksumInt: each int fed to CRC32 as 4 big-endian bytes.
    for value in values:
        crc = zlib.crc32(_UINT.pack(value & 0xFFFFFFFF), crc)
    return crc


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    version: int
    segment_id: int
    parameters: dict[str, Any]
    size: int  # bytes the header takes; the first sync marker starts here

    @property
    def compression_class(self) -> str | None:
        value = self.parameters.get("compressionClass")
        return str(value) if value else None

    @property
    def encrypted(self) -> bool:
        return "encCipher" in self.parameters


def read_segment_header(data: bytes, path: Path | str = "<segment>") -> SegmentHeader:
    """Parse and check the header at the start of ``data``."""
    if len(data) < _HEADER_FIXED.size:
        raise SegmentHeaderCutShortError(f"file is {len(data)} bytes, shorter than a segment header", path, 0)
    version, segment_id, params_length = _HEADER_FIXED.unpack_from(data, 0)
    if version not in SUPPORTED_VERSIONS:
        if version == 0 and segment_id == 0:
            raise CorruptSegmentHeaderError("the header is all zeros (segment allocated, never written)", path, 0)
        raise UnsupportedSegmentVersionError(
            f"commit-log version {version}; cdcflow reads versions {', '.join(map(str, SUPPORTED_VERSIONS))}"
            " (Cassandra 4.0 to 5.0)",
            path,
            0,
        )
    params_start = _HEADER_FIXED.size
    crc_at = params_start + params_length
    if len(data) < crc_at + 4:
        raise SegmentHeaderCutShortError(f"header cut short: {crc_at + 4} bytes, the file has {len(data)}", path, 0)
    params_bytes = bytes(data[params_start:crc_at])
    expected = zlib.crc32(params_bytes, _crc_ints(version, segment_id, segment_id >> 32, params_length))
    (stored,) = _UINT.unpack_from(data, crc_at)
    if stored != expected:
        raise CorruptSegmentHeaderError(f"header CRC {stored:#010x} does not match {expected:#010x}", path, crc_at)
    try:
        parameters = json.loads(params_bytes) if params_bytes else {}
    except ValueError as exc:
        raise CorruptSegmentHeaderError(f"header parameters are not JSON: {exc}", path, params_start) from exc
    return SegmentHeader(version, segment_id, parameters if isinstance(parameters, dict) else {}, crc_at + 4)


@dataclass(frozen=True, slots=True)
class Section:
    marker_position: int  # file offset of the sync marker
    next_marker_position: int  # file offset where the next marker is (the section's file end)
    logical_start: int  # logical position of the first content byte
    payload: bytes | memoryview  # the section's uncompressed content

    @property
    def logical_end(self) -> int:
        return self.logical_start + len(self.payload)


@dataclass(frozen=True, slots=True)
class Entry:
    start: int  # logical position of the entry's size field
    end: int  # logical position after its trailing CRC: Cassandra's position of this mutation
    mutation: bytes


@dataclass(frozen=True, slots=True)
class EntryFault:
    """Bytes that could not be framed or checked as an entry, kept whole for the error store."""

    start: int
    end: int
    raw: bytes
    error: CommitLogError


@dataclass(slots=True)
class SegmentRead:
    """Where a pass over a segment stopped, filled in as :func:`read_entries` goes."""

    header: SegmentHeader | None = None
    read_to: int = 0  # logical position up to which everything was read (entries and faults)
    clean_end: bool = False  # reached the zero marker or the segment's end: nothing more will come
    section_error: CorruptSectionError | None = None  # the segment ended early on a bad section
    # The logical position where the file's bytes ran out before ``synced_to``: the file was cut short
    # (0 when even its header is cut). Set before the cut section's entries are framed.
    cut_at: int | None = None


Decompress = Callable[[bytes, int], bytes]


def _lz4(block: bytes, length: int) -> bytes:
    import cramjam

    # Cassandra's LZ4Compressor prefixes the block with its uncompressed length, little-endian.
    return bytes(cramjam.lz4.decompress_block(block[4:], output_len=int.from_bytes(block[:4], "little")))


def _snappy(block: bytes, length: int) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.decompress_raw(block))


def _deflate(block: bytes, length: int) -> bytes:
    return zlib.decompress(block)


def _zstd(block: bytes, length: int) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.decompress(block, output_len=length))


_DECOMPRESSORS: dict[str, Decompress] = {
    "LZ4Compressor": _lz4,
    "SnappyCompressor": _snappy,
    "DeflateCompressor": _deflate,
    "ZstdCompressor": _zstd,
}


def _decompressor(header: SegmentHeader, path: Path | str) -> Decompress | None:
    if header.encrypted:
        raise EncryptedSegmentError(
            f"segment is encrypted with {header.parameters.get('encCipher')} (key alias "
            f"{header.parameters.get('encKeyAlias')!r}); cdcflow cannot read encrypted commit logs: "
            "turn transparent_data_encryption_options off for commit logs on CDC nodes",
            path,
        )
    name = header.compression_class
    if name is None:
        return None
    short = name.rsplit(".", 1)[-1]
    if short not in _DECOMPRESSORS:
        raise UnsupportedCompressionError(
            f"compression class {name}; cdcflow reads {', '.join(sorted(_DECOMPRESSORS))}", path
        )
    return _DECOMPRESSORS[short]


def _sections(
    data: bytes,
    header: SegmentHeader,
    path: Path | str,
    durable_to: int | None,
    synced_to: int | None,
    state: SegmentRead,
) -> Iterator[Section]:
    decompress = _decompressor(header, path)
    marker_position = logical = header.size
    id_low, id_high = header.segment_id, header.segment_id >> 32
    while True:
        if marker_position > len(data) - SYNC_MARKER_SIZE:
            if synced_to is not None and logical < synced_to:
                state.cut_at = logical  # the index says more was synced than the file holds
            else:
                state.clean_end = True  # no room left for a marker: the segment is full
            return
        next_marker, stored_crc = _MARKER.unpack_from(data, marker_position)
        if stored_crc != _crc_ints(id_low, id_high, marker_position):
            if next_marker == 0 and stored_crc == 0:
                state.clean_end = True  # the zeroed marker Cassandra writes ahead of unsynced data
                return
            raise CorruptSectionError(
                "sync marker CRC does not match and the marker is not zero", path, marker_position
            )
        if next_marker < marker_position + SYNC_MARKER_SIZE:
            raise CorruptSectionError(
                f"sync marker points back to {next_marker} (valid CRC: the file was altered)", path, marker_position
            )
        content_start = marker_position + SYNC_MARKER_SIZE
        if next_marker > len(data):
            if synced_to is None or logical >= synced_to:
                return  # the section is still being written (compressed segments grow); read it next time
            if decompress is None:
                # A plain section cut: its whole entries are readable, the cut one is a fault.
                state.cut_at = len(data)
                yield Section(marker_position, next_marker, content_start, memoryview(data)[content_start:])
            else:
                state.cut_at = logical  # half a compressed block does not decompress
            return
        if decompress is None:
            payload: bytes | memoryview = memoryview(data)[content_start:next_marker]
            section = Section(marker_position, next_marker, content_start, payload)
        else:
            if next_marker - content_start < 4:
                raise CorruptSectionError("compressed section shorter than its length field", path, content_start)
            (length,) = _INT.unpack_from(data, content_start)
            try:
                payload = decompress(bytes(data[content_start + 4 : next_marker]), length)
            except Exception as exc:  # every codec has its own error type; all mean the same here
                raise CorruptSectionError(
                    f"compressed section does not decompress: {exc}", path, content_start
                ) from exc
            if len(payload) != length:
                raise CorruptSectionError(
                    f"section decompressed to {len(payload)} bytes, its header says {length}", path, content_start
                )
            section = Section(marker_position, next_marker, logical + SYNC_MARKER_SIZE, payload)
        if durable_to is not None and section.logical_end > durable_to:
            return  # not synced yet according to _cdc.idx
        yield section
        logical = section.logical_end
        marker_position = next_marker


def _section_entries(section: Section, path: Path | str, state: SegmentRead) -> Iterator[Entry | EntryFault]:
    payload = section.payload
    base = section.logical_start
    size_of = len(payload)
    offset = 0
    while offset < size_of:
        start = base + offset
        if size_of - offset < 4:
            break  # padding at a section's end
        (size,) = _INT.unpack_from(payload, offset)
        if size == 0:
            state.clean_end = True  # the zero padding after the last entry of a closed segment
            return
        if size < MIN_MUTATION_SIZE or offset + 8 + size + 4 > size_of:
            reason = f"entry size {size} " + ("is too small" if size < MIN_MUTATION_SIZE else "runs past its section")
            yield EntryFault(start, base + size_of, bytes(payload[offset:]), CorruptEntryError(reason, path, start))
            return
        size_crc = zlib.crc32(payload[offset : offset + 4])
        (stored_size_crc,) = _UINT.unpack_from(payload, offset + 4)
        if stored_size_crc != size_crc:
            # The size itself is unreliable, so nothing after it in this section can be located.
            error = CorruptEntryError("entry size CRC does not match", path, start)
            yield EntryFault(start, base + size_of, bytes(payload[offset:]), error)
            return
        data_start = offset + 8
        data_end = data_start + size
        mutation = bytes(payload[data_start:data_end])
        (stored_crc,) = _UINT.unpack_from(payload, data_end)
        end = base + data_end + 4
        if zlib.crc32(mutation, size_crc) != stored_crc:
            error = CorruptEntryError("entry data CRC does not match", path, start)
            yield EntryFault(start, end, bytes(payload[offset : data_end + 4]), error)
        else:
            yield Entry(start, end, mutation)
        offset = data_end + 4


class Framed(Protocol):
    """An entry, or bytes that could not be framed as one: where it ends is all the section walk needs."""

    @property
    def end(self) -> int: ...


FramedT = TypeVar("FramedT", bound=Framed)
SectionFramer = Callable[[Section, "Path | str", SegmentRead], Iterable[FramedT]]
"""Frames one section's entries (setting ``state.clean_end`` on a zero size): :func:`_section_entries`
here, or the compiled core's (``cdcflow.sources.cassandra_commitlog.compiled``)."""


def read_entries(
    data: bytes,
    path: Path | str = "<segment>",
    *,
    after: int = 0,
    durable_to: int | None = None,
    synced_to: int | None = None,
    state: SegmentRead | None = None,
) -> Iterator[Entry | EntryFault]:
    """Every entry (or fault) of a segment whose end is past ``after``, up to ``durable_to``.

    ``state`` receives the header and where reading stopped; a bad section ends the iteration with
    ``state.section_error`` set rather than raising, so entries before it are kept. A bad header,
    an encrypted segment or an unknown compressor raise: nothing in such a file is readable.
    ``synced_to``, the offset of a ``COMPLETED`` ``_cdc.idx``, makes a file that ends before it a cut
    one (``state.cut_at``), a cut header included, instead of one still being written.
    """
    return read_framed(
        data, path, _section_entries, after=after, durable_to=durable_to, synced_to=synced_to, state=state
    )


def read_framed(
    data: bytes,
    path: Path | str,
    frame: SectionFramer[FramedT],
    *,
    after: int = 0,
    durable_to: int | None = None,
    synced_to: int | None = None,
    state: SegmentRead | None = None,
) -> Iterator[FramedT]:
    """:func:`read_entries` with each section's entries framed by ``frame``."""
    state = state if state is not None else SegmentRead()
    try:
        header = read_segment_header(data, path)
    except SegmentHeaderCutShortError:
        if synced_to is None:
            raise
        state.cut_at = 0
        return
    state.header = header
    state.read_to = max(after, header.size)
    try:
        for section in _sections(data, header, path, durable_to, synced_to, state):
            if section.logical_end <= after:
                state.read_to = max(state.read_to, section.logical_end)
                continue
            for item in frame(section, path, state):
                end = item.end
                if end > after:
                    yield item
                state.read_to = max(state.read_to, end)
            if state.clean_end:
                return
            state.read_to = max(state.read_to, section.logical_end)
    except CorruptSectionError as exc:
        state.section_error = exc
