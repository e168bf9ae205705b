"""``CommitLog-<v>-<id>_cdc.idx``: how far Cassandra has synced a segment in cdc_raw, and whether it is done.

Cassandra rewrites the file on every sync (``<offset>`` or ``<offset>\\nCOMPLETED``) by truncating
and writing it again, so a reader can catch it empty or half-written: that reads as "unknown,
try again", never as an error. The offset is a logical position (see ``segment``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CdcIndex", "index_path", "read_cdc_index"]


@dataclass(frozen=True, slots=True)
class CdcIndex:
    offset: int  # everything before this logical position is synced to disk
    completed: bool  # the segment is closed: nothing will be added


def index_path(segment: Path) -> Path:
    return segment.with_name(segment.stem + "_cdc.idx")


def read_cdc_index(path: Path) -> CdcIndex | None:
    """The index, or None while it is missing, empty or mid-rewrite."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if not lines[0].strip().isdigit():
        return None
    return CdcIndex(int(lines[0]), len(lines) > 1 and lines[1].strip() == "COMPLETED")
