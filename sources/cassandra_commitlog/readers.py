"""The readers of a node's log: how far it can be read now (the latest-offset walk), and a range of
it read as decoded entries (``read``) or as compact event batches (``read_event_batches``).

Each walks the segments of a range (:mod:`.cdc_raw`) through :meth:`.decoding.CommitLogDecoding.entries`,
the one place that picks the reference or the compiled core. What cannot be read goes to the error
store (:mod:`.reporting`) and reading goes on; a segment cut short is kept whole once, by the range
that reaches its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cdcflow.batches import BatchTable, EventBatch
from cdcflow.contract import Offset
from cdcflow.sources.cassandra_commitlog.cdc_index import index_path, read_cdc_index
from cdcflow.sources.cassandra_commitlog.cdc_raw import (
    SEGMENT_READ,
    CdcRawSegments,
    Position,
    SegmentSpan,
    ended,
    synced_to,
)
from cdcflow.sources.cassandra_commitlog.changes import VERSION
from cdcflow.sources.cassandra_commitlog.compiled import CompactInto, CompiledFramer
from cdcflow.sources.cassandra_commitlog.decoding import CommitLogDecoding, FramedEntry, MutationChanges
from cdcflow.sources.cassandra_commitlog.exceptions import CommitLogError
from cdcflow.sources.cassandra_commitlog.mutation import Mutation, newest_timestamp
from cdcflow.sources.cassandra_commitlog.reporting import MAX_ERROR_BYTES, CommitLogReport
from cdcflow.sources.cassandra_commitlog.segment import EntryFault, SegmentRead

__all__ = ["CommitLogReader"]

_Decoded = TypeVar("_Decoded")
_EntryDecode = Callable[[int, FramedEntry, Path, int, "CompiledFramer | None"], "_Decoded | None"]

_NO_LIMIT = 1 << 62


class CommitLogReader:
    """One node's log in ``cdc_raw``, read in ranges of positions."""

    def __init__(
        self, segments: CdcRawSegments, decoding: CommitLogDecoding, report: CommitLogReport, node: str, cluster: str
    ) -> None:
        self._segments = segments
        self._decoding = decoding
        self._report = report
        self._node = node
        self._cluster = cluster

    # --- how far -----------------------------------------------------------------------------

    def latest(self, start: Offset, max_records: int | None, horizon_us: int | None = None) -> tuple[Offset, bool]:
        """How far the log can be read from ``start`` now, at most ``max_records`` entries on, and
        whether the walk stopped at the synced end (rather than at the count). With ``horizon_us``
        (``row_image: full``) it also stops before the first entry changing a row at or after it:
        that change's time bucket is still open."""
        position = Position.of(start)
        read_whole = bool(start.get(SEGMENT_READ))  # ``position`` ends a segment read whole
        budget = max_records if max_records is not None else _NO_LIMIT
        full = horizon_us is not None
        for segment_id, path, index in self._segments.indexed(position.segment):
            if index is None:
                break  # not synced yet, or its index is being rewritten: ask again later
            begin = position.position if segment_id == position.segment else 0
            state = SegmentRead()
            end = begin
            try:
                entries, _ = self._decoding.entries(
                    self._segments.read_and_keep(path),
                    path,
                    state,
                    after=begin,
                    # A closed segment is read whole: every byte of it is final (and the offset
                    # Cassandra writes after a replay is the file's length, not a logical position).
                    durable_to=None if index.completed else index.offset,
                    synced_to=synced_to(index),
                    with_mutations=full,
                )
                for item in entries:
                    if horizon_us is not None and not isinstance(item, EntryFault) and state.header is not None:
                        try:
                            if self._in_open_bucket(state.header.version, item, path, horizon_us):
                                return Position(segment_id, end).offset(), True
                        except CommitLogError:
                            pass  # the read sends it to the error store
                    end = item.end
                    budget -= 1
                    if budget <= 0:
                        return Position(segment_id, end).offset(), False
            except CommitLogError:
                # The whole segment is unreadable (header, encryption): the read stores the error and
                # keeps the file aside; once Cassandra closed it, move past it.
                if not index.completed:
                    return ended(position, read_whole), True
                position = Position(segment_id, max(index.offset, 1))
                read_whole = True
                continue
            if not index.completed:
                return Position(segment_id, max(end, begin)).offset(), True
            # Read to its end (a cut one as far as it goes: the read keeps it) and closed by Cassandra:
            # this segment is done, go on with the next.
            position = Position(segment_id, max(end, index.offset, state.read_to))
            read_whole = True
        return ended(position, read_whole), True

    def _in_open_bucket(self, version: int, entry: FramedEntry, path: Path, horizon_us: int) -> bool:
        assert entry.mutation is not None
        mutation = self._decoding.reference(version).decode(entry.mutation, path, entry.end)
        return any(newest_timestamp(u) >= horizon_us for u in mutation.updates)

    # --- decoded entries ---------------------------------------------------------------------

    def mutations(self, first: Position, last: Position) -> Iterator[tuple[Mutation, int, int]]:
        """full: each entry of (first, last] as the reference decodes it, with its segment and position."""

        def mutation(version: int, entry: FramedEntry, path: Path, segment_id: int, _: Any) -> Mutation | None:
            return self._decoding.mutation(version, entry, path, segment_id)

        return self._decoded(first, last, mutation, compiled=False)

    def changes(self, first: Position, last: Position) -> Iterator[tuple[MutationChanges, int, int]]:
        """delta: each entry of (first, last] as row changes (the compiled core's, where it decodes)."""
        return self._decoded(first, last, self._decoding.changes, compiled=True)

    def _decoded(
        self, first: Position, last: Position, decode: _EntryDecode[_Decoded], compiled: bool
    ) -> Iterator[tuple[_Decoded, int, int]]:
        """``decode`` applied to each entry of the range; ``compiled``: the compiled core decodes
        each section's entries first (row changes, for :meth:`.decoding.CommitLogDecoding.changes`)."""
        for span in self._segments.spans(first, last):
            yield from self._read_span(span, decode, compiled)

    def _read_span(
        self, span: SegmentSpan, decode: _EntryDecode[_Decoded], compiled: bool
    ) -> Iterator[tuple[_Decoded, int, int]]:
        segment_id, path, after, up_to = span.segment_id, span.path, span.after, span.up_to
        state = SegmentRead()
        data = b""
        index = read_cdc_index(index_path(path))
        unreadable_dir = self._segments.unreadable_dir
        try:
            data = self._segments.segment_bytes(path)
            # No durable_to here: ``up_to`` is an entry's end that the latest-offset walk found
            # synced, and it may fall inside a section.
            entries, framer = self._decoding.entries(
                data, path, state, after=after, synced_to=synced_to(index), decode=compiled
            )
            for item in entries:
                if up_to is not None and item.end > up_to:
                    return
                if isinstance(item, EntryFault):
                    if state.cut_at is not None and item.end >= state.cut_at:
                        continue  # the entry the cut went through: kept with the whole segment below
                    self._report.store_error(segment_id, item.end, str(item.error), item.raw)
                    continue
                assert state.header is not None
                decoded = decode(state.header.version, item, path, segment_id, framer)
                if decoded is not None:
                    yield decoded, segment_id, item.end
        except CommitLogError as exc:
            self._report.store_error(segment_id, after, f"{exc}; the segment is kept in {unreadable_dir}", b"")
            return
        # A cut segment is kept once, by the range that reaches its end: the walk's next position
        # is the index's offset, and a range starting there reads nothing more of this segment.
        reaches_end = index is not None and after < index.offset and (up_to is None or up_to >= index.offset)
        if state.cut_at is not None and index is not None and reaches_end:
            self._report.keep_cut_segment(segment_id, path, data, index, state)
        if state.section_error is not None:
            error = state.section_error
            start = error.position or state.read_to
            self._report.store_error(
                segment_id,
                state.read_to,
                f"{error}; the rest of the segment is unreadable, the segment is kept in {unreadable_dir}",
                data[start : start + MAX_ERROR_BYTES],
            )

    # --- compact batches ---------------------------------------------------------------------

    def compact_batches(
        self, first: Position, last: Position, batch_size: int, emits: Callable[[str, bytes], bool] | None
    ) -> list[EventBatch] | None:
        """delta: the range's events as compact batches of ``batch_size``, when the compiled core
        decodes every entry of it with the current schema to compact changes; else None (a fault,
        a change compact rows do not carry, a schema refreshed meanwhile, a cut segment): the
        range is then read by :meth:`changes`, which stores errors and keeps cut segments."""
        native = self._decoding.native
        assert native is not None, "compact batches need the compiled core"
        builder = native.CompactBatchBuilder()
        batches: list[EventBatch] = []
        skipped = dropped = 0
        for span in self._segments.spans(first, last):
            state = SegmentRead()
            try:
                data = self._segments.segment_bytes(span.path)
                index = read_cdc_index(index_path(span.path))
                into = CompactInto(builder, span.segment_id, span.up_to, emits)
                sections, framer = self._decoding.entries(
                    data, span.path, state, after=span.after, synced_to=synced_to(index), compact=into
                )
                for section in sections:  # a CompactSection each, its entries in the builder
                    if section.refused is not None or not self._decoding.decoded_with_current_schema(framer):
                        return None
                    skipped += section.skipped
                    dropped += section.dropped
                    while len(builder) >= batch_size:
                        batches.append(self._compact_batch(builder, batch_size))
                    if section.reached_up_to:
                        break
            except CommitLogError:
                return None
            if state.section_error is not None or state.cut_at is not None:
                return None  # the read stores the error, or keeps the cut segment
        if len(builder):
            batches.append(self._compact_batch(builder, None))
        if skipped:  # counted once the range is taken, as the read counts them
            self._report.counted("skipped_not_primary_replica", skipped)
        if dropped:
            self._report.counted("skipped_dropped_table_mutation", dropped)
        return batches

    def _compact_batch(self, builder: Any, count: int | None) -> EventBatch:
        events = builder.take(self._node, int(time.time() * 1000), count)
        cluster = self._cluster
        tables = [
            BatchTable(table.row_schema(cluster), "cassandra", cluster, table.keyspace, table.table, version=VERSION)
            for table in builder.tables()
        ]
        return EventBatch(events, tables)
