"""Full row images (seed 001's stateless processing): rows read back from the node by their key.

A mutation carries only the columns it wrote; the whole row is read from the local node once the
mutation's time bucket has closed, so the copy read has every write of that window. Keys are bound
as the raw bytes the commit log holds, through ``blobAs<type>(?)``, so no value is re-encoded on
the way (key columns must be native types; other tables keep delta images).

:class:`FullRowImages` turns a range's mutations into such events: the time buckets (``window_count``
of ``window_interval_ms``; the latest-offset walk stops before a change in an open one), each row
changed in a range read back once after it, and a change that shows up after its bucket closed kept
in the out-of-sequence store (:mod:`.out_of_sequence`) and read back at QUORUM.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cdcflow.errors import SourceUnavailableError
from cdcflow.events import ChangeEvent, Record
from cdcflow.sources.cassandra_commitlog.changes import RowChange, row_changes
from cdcflow.sources.cassandra_commitlog.decoding import CommitLogDecoding
from cdcflow.sources.cassandra_commitlog.events import CommitLogEvents
from cdcflow.sources.cassandra_commitlog.mutation import Mutation, newest_timestamp
from cdcflow.sources.cassandra_commitlog.out_of_sequence import OutOfSequenceStore
from cdcflow.sources.cassandra_commitlog.schema import ColumnSchema, TableSchema
from cdcflow.sources.cql.cqltypes import from_driver

__all__ = ["FullRowImages", "FullRowReader"]


def _bind(column: ColumnSchema) -> str:
    if column.type_text == "blob":
        return f'"{column.name}" = ?'
    return f'"{column.name}" = blobAs{column.type_text}(?)'


class FullRowReader:
    """Reads one row by its raw key values; prepared statements are cached per table id."""

    def __init__(self, session: Any, execution_profile: str | None) -> None:
        self.session = session
        self.execution_profile = execution_profile
        self._statements: dict[str, Any] = {}

    @staticmethod
    def supports(table: TableSchema) -> bool:
        return all(c.type.kind == "native" for c in (*table.partition_key, *table.clustering))

    def read(
        self, table: TableSchema, key_values: Sequence[bytes | None], consistency_level: Any = None
    ) -> dict[str, Any] | None:
        """The row as event values, or None when it does not exist (any more)."""
        statement = self._statements.get(table.table_id)
        if statement is None:
            keys = (*table.partition_key, *table.clustering)
            where = " AND ".join(_bind(c) for c in keys)
            statement = self.session.prepare(f'SELECT * FROM "{table.keyspace}"."{table.table}" WHERE {where}')
            self._statements[table.table_id] = statement
        bound = statement.bind(list(key_values))
        if consistency_level is not None:
            bound.consistency_level = consistency_level
        profile = self.execution_profile if consistency_level is None else None
        result = self.session.execute(bound, execution_profile=profile) if profile else self.session.execute(bound)
        row = result.one()
        if row is None:
            return None
        columns = {c.name: c for c in (*table.partition_key, *table.clustering, *table.columns.values())}
        return {
            name: from_driver(value, columns[name].type)
            for name, value in zip(result.column_names, row, strict=True)
            if name in columns
        }


@dataclass(slots=True)
class _PendingRow:
    """A row changed in the range, waiting to be read back."""

    table: TableSchema
    raw_key: tuple[bytes | None, ...]
    change: RowChange
    op: str  # c if the row was inserted in the range, else the last change's op
    segment: int
    position: int


class FullRowImages:
    """``row_image: full``: events carrying the whole row, read back once its time bucket closed."""

    def __init__(
        self,
        rows: FullRowReader,
        out_of_sequence: OutOfSequenceStore,
        events: CommitLogEvents,
        decoding: CommitLogDecoding,
        window_count: int,
        window_interval_ms: int,
        logger: logging.Logger,
    ) -> None:
        self._rows = rows
        self._out_of_sequence = out_of_sequence
        self._events = events
        self._decoding = decoding
        self._window_count = window_count
        self._interval_us = window_interval_ms * 1000
        self._logger = logger
        # Every time bucket before this (µs) is closed and was processed; a change older than it
        # that shows up later is out of sequence.
        self._closed_before_us = 0
        self._late_before_us = 0
        self._horizon_us = 0

    def horizon(self) -> int:
        """The start of the oldest open time bucket now (µs): every change before it can be read
        back; the latest-offset walk stops before the first change at or after it."""
        now_bucket = time.time_ns() // 1000 // self._interval_us
        self._horizon_us = (now_bucket - self._window_count + 1) * self._interval_us
        return self._horizon_us

    def walked_to_open_buckets(self) -> None:
        """The walk reached the open buckets: everything before them has now been seen, so those
        buckets are closed. What a range holds from before the previous horizon came after its
        bucket was processed."""
        self._late_before_us = self._closed_before_us
        self._closed_before_us = self._horizon_us

    def events(self, mutations: Iterator[tuple[Mutation, int, int]]) -> Iterator[Record]:
        """Each row changed in the range once, read back from the local node after the range; then
        the changes that arrived late (a poll of the out-of-sequence store each read).

        Partition and range deletions, static rows and tables whose key the reader cannot bind
        stay delta events, in place. A change older than the buckets already processed goes to the
        out-of-sequence store instead.
        """
        yield from self._range_events(mutations)
        yield from self._out_of_sequence_events()

    def _range_events(self, mutations: Iterator[tuple[Mutation, int, int]]) -> Iterator[Record]:
        pending: dict[tuple[str, tuple[bytes | None, ...]], _PendingRow] = {}
        now_ms = int(time.time() * 1000)
        cluster = self._events.cluster
        for mutation, segment_id, position in mutations:
            schema_updates = [u for u in mutation.updates if u.table.keyspace == "system_schema"]
            yield from self._events.schema_events(schema_updates, segment_id, position, now_ms)
            for update in self._events.emitted_updates(mutation):
                late = 0 < newest_timestamp(update) < self._late_before_us
                changes = list(row_changes(update))
                row_changes_of_rows = changes[len(changes) - len(update.rows) :] if update.rows else []
                keyed = self._rows.supports(update.table) and not late
                for index, change in enumerate(changes[: len(changes) - len(row_changes_of_rows)]):
                    yield self._events.event(
                        change, update.table.row_schema(cluster), segment_id, position, index, now_ms
                    )
                for row, change in zip(update.rows, row_changes_of_rows, strict=True):
                    raw_key = (*update.key_parts, *row.clustering)
                    if late:
                        self._out_of_sequence.save(update.table, raw_key, change.op, change.ts_us)
                        self._logger.info(
                            "a change to %s.%s arrived after its time bucket closed: stored, read back at QUORUM",
                            update.table.keyspace,
                            update.table.table,
                        )
                    elif not keyed:
                        yield self._events.event(
                            change, update.table.row_schema(cluster), segment_id, position, 0, now_ms
                        )
                    else:
                        slot = (update.table.table_id, raw_key)
                        previous = pending.pop(slot, None)  # re-inserted: ordered by its last change
                        op = "c" if change.op == "c" or (previous is not None and previous.op == "c") else change.op
                        pending[slot] = _PendingRow(update.table, raw_key, change, op, segment_id, position)
        for index, pending_row in enumerate(pending.values()):
            yield self._read_back(pending_row, index, now_ms)

    def _read_back(self, row: _PendingRow, index: int, now_ms: int, consistency_level: Any = None) -> ChangeEvent:
        try:
            state = self._rows.read(row.table, row.raw_key, consistency_level)
        except Exception as exc:  # the driver's errors: timeouts, unavailable, a node going down
            raise SourceUnavailableError(f"reading back {row.table.keyspace}.{row.table.table}: {exc}") from exc
        change = row.change
        op = "d" if state is None else ("u" if row.op == "d" else row.op)
        full = RowChange(op, change.keyspace, change.table, change.key, None if state is None else {}, change.ts_us)
        schema = row.table.row_schema(self._events.cluster)
        event = self._events.event(full, schema, row.segment, row.position, index, now_ms)
        event.after = state
        return event

    def _out_of_sequence_events(self) -> Iterator[Record]:
        """Changes that arrived after their bucket closed, read back at QUORUM (seed 001's OutOfSequenceProcessor)."""
        from cassandra import ConsistencyLevel

        now_ms = int(time.time() * 1000)
        for index, late in enumerate(self._out_of_sequence.pending(self._decoding.catalog)):
            table = late.table
            columns = (*table.partition_key, *table.clustering)
            key = {
                c.name: None if raw is None else c.type.decode(raw)
                for c, raw in zip(columns, late.raw_key, strict=False)
            }
            change = RowChange(late.op, table.keyspace, table.table, key, {}, late.ts_us)
            row = _PendingRow(table, late.raw_key, change, late.op, 0, 0)
            yield self._read_back(row, index, now_ms, ConsistencyLevel.QUORUM)
            self._out_of_sequence.emitted(late)

    def forget_emitted(self) -> None:
        """The late changes emitted so far are durable downstream: drop them from the store."""
        self._out_of_sequence.forget_emitted()
