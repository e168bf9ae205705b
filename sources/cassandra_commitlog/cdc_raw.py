"""Segment tracking: which commit-log segments are in cdc_raw, their ``_cdc.idx`` state, positions
in the node's log, and what becomes of a segment once it is read and checkpointed.

A position is ``{"segment": id, "position": p}``: every entry of an older segment, and every entry
of segment ``id`` ending at or before logical position ``p``, is done. ``"segment_read": true``
says the position ends a segment read whole, so a restart can tell that segment (deleted once
committed) from one Cassandra deleted before it was read (``snapshot: when_needed``).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cdcflow.contract import Offset
from cdcflow.sources.cassandra_commitlog.cdc_index import CdcIndex, index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError
from cdcflow.sources.cassandra_commitlog.segment import (
    EntryFault,
    Section,
    SegmentRead,
    parse_segment_name,
    read_framed,
)

__all__ = [
    "CLOSED_WITHOUT_INDEX",
    "SEGMENT_READ",
    "CdcRawSegments",
    "Position",
    "SegmentSpan",
    "ended",
    "order",
    "synced_to",
]

CLOSED_WITHOUT_INDEX = CdcIndex(offset=(1 << 31) - 1, completed=True)
"""The index a segment without one is taken to have once a newer segment has one."""
SEGMENT_READ = "segment_read"
"""In an offset: it is the end of a segment read whole."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where the node's log has been read to: every entry ending at or before ``position`` of
    ``segment``, and every older segment, is done."""

    segment: int
    position: int

    @classmethod
    def of(cls, offset: Offset) -> Position:
        return cls(int(offset.get("segment", 0)), int(offset.get("position", 0)))

    def offset(self) -> Offset:
        return {"segment": self.segment, "position": self.position}


def ended(position: Position, segment_read: bool) -> Offset:
    """``position`` as an offset, saying when it ends a segment read whole."""
    return {**position.offset(), SEGMENT_READ: True} if segment_read else position.offset()


def order(offset: Offset) -> tuple[int, int]:
    """Where an offset stands in the node's commit log, for comparing two."""
    position = Position.of(offset)
    return (position.segment, position.position)


def synced_to(index: CdcIndex | None) -> int | None:
    """The offset the segment's file must reach, from a ``COMPLETED`` index Cassandra wrote (not one
    assumed for a segment without any): a file that ends before it was cut short."""
    if index is None or index is CLOSED_WITHOUT_INDEX or not index.completed:
        return None  # still being written (or never indexed): its file may end anywhere
    return index.offset


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """The part of one segment a range reads: entries ending after ``after`` and at most at
    ``up_to`` (None: to the segment's end)."""

    segment_id: int
    path: Path
    after: int
    up_to: int | None


