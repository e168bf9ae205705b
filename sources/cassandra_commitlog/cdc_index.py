"""``CommitLog-<v>-<id>_cdc.idx``: how far Cassandra has synced a segment in cdc_raw, and whether it is done.

Cassandra rewrites the file on every sync (``<offset>`` or ``<offset>\\nCOMPLETED``) by truncating
and writing it again, so a reader can catch it empty or half-written: that reads as "unknown,
try again", never as an error. The offset is a logical position (see ``segment``). Cassandra
writes it only once the bytes before it are flushed (``CommitLogSegment.sync``), so a
``COMPLETED`` segment whose file ends before that offset was cut short afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CdcIndex", "index_path", "parse_cdc_index", "read_cdc_index"]


@dataclass(frozen=True, slots=True)
class CdcIndex:
    offset: int  # everything before this logical position is synced to disk
    completed: bool  # the segment is closed: nothing will be added

    def text(self) -> str:
        """The file's content, as Cassandra writes it (``CommitLogSegment.writeCDCIndexFile``)."""
        return f"{self.offset}\nCOMPLETED" if self.completed else str(self.offset)


def index_path(segment: Path) -> Path:
    return segment.with_name(segment.stem + "_cdc.idx")


def parse_cdc_index(text: str) -> CdcIndex | None:
    """The index a file's text holds, or None while it is empty or mid-rewrite."""
    lines = text.split("\n")
    if not lines[0].strip().isdigit():
        return None
    return CdcIndex(int(lines[0]), len(lines) > 1 and lines[1].strip() == "COMPLETED")


def read_cdc_index(path: Path) -> CdcIndex | None:
    """The index, or None while it is missing, empty or mid-rewrite."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    return parse_cdc_index(text)
