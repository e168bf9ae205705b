"""How reading a commit log can fail, each rooted in :class:`cdcflow.errors.SourceDataError`.

The reader sorts every problem into one of three outcomes, as Cassandra's own replay does:

* a bad **entry** (size CRC or data CRC mismatch, a mutation that does not decode) is skipped: its raw
  bytes go to the error store and reading goes on with the next entry when the framing allows;
* a bad **section** (sync marker with a wrong CRC but not zero, a marker pointing backwards) ends
  the segment: nothing after it can be located reliably;
* a clean **end** (a zeroed marker, or the durable offset from ``_cdc.idx``) means "wait for more";
* a segment **cut short** (its file ends before the offset its ``COMPLETED`` ``_cdc.idx`` says Cassandra
  synced) is read as far as it goes, then kept whole in the error store: nothing more will come.
"""

from __future__ import annotations

from pathlib import Path

from cdcflow.errors import SourceDataError

__all__ = [
    "CommitLogError",
    "CorruptEntryError",
    "CorruptSectionError",
    "CorruptSegmentHeaderError",
    "EncryptedSegmentError",
    "KeptSegmentNotFoundError",
    "MutationDecodeError",
    "SegmentCutShortError",
    "SegmentHeaderCutShortError",
    "UnknownTableError",
    "UnsupportedCompressionError",
    "UnsupportedSegmentVersionError",
]


class CommitLogError(SourceDataError):
    """Something in a commit-log segment could not be read; says which file and where."""

    def __init__(self, message: str, path: Path | str | None = None, position: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}" + (f" at position {position}" if position is not None else "") + ": "
        super().__init__(where + message)
        self.path = Path(path) if path is not None else None
        self.position = position


class CorruptSegmentHeaderError(CommitLogError):
    """The segment's header (version, id, parameters) fails its CRC or is cut short."""


class SegmentHeaderCutShortError(CorruptSegmentHeaderError):
    """The file ends inside the segment's header."""


class UnsupportedSegmentVersionError(CommitLogError):
    """A commit-log version this reader does not know (it reads 7 and 8: Cassandra 4.0 to 5.0)."""


class EncryptedSegmentError(CommitLogError):
    """The segment is encrypted (transparent data encryption); cdcflow has no keystore to read it with."""


class UnsupportedCompressionError(CommitLogError):
    """The segment names a compressor cdcflow does not implement."""


class CorruptSectionError(CommitLogError):
    """A sync section cannot be trusted (bad marker, undecompressable); the rest of the segment is unreadable."""


class SegmentCutShortError(CommitLogError):
    """The segment's file ends before the offset its ``COMPLETED`` ``_cdc.idx`` says was synced: the
    changes in the missing tail are lost to the stream; the segment is kept in the error store."""


class KeptSegmentNotFoundError(CommitLogError):
    """The error store holds no copy of the segment asked for (``cdcflow commitlog kept`` lists them)."""


class CorruptEntryError(CommitLogError):
    """One entry's size or data CRC does not match; the entry is skipped."""


class MutationDecodeError(CommitLogError):
    """An entry passed its CRCs but its mutation does not decode against the known schema."""


class UnknownTableError(MutationDecodeError):
    """The mutation names a table id the schema does not know (yet): refresh the schema and retry."""

    def __init__(self, table_id: str, path: Path | str | None = None, position: int | None = None) -> None:
        super().__init__(f"unknown table id {table_id}; is the schema current?", path, position)
        self.table_id = table_id
