"""Change events that travel in compact form: one source partition's events held by the compiled
core, encoded to Kafka messages without a Python object per event or per value.

A source that builds its events in the compiled core (``datagen``) offers them as batches
(:class:`~cdcflow.capabilities.ReadsEventBatches`); the runtime takes that path only when every
stage has a batch form (:class:`~cdcflow.capabilities.TransformsEventBatches`,
:class:`~cdcflow.capabilities.WritesEventBatches`), and any stage may decline a batch, which then goes on
as the :class:`~cdcflow.events.ChangeEvent` objects :meth:`EventBatch.records` builds: exactly
the events ``read`` gives for the same offsets, so offsets, determinism and rejections are the
plugin contract's either way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from cdcflow.events import ChangeEvent, Op, RowSchema, SourceInfo
from cdcflow.native import native_module

__all__ = ["BatchTable", "EncodedMessages", "EventBatch"]

# What the compiled core gives for a column a delta row did not touch: left out of the row's dict.
_ABSENT = getattr(native_module(), "ABSENT", object())


class EncodedMessages(NamedTuple):
    """A batch as Kafka messages, one entry each in every list: the index of the table (in
    ``batch.tables``) whose destination it goes to, the index of the event it comes from, its key,
    its value (None: a tombstone) and the event's own headers (None: none, and a tombstone's are
    the sink's)."""

    tables: list[int]
    events: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, str | bytes | None]] | None]


@dataclass(frozen=True, slots=True)
class BatchTable:
    """A table whose events a batch holds: its schema, where its events say they come from, and
    the topic a transform routed them to (None: the default ``<cluster>.<keyspace>.<table>``)."""

    schema: RowSchema
    system: str
    cluster: str
    keyspace: str
    table: str
    topic: str | None = None
    version: str = ""

    def default_topic(self) -> str:
        return f"{self.cluster}.{self.keyspace}.{self.table}"

    def destination(self) -> str:
        """Where the table's events go, as :meth:`ChangeEvent.destination` says for each."""
        return self.topic if self.topic is not None else self.default_topic()


class EventBatch:
    """Events of one source partition in the compiled core's compact form (``events``, a
    ``cdcflow._native.EventBatch``), with the tables they belong to. Python objects are built
    only when asked for (:meth:`records`, :meth:`record`)."""

    __slots__ = ("_key_names", "_value_names", "events", "tables")

    def __init__(self, events: Any, tables: Sequence[BatchTable]) -> None:
        self.events = events
        self.tables = tuple(tables)
        self._key_names = [tuple(c.name for c in t.schema.key_columns) for t in self.tables]
        self._value_names = [tuple(c.name for c in t.schema.value_columns) for t in self.tables]

    def __len__(self) -> int:
        return len(self.events)

    def with_topics(self, topics: Sequence[str | None]) -> EventBatch:
        """The same events with each table routed to ``topics[i]``."""
        if len(topics) != len(self.tables):
            raise ValueError(f"{len(topics)} topics for {len(self.tables)} tables")
        return EventBatch(self.events, [replace(t, topic=topic) for t, topic in zip(self.tables, topics, strict=True)])

    def record(self, index: int) -> ChangeEvent:
        """The ``index``-th event as a :class:`ChangeEvent`."""
        return self._event(self.events.event(index))

    def records(self) -> list[ChangeEvent]:
        """Every event as a :class:`ChangeEvent`, in order: what the source's ``read`` gives."""
        return [self._event(raw) for raw in self.events.events()]

    def first_of_table(self, table: int) -> int | None:
        """The index of the batch's first event of ``tables[table]``, None when it has none."""
        found: int | None = self.events.first_of_table(table)
        return found

    def _event(self, raw: tuple[Any, ...]) -> ChangeEvent:
        op, table_index, key, before, after, position, ts_us, headers = raw
        table = self.tables[table_index]
        values = self._value_names[table_index]
        source = SourceInfo(
            table.system,
            table.cluster,
            table.keyspace,
            table.table,
            self.events.partition,
            json.loads(position),
            ts_us,
            self.events.snapshot,
            table.version,
        )
        return ChangeEvent(
            Op(op),
            _row(self._key_names[table_index], key),
            None if before is None else _row(values, before),
            None if after is None else _row(values, after),
            source,
            self.events.ts_ms,
            table.schema,
            table.topic,
            headers=headers,
        )


def _row(names: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
    """A compact row as the event's dict: the columns it holds a value for, in column order."""
    return {name: value for name, value in zip(names, values, strict=True) if value is not _ABSENT}