class CdcRawSegments:
    """The segments Cassandra hard-links into ``cdc_raw`` and their indexes, read afresh at each
    call; the bytes of the segment the latest-offset walk read last are kept for the read after it."""

    def __init__(
        self,
        cdc_raw: Path,
        processed: Literal["delete", "archive", "keep"],
        archive_dir: Path | None,
        logger: logging.Logger,
        node: str,
    ) -> None:
        self.directory = cdc_raw
        self.unreadable_dir = cdc_raw.parent / "cdc_unreadable"
        self._processed = processed
        self._archive_dir = archive_dir or cdc_raw.parent / "cdc_archive"
        self._logger = logger
        self._node = node
        self._cached: tuple[Path, bytes] | None = None

    def found(self, first: int) -> list[tuple[int, Path]]:
        """The segments numbered ``first`` or later, oldest first."""
        segments = []
        for path in self.directory.glob("CommitLog-*.log"):
            name = parse_segment_name(path.name)
            if name is not None and name[1] >= first:
                segments.append((name[1], path))
        return sorted(segments)

    def indexed(self, first: int) -> list[tuple[int, Path, CdcIndex | None]]:
        """:meth:`found`, each with its index (see :func:`indexes`)."""
        found = self.found(first)
        return [(segment_id, path, index) for (segment_id, path), index in zip(found, indexes(found), strict=True)]

    def holds(self, segment_id: int) -> bool:
        return any(found == segment_id for found, _ in self.found(segment_id))

    def oldest_with_cdc_data(self) -> int | None:
        """The oldest segment holding CDC data (it has an index: Cassandra itself removes it from
        cdc_raw only when full with cdc_block_writes false); None when there is none yet."""
        for segment_id, _, index in self.indexed(0):
            if index is not None and index is not CLOSED_WITHOUT_INDEX:
                return segment_id
        return None

    def spans(self, first: Position, last: Position) -> Iterator[SegmentSpan]:
        """The segments of the range (first, last], each with where its entries start and end."""
        for segment_id, path in self.found(first.segment):
            if segment_id > last.segment:
                return
            after = first.position if segment_id == first.segment else 0
            up_to = last.position if segment_id == last.segment else None
            yield SegmentSpan(segment_id, path, after, up_to)

    def read_and_keep(self, path: Path) -> bytes:
        """The segment's bytes, kept: the read right after the latest-offset walk uses these same
        bytes, so everything up to the offset the walk found is in them."""
        data = path.read_bytes()
        self._cached = (path, data)
        return data

    def segment_bytes(self, path: Path) -> bytes:
        """The segment's bytes: those the latest-offset walk just read, when it read this segment last."""
        return self._cached[1] if self._cached and self._cached[0] == path else path.read_bytes()

    def finished(self, done: Position) -> Iterator[tuple[int, Path, CdcIndex]]:
        """The segments Cassandra completed and ``done`` has read to their end."""
        for segment_id, path, index in self.indexed(0):
            if segment_id > done.segment:
                break
            if index is None or not index.completed:
                continue
            if segment_id < done.segment or done.position >= index.offset:
                yield segment_id, path, index

    def retire(self, path: Path, cdc_index: CdcIndex) -> None:
        """A segment read and checkpointed: deleted, archived or kept (``processed_segments``); one
        holding what reading it could not account for moves to ``cdc_unreadable/`` whatever that says."""
        index = index_path(path)
        unreadable = not_wholly_read(path, cdc_index)
        if self._processed == "keep" and not unreadable:
            return
        if unreadable or self._processed == "archive":
            target = self.unreadable_dir if unreadable else self._archive_dir
            target.mkdir(parents=True, exist_ok=True)
            if unreadable:
                self._logger.warning(
                    "commit log %s: %s holds bytes its reading could not account for (see the error store): "
                    "moved to %s, not deleted",
                    self._node,
                    path,
                    target,
                )
            shutil.move(str(path), target / path.name)
            if index.exists():
                shutil.move(str(index), target / index.name)
        else:
            path.unlink(missing_ok=True)
            index.unlink(missing_ok=True)
        if self._cached and self._cached[0] == path:
            self._cached = None


def indexes(found: list[tuple[int, Path]]) -> list[CdcIndex | None]:
    """Each segment's index; a segment without one counts as closed once a newer one has one.

    Cassandra links every segment into cdc_raw when it creates it (the next one ahead of
    time) and writes the index at the first sync with CDC data. Writes only go to the newest
    active segment, so once a newer segment has an index, an older one without any will get
    no more writes: it held no synced CDC data (or was cut short by a crash); it is read to
    its last valid section and passed.
    """
    found_indexes = [read_cdc_index(index_path(path)) for _, path in found]
    newer_indexed = False
    for number in range(len(found) - 1, -1, -1):
        if found_indexes[number] is None and newer_indexed:
            found_indexes[number] = CLOSED_WITHOUT_INDEX
        newer_indexed = newer_indexed or found_indexes[number] is not None
    return found_indexes


def not_wholly_read(path: Path, index: CdcIndex) -> bool:
    """Whether the segment holds what reading it could not account for: a bad header or
    section (the error store says where), or a cut file (the store keeps a copy). Decided from
    the file itself, as the read decided, so it holds whichever process read the segment (the spark
    engine commits in its driver, reads in executors). The file is read afresh: bytes cached
    while it was being written may be fewer than it holds now that it is closed."""
    state = SegmentRead()
    try:
        for _ in read_framed(path.read_bytes(), path, _no_entries, synced_to=synced_to(index), state=state):
            pass
    except CommitLogError:
        return True
    return state.section_error is not None or state.cut_at is not None


def _no_entries(section: Section, path: Path | str, state: SegmentRead) -> Iterator[EntryFault]:
    """A section framer that frames nothing: for a walk over a segment's sections only."""
    return iter(())
